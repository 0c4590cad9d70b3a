"""The PSGuard profile (psguard.txt, Srivatsa and Liu, "Secure Event Dissemination in
Publish-Subscribe Networks"): key-tree authorisation by a stateless KDC, tokenised routing with
randomized tokens, sealed secret attributes; served on the broker network as ``psguard``
(brokers check the publisher's signature) and ``psguard-paper`` (brokers only route, §2).

Where each part lives:

- :mod:`~pubguard.schemes.psguard.tokens`: routing tokens, what an event and a filter look
  like to a broker (§4.1 tokenization, §3.1 NAKT).
- :mod:`~pubguard.schemes.psguard.record`: the schema's scopes, the protected record, its
  signed form, the broker's reference checks and the counting match.
- :mod:`~pubguard.schemes.psguard.keytree`: ``K(e)`` and the key-tree leaves it is built from,
  the contract between publisher and authority (§3.1).
- :mod:`~pubguard.schemes.psguard.publisher` / :mod:`~pubguard.schemes.psguard.authority`:
  the publisher's and the KDC's sides, and a subscriber's :class:`FilterKeys`.
- :mod:`~pubguard.schemes.psguard.keyservice`: the KDC of one deployment with its policy and
  key epochs (§3.2).
- :mod:`~pubguard.schemes.psguard.wire`, :mod:`~pubguard.schemes.psguard.match`,
  :mod:`~pubguard.schemes.psguard.routing`: the wire forms, the broker's token index and the
  broker hooks the psguard and default profiles share.
- :mod:`~pubguard.schemes.psguard.broker` / :mod:`~pubguard.schemes.psguard.client`: the
  profile's broker and client faces on the network.
- :mod:`~pubguard.schemes.psguard.scheme`: the profile through the generic
  :class:`~pubguard.schemes.base.Scheme` protocol (one object, both faces).

This face exports the profile's public names. The key-tree derivations and the token
primitives are the package's own contract: import them from their module.
"""

from pubguard.schemes.psguard.authority import Authority, FilterKeys, ScopeKeys
from pubguard.schemes.psguard.broker import TRUST, VERIFY_MODES, PSGuardBroker, make_scheme
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import (
    DEFAULT_EPOCH_LENGTH,
    NEXT_EPOCH_WINDOW,
    PSGuardKeyService,
    filter_id,
)
from pubguard.schemes.psguard.match import TokenMatcher
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import (
    DEFAULT_MAX_DELAY_MS,
    MODES,
    PROFILE,
    PSGUARD_PAPER,
    ProtectedFilterRows,
    ProtectedRecord,
    Schema,
    broker_match,
    check_record,
    decode_secrets,
    encode_secrets,
    signed_message,
    verify_record,
    with_sig,
)
from pubguard.schemes.psguard.routing import TokenRouting
from pubguard.schemes.psguard.scheme import PSGuardScheme
from pubguard.schemes.psguard.wire import (
    MAX_EVENT_TAGS,
    MAX_FILTER_TOKENS,
    ROOT_TAG,
    TokenEvent,
    TokenFilter,
    batch_fields,
    filter_to_wire,
    parse_filter,
    parse_routing,
    record_from_wire,
    record_to_wire,
    signed_from_wire,
)

__all__ = [
    "DEFAULT_EPOCH_LENGTH",
    "DEFAULT_MAX_DELAY_MS",
    "MAX_EVENT_TAGS",
    "MAX_FILTER_TOKENS",
    "MODES",
    "NEXT_EPOCH_WINDOW",
    "PROFILE",
    "PSGUARD_PAPER",
    "ROOT_TAG",
    "TRUST",
    "VERIFY_MODES",
    "Authority",
    "FilterKeys",
    "PSGuardBroker",
    "PSGuardClient",
    "PSGuardKeyService",
    "PSGuardScheme",
    "ProtectedFilterRows",
    "ProtectedRecord",
    "Publisher",
    "Schema",
    "ScopeKeys",
    "TokenEvent",
    "TokenFilter",
    "TokenMatcher",
    "TokenRouting",
    "batch_fields",
    "broker_match",
    "check_record",
    "decode_secrets",
    "encode_secrets",
    "filter_id",
    "filter_to_wire",
    "make_scheme",
    "parse_filter",
    "parse_routing",
    "record_from_wire",
    "record_to_wire",
    "signed_from_wire",
    "signed_message",
    "verify_record",
    "with_sig",
]

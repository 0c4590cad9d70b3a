"""The composed default profile: PSGuard's authorisation and unlinkable tokens (psguard.txt
§3-§4.1), EventGuard's publisher signatures over Merkle roots and flood containment
(eventguard.txt §4.4, §4.7), Narada's replay defence and revocation (narada §IV-H1, §V-B),
and per-attribute AEAD. The reasoning behind the composition is in docs/profiles.md.

Where each part lives:

- :mod:`~pubguard.schemes.default.broker`: the wire forms, the authority's permits and the
  broker face.
- :mod:`~pubguard.schemes.default.client`: the client face and the authority (a PSGuard KDC
  that also signs permits).
- Borrowed parts stay in their profile: PSGuard records, wire forms and token routing in
  :mod:`pubguard.schemes.psguard`; guards, Merkle batches, replay state and the revocation
  list in :mod:`pubguard.schemes.common`.
"""

from pubguard.schemes.default.broker import (
    DEFAULT,
    PUBLISH,
    ROOT_TAG,
    SUBSCRIBE,
    AuthorityPermit,
    DefaultBroker,
    filter_digest,
    leaf_digest,
    make_scheme,
    merkle_fields,
    parse_publication,
    withdrawal_digest,
)
from pubguard.schemes.default.client import DefaultAuthority, DefaultClient

__all__ = [
    "DEFAULT",
    "PUBLISH",
    "ROOT_TAG",
    "SUBSCRIBE",
    "AuthorityPermit",
    "DefaultAuthority",
    "DefaultBroker",
    "DefaultClient",
    "filter_digest",
    "leaf_digest",
    "make_scheme",
    "merkle_fields",
    "parse_publication",
    "withdrawal_digest",
]

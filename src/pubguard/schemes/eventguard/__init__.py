"""The EventGuard profile (eventguard.txt, "Securing Publish-Subscribe Overlay Services with
EventGuard"): topics replaced by tokens ``T(w)``, the trusted meta-service's signed permits,
the six guards at every broker (subscribe, advertise, publish, unsubscribe, unadvertise and
routing, §4.2-§4.7), publications signed by their publisher and encrypted under a random key
wrapped per topic and epoch.

Where each part lives:

- :mod:`~pubguard.schemes.eventguard.wire`: the publication's fields, the digest its publisher
  signs, the AEAD associated data and the strict parsers a broker runs.
- :mod:`~pubguard.schemes.eventguard.broker`: the broker face, the six guards, and the wire
  table in its docstring.
- :mod:`~pubguard.schemes.eventguard.client`: subscribers and publishers, talking to the
  meta-service (:mod:`pubguard.keys.ms`) for permits and epoch keys (§4.8).
"""

from pubguard.schemes.eventguard.broker import EventGuardBroker, make_scheme
from pubguard.schemes.eventguard.client import EventGuardClient, MetaServiceLike, topic_of
from pubguard.schemes.eventguard.wire import (
    EVENTGUARD,
    LEAF_TAG,
    MAX_TOPICS,
    ROOT_TAG,
    TOKEN_BYTES,
    PublicationFields,
    PublicationMeta,
    body_aad,
    key_aad,
    leaf_digest,
    leaf_digest_fast,
    pack_items,
    pack_tokens,
    parse_meta,
    parse_publication,
    parse_tokens,
    unpack_items,
)

__all__ = [
    "EVENTGUARD",
    "LEAF_TAG",
    "MAX_TOPICS",
    "ROOT_TAG",
    "TOKEN_BYTES",
    "EventGuardBroker",
    "EventGuardClient",
    "MetaServiceLike",
    "PublicationFields",
    "PublicationMeta",
    "body_aad",
    "key_aad",
    "leaf_digest",
    "leaf_digest_fast",
    "make_scheme",
    "pack_items",
    "pack_tokens",
    "parse_meta",
    "parse_publication",
    "parse_tokens",
    "topic_of",
    "unpack_items",
]

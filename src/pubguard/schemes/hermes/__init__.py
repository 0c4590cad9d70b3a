"""Hermes: encryption-enforced access control in multi-domain broker networks
(hermes-encrypted-access-control.txt). Brokers encrypt, clients hold no keys.

- :mod:`.secure_types`: type ids, attribute ids, owner-signed type definitions (§2.2, §3.1-3.2)
- :mod:`.capability`: ``<type, action, attributes>`` capabilities, validity, revocation (§2.3, §4)
- :mod:`.keygroups`: key-group manager over OFT, broker keyrings, refresh (§4, Figs. 4-5)
- :mod:`.nonces`: the PHB's persisted monotonic nonce counter (§3.5)
- :mod:`.content`: event / attribute / filter sealing (§3.1-3.3, §3.5)
- :mod:`.broker`, :mod:`.client`: the ``hermes-event`` and ``hermes-attribute`` profiles
- :mod:`.rendezvous`: type -> rendezvous node (§2.1, Fig. 2)
- :mod:`.deployment`: the ``[hermes]`` table of a cluster configuration
"""

from pubguard.schemes.hermes.broker import (
    HERMES_ATTRIBUTE,
    HERMES_EVENT,
    HermesBroker,
    HermesEvent,
    HermesMatcher,
)
from pubguard.schemes.hermes.capability import ALL, Capability, RevocationSet, check_capability
from pubguard.schemes.hermes.client import HermesClient
from pubguard.schemes.hermes.content import Crypter, OpenedFilter, TypeView
from pubguard.schemes.hermes.deployment import HermesSettings, parse_hermes
from pubguard.schemes.hermes.keygroups import BrokerKeyring, JoinResult, KeyGroupManager
from pubguard.schemes.hermes.nonces import NonceCounter
from pubguard.schemes.hermes.rendezvous import rendezvous_node
from pubguard.schemes.hermes.secure_types import SecureEventType, attribute_id, type_id

__all__ = [
    "ALL",
    "HERMES_ATTRIBUTE",
    "HERMES_EVENT",
    "BrokerKeyring",
    "Capability",
    "Crypter",
    "HermesBroker",
    "HermesClient",
    "HermesEvent",
    "HermesMatcher",
    "HermesSettings",
    "JoinResult",
    "KeyGroupManager",
    "NonceCounter",
    "OpenedFilter",
    "RevocationSet",
    "SecureEventType",
    "TypeView",
    "attribute_id",
    "check_capability",
    "parse_hermes",
    "rendezvous_node",
    "type_id",
]

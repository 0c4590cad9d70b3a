"""The NaradaBrokering secure-delivery profile (narada-secure-delivery.txt, Pallickara et al.,
"A Framework for Secure End-to-End Delivery of Messages in Publish/Subscribe Systems"): topics
routed in clear, payloads signed and encrypted under KMC-issued topic keys, every action
carrying the entity's KMC security token and certificate (§IV), brokers checking tokens,
rights and the CRL, and per-entity replay defence by timestamp and sequence number (§V-B).

Where each part lives:

- :mod:`~pubguard.schemes.narada.broker`: the wire forms, the signed digest and the broker
  face with its checks (§IV-H, Fig. 3).
- :mod:`~pubguard.schemes.narada.fast`: the same publication checks on the native backend
  (``pubguard._native``), one call per run of publications.
- :mod:`~pubguard.schemes.narada.client`: publishers and subscribers holding KMC key
  deliveries, and the client of the KMC's own service topics
  (:class:`~pubguard.schemes.narada.client.KmcScheme`).
- The replay state and verified-token cache it shares with the default profile are in
  :mod:`pubguard.schemes.common.replay`; the KMC itself in :mod:`pubguard.keys.kmc`.
"""

from pubguard.schemes.narada.broker import (
    KMC_TOPIC_PREFIX,
    MAX_SERVICE_BODY,
    NARADA,
    REPLY_TOPIC_PREFIX,
    NaradaBroker,
    NaradaFilter,
    make_scheme,
    payload_aad,
    service_kind,
    signed_digest,
)
from pubguard.schemes.narada.client import REPLY_LIFETIME, KmcScheme, NaradaClient

__all__ = [
    "KMC_TOPIC_PREFIX",
    "MAX_SERVICE_BODY",
    "NARADA",
    "REPLY_LIFETIME",
    "REPLY_TOPIC_PREFIX",
    "KmcScheme",
    "NaradaBroker",
    "NaradaClient",
    "NaradaFilter",
    "make_scheme",
    "payload_aad",
    "service_kind",
    "signed_digest",
]

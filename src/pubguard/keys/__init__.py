"""Key services (ARCHITECTURE.md, keys layer): EventGuard's meta-service (``ms``), PSGuard's
stateless KDC and key trees (``nakt``, ``kdc``, ``cache``). Derivations are documented with
vectors in docs/key-derivation.md."""

from pubguard.keys.cache import DEFAULT_CACHE_CAPACITY, KeyCache
from pubguard.keys.groups import SubscriberGroupManager, analytical_ratio, simulate_churn
from pubguard.keys.kdc import (
    KDC,
    CategoryTree,
    TopicKeys,
    derive_category,
    derive_prefix,
    derive_suffix,
)
from pubguard.keys.kmc import (
    KMC,
    Authorize,
    KeyDelivery,
    KeyRequest,
    RegisterTopic,
    RevokeEntity,
    Rights,
    SecurityToken,
    TopicInfo,
    open_delivery,
    verify_token,
)
from pubguard.keys.ms import (
    AdvertisementGrant,
    AdvertisementPermit,
    MetaService,
    Permit,
    PermitKind,
    SubscriptionGrant,
    SubscriptionPermit,
    UnadvertisementPermit,
    UnsubscriptionPermit,
    decode_permit,
    verify_permit,
)
from pubguard.keys.nakt import derive_from, ktid, ktid_range, nakt_cover, nakt_depth
from pubguard.keys.oft import GroupKey, GroupKeyRing, OFTGroup, OFTMember, Rekey, Welcome

__all__ = [
    # kdc / nakt / cache (psguard.txt §3)
    "DEFAULT_CACHE_CAPACITY",
    "KDC",
    "CategoryTree",
    "KeyCache",
    "TopicKeys",
    "derive_category",
    "derive_from",
    "derive_prefix",
    "derive_suffix",
    "ktid",
    "ktid_range",
    "nakt_cover",
    "nakt_depth",
    # ms (eventguard.txt §4)
    "AdvertisementGrant",
    "AdvertisementPermit",
    "MetaService",
    "Permit",
    "PermitKind",
    "SubscriptionGrant",
    "SubscriptionPermit",
    "UnadvertisementPermit",
    "UnsubscriptionPermit",
    "decode_permit",
    "verify_permit",
    # kmc (narada-secure-delivery.txt §IV)
    "KMC",
    "Authorize",
    "KeyDelivery",
    "KeyRequest",
    "RegisterTopic",
    "RevokeEntity",
    "Rights",
    "SecurityToken",
    "TopicInfo",
    "open_delivery",
    "verify_token",
    # oft (hermes-encrypted-access-control.txt §4.1-4.2)
    "GroupKey",
    "GroupKeyRing",
    "OFTGroup",
    "OFTMember",
    "Rekey",
    "Welcome",
    # groups (psguard.txt §3.2 subscriber-group baseline)
    "SubscriberGroupManager",
    "analytical_ratio",
    "simulate_churn",
]

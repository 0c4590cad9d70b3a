"""What several profiles share, each part from the paper that introduced it:

- :mod:`~pubguard.schemes.common.guards`: the stateless broker guards (eventguard.txt §4.7
  timestamp and id windows, §4.2 id bindings; narada §V-A strike counters), signed Merkle
  roots, the exact-value filter index and the signed-field encoding.
- :mod:`~pubguard.schemes.common.guard_check`: the frame every guarded ``broker_check`` shares.
- :mod:`~pubguard.schemes.common.replay`: Narada's replay state and verified-token cache
  (narada §V-B, §VI), optionally in SQLite.
- :mod:`~pubguard.schemes.common.merkle`: Merkle batches for amortised signing.
- :mod:`~pubguard.schemes.common.verified`: the subscriber's cache of verified credentials.
- :mod:`~pubguard.schemes.common.revocation_list`: the authority's signed revocation list and
  the broker-side rule for taking it in.
"""

from pubguard.schemes.common.guard_check import GUARD_STRIKING, checked
from pubguard.schemes.common.guards import (
    DEFAULT_MAX_DELAY,
    DEFAULT_STRIKES,
    ExactMatcher,
    IdBindings,
    IdWindow,
    SignedRootVerifier,
    StrikeCounter,
    TimestampWindow,
    TTLCache,
    pack_fields,
)
from pubguard.schemes.common.merkle import (
    MAX_BATCH,
    MAX_PATH,
    PACKED_PATH_LENGTHS,
    NodeMap,
    check_packed_path,
    climb,
    merkle_batch,
    merkle_root,
    pack_path,
    root_from_path,
    signed_root,
    unpack_path,
)
from pubguard.schemes.common.replay import (
    DEFAULT_REPLAY_RESERVE,
    DEFAULT_TOKEN_MAX_USES,
    DEFAULT_TOKEN_TTL,
    ReplayState,
    TokenCache,
)
from pubguard.schemes.common.revocation_list import (
    DEFAULT_MAX_AGE,
    MAX_ENTRIES,
    MAX_LIST_BYTES,
    MAX_SKEW,
    REVOCATION_TAG,
    FeedVerdict,
    RevocationFeed,
    SignedRevocations,
    apply_revocations,
)
from pubguard.schemes.common.verified import DEFAULT_CAPACITY, DEFAULT_TTL, VerifiedCredentials

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_MAX_AGE",
    "DEFAULT_MAX_DELAY",
    "DEFAULT_REPLAY_RESERVE",
    "DEFAULT_STRIKES",
    "DEFAULT_TOKEN_MAX_USES",
    "DEFAULT_TOKEN_TTL",
    "DEFAULT_TTL",
    "GUARD_STRIKING",
    "MAX_BATCH",
    "MAX_ENTRIES",
    "MAX_LIST_BYTES",
    "MAX_PATH",
    "MAX_SKEW",
    "PACKED_PATH_LENGTHS",
    "REVOCATION_TAG",
    "ExactMatcher",
    "FeedVerdict",
    "IdBindings",
    "IdWindow",
    "NodeMap",
    "ReplayState",
    "RevocationFeed",
    "SignedRevocations",
    "SignedRootVerifier",
    "StrikeCounter",
    "TTLCache",
    "TimestampWindow",
    "TokenCache",
    "VerifiedCredentials",
    "apply_revocations",
    "check_packed_path",
    "checked",
    "climb",
    "merkle_batch",
    "merkle_root",
    "pack_fields",
    "pack_path",
    "root_from_path",
    "signed_root",
    "unpack_path",
]

"""v-CAPS (vcaps.txt): the publisher computes routing vectors; brokers route by filter ID.

Profiles ``vcaps-rv`` (§4), ``vcaps-srv`` (§5, Song-Wagner-Perrig) and ``vcaps-srv-fast`` (ours:
per-notification PRF codewords). See docs/vcaps.md.
"""

from pubguard.schemes.vcaps.bfposet import BFPoset
from pubguard.schemes.vcaps.broker import VcapsBroker, VcapsMatcher
from pubguard.schemes.vcaps.client import VcapsClient
from pubguard.schemes.vcaps.keyservice import VcapsKeyService
from pubguard.schemes.vcaps.publisher import PROFILES, VcapsPublisher, bucket
from pubguard.schemes.vcaps.swp import SearchToken, SwpKeys
from pubguard.schemes.vcaps.tokens import FAST, RV, SRV, decode_routing, decode_token
from pubguard.schemes.vcaps.tree import VcapsTree

__all__ = [
    "FAST",
    "PROFILES",
    "RV",
    "SRV",
    "BFPoset",
    "SearchToken",
    "SwpKeys",
    "VcapsBroker",
    "VcapsClient",
    "VcapsKeyService",
    "VcapsMatcher",
    "VcapsPublisher",
    "VcapsTree",
    "bucket",
    "decode_routing",
    "decode_token",
]

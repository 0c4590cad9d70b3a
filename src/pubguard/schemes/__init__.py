"""Security profiles: the scheme hook interface and one module per profile (ARCHITECTURE.md)."""

from pubguard.schemes.base import (
    BrokerScheme,
    CheckContext,
    ClientScheme,
    LinearMatcher,
    LinkInfo,
    LinkKind,
    Matcher,
    ProtectedEvent,
    ProtectedFilter,
    Scheme,
    SchemeRegistry,
    WireValue,
    withdrawal_meta,
)
from pubguard.schemes.plain import PLAIN, PlainScheme

__all__ = [
    "PLAIN",
    "BrokerScheme",
    "CheckContext",
    "ClientScheme",
    "LinearMatcher",
    "LinkInfo",
    "LinkKind",
    "Matcher",
    "PlainScheme",
    "ProtectedEvent",
    "ProtectedFilter",
    "Scheme",
    "SchemeRegistry",
    "WireValue",
    "withdrawal_meta",
]

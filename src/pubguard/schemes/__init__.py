"""Security profiles: the scheme hook interface (``base``), the registry, ``plain``, what
profiles share (``common``) and one package per profile (``eventguard``, ``psguard``,
``narada``, ``default``); ARCHITECTURE.md."""

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

"""Blocking proxies for the PSGuard KDC and the default authority served by the key service.

Theory of operation
-------------------
:class:`RemoteKdc` has the interface of
:class:`~pubguard.schemes.psguard.keyservice.PSGuardKeyService` that
:class:`~pubguard.schemes.psguard.client.PSGuardClient` uses (``schema``, ``epoch_at``,
``authorise``, ``publisher``), and :class:`RemoteAuthority` the interface of
:class:`~pubguard.schemes.default.client.DefaultAuthority` that
:class:`~pubguard.schemes.default.client.DefaultClient` uses (``keys``, ``schema``,
``public_key``, ``epoch_at``, ``publish_permit``, ``subscribe_permit``, ``revoked``), so
``PSGuardClient(name, RemoteKdc(ks))`` and ``DefaultClient(name, RemoteAuthority(ks))`` work
unchanged. Both ride on one :class:`~pubguard.net.keyservice.client.KeyServiceClient`
connection (mutual TLS: the service knows the caller from its certificate).

- ``authorise`` rebuilds the routing tokens and the :class:`~pubguard.schemes.psguard.authority.FilterKeys`
  from the ``kdc_authorise`` answer (psguard.txt §3.1); roots of unconstrained attributes come
  with it, so opening a delivery never calls the network.
- ``publisher`` returns a :class:`~pubguard.schemes.psguard.publisher.Publisher` over a KDC stand-in that
  fetches, per scope and epoch, only ``K_e(w)`` and ``T_e(w)`` (``kdc_scope``) and builds the
  key trees below ``K_e(w)`` locally (psguard.txt §3.1: the publisher derives every event key
  from the topic key).
- Permits that come back are checked (authority signature, kind, subject, key, digest) before
  a client uses them. Keys are held as :class:`~pubguard.crypto.SecretBytes` or inside
  :class:`~pubguard.keys.kdc.TopicKeys`; no repr shows them.
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable
from typing import Any, Final, cast

from pubguard.crypto import SecretBytes, VerifyKey
from pubguard.errors import DropError, DropReason, FrameError, InvalidToken, KeyError_, StateError
from pubguard.keys.kdc import KDC, TopicKeys
from pubguard.model import EventType, Filter
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.schemes.default.broker import PUBLISH, SUBSCRIBE, AuthorityPermit
from pubguard.schemes.psguard.authority import FilterKeys, ScopeKeys
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import ProtectedFilterRows, Schema
from pubguard.schemes.psguard.tokens import NodeGrant

__all__ = ["REVOKED_TTL", "RemoteAuthority", "RemoteKdc"]

#: how long a fetched list of revoked keys is used before it is fetched again (seconds)
REVOKED_TTL: Final = 30.0
_TOPIC_CACHE: Final = 1024
_KEY: Final = 32


def _bad(what: str) -> FrameError:
    return FrameError(f"key service: malformed {what}")


def _b(v: Any, what: str, n: int | None = None) -> bytes:
    if type(v) is not bytes or (n is not None and len(v) != n):
        raise _bad(what)
    return v


def _s(v: Any, what: str) -> str:
    if type(v) is not str or not v:
        raise _bad(what)
    return v


def _l(v: Any, what: str, n: int | None = None) -> list[Any]:
    if type(v) is not list or (n is not None and len(v) != n):
        raise _bad(what)
    return v


class _Roots:
    """Roots of the attributes a filter leaves unconstrained (psguard.txt §3.2.1), as the
    KDC issued them; KeyError_ for any other attribute."""

    __slots__ = ("_roots",)

    def __init__(self, roots: dict[tuple[str, str], bytes]) -> None:
        self._roots = roots

    def __repr__(self) -> str:
        return f"_Roots(<{len(self._roots)} secret>)"

    def __call__(self, tree: str, attr: str) -> bytes:
        r = self._roots.get((tree, attr))
        if r is None:
            raise KeyError_(f"no root key of {attr!r} was issued with this filter")
        return r


def _scope_keys(d: Any) -> tuple[str, ScopeKeys]:
    if type(d) is not dict:
        raise _bad("scope keys")
    keys: dict[str, list[tuple[NodeGrant, SecretBytes]]] = {}
    for item in _l(d.get("n"), "cover keys"):
        a, kind, node, k = _l(item, "cover key", 4)
        if type(node) is list:
            node = tuple(_s(x, "category node") for x in node)
        elif type(node) is not str:
            raise _bad("node")
        grant = NodeGrant(_s(kind, "tree kind"), _s(a, "attribute"), node)
        keys.setdefault(grant.attr, []).append((grant, SecretBytes(_b(k, "key", _KEY))))
    agg = {}
    for item in _l(d.get("p"), "aggregates"):
        t, x = _l(item, "aggregate", 2)
        agg[_s(t, "type")] = SecretBytes(_b(x, "aggregate", _KEY))
    roots = {}
    for item in _l(d.get("r"), "roots"):
        tree, a, k = _l(item, "root", 3)
        roots[(_s(tree, "tree"), _s(a, "attribute"))] = _b(k, "root", _KEY)
    sk = SecretBytes(_b(d.get("s"), "scope key", _KEY))
    return _s(d.get("w"), "scope"), ScopeKeys(sk, keys, agg, _Roots(roots))


def _rows(fid: str, v: Any) -> ProtectedFilterRows:
    groups = tuple(
        tuple(tuple(_b(t, "token") for t in _l(g, "group")) for g in _l(scope, "scope groups"))
        for scope in _l(v, "token rows")
    )
    return ProtectedFilterRows(fid, groups)


class _EpochKdc:
    """What a :class:`Publisher` calls on its KDC, for one publisher and one epoch: the topic
    keys and tokens of its scopes, fetched on first use and memoised."""

    __slots__ = ("_epoch", "_name", "_owner")

    def __init__(self, owner: RemoteKdc, name: str, epoch: int | None) -> None:
        self._owner, self._name, self._epoch = owner, name, epoch

    def __repr__(self) -> str:
        return f"_EpochKdc({self._name!r}, epoch={self._epoch}, <secret>)"

    def for_epoch(self, epoch: int) -> _EpochKdc:
        return _EpochKdc(self._owner, self._name, epoch)

    def _get(self, w: str) -> tuple[TopicKeys, bytes]:
        if self._epoch is None:
            raise StateError("a publisher's KDC is used for one epoch (for_epoch first)")
        return self._owner._scope(self._name, w, self._epoch)

    def topic(self, w: str, publisher: str | None = None) -> TopicKeys:
        if publisher is not None:
            raise KeyError_("per-publisher topic keys are not served over the network")
        return self._get(w)[0]

    def topic_token(self, w: str) -> bytes:
        return self._get(w)[1]


class RemoteKdc:
    """The PSGuard KDC of a key service (see the module docstring)."""

    def __init__(self, client: KeyServiceClient) -> None:
        self.client = client
        self._info: dict[str, Any] | None = None
        self._schema: Schema | None = None
        self._topics: dict[tuple[str, int, str], tuple[TopicKeys, bytes]] = {}

    def __repr__(self) -> str:
        return f"RemoteKdc({self.client!r})"

    def info(self) -> dict[str, Any]:
        if self._info is None:
            out = self.client.call("info")
            kdc = out.get("kdc")
            if type(kdc) is not dict:
                raise StateError("this key service hosts no KDC")
            self.client.identity = out.get("identity")
            self._info = kdc
        return self._info

    @property
    def schema(self) -> Schema:
        if self._schema is None:
            try:
                self._schema = Schema([EventType.from_json(t) for t in self.info()["schema"]])
            except (KeyError, TypeError, ValueError, AttributeError):
                raise _bad("schema") from None
        return self._schema

    @property
    def epoch_length(self) -> float:
        return float(self.info()["epoch_length"])

    @property
    def origin(self) -> float:
        return float(self.info()["origin"])

    def epoch_at(self, now: float) -> int:
        return max(0, int((now - self.origin) // self.epoch_length))

    def authorise(
        self, subscriber: str, f: Filter, *, epoch: int
    ) -> tuple[ProtectedFilterRows, FilterKeys]:
        """psguard.txt §3.1/§4.1: the filter's routing tokens and its authorisation keys, in
        the caller's name (DropError UNAUTHORISED outside its policy)."""
        if f.id is None:
            raise KeyError_("psguard: filters need an id")
        ok = self.client.call(
            "kdc_authorise", subject=subscriber, filter=str(f), fid=f.id, epoch=epoch
        )
        if ok.get("epoch") != epoch:
            raise _bad("epoch")
        scopes = dict(_scope_keys(d) for d in _l(ok.get("keys"), "filter keys"))
        return _rows(f.id, ok.get("rows")), FilterKeys(f, scopes, self.schema, epoch)

    def publisher(
        self, name: str, signing_key: Any, *, epoch: int, mode: str = "randomized"
    ) -> Publisher:
        """A :class:`Publisher` for ``name`` (the caller) whose KDC fetches the keys of its
        own scopes only (DropError UNAUTHORISED if it may not publish)."""
        self.client.call("kdc_publisher", subject=name, epoch=epoch)
        return Publisher(
            cast(KDC, _EpochKdc(self, name, None)),
            self.schema,
            name=name,
            signing_key=signing_key,
            epoch=epoch,
            mode=mode,
        )

    def _scope(self, name: str, w: str, epoch: int) -> tuple[TopicKeys, bytes]:
        k = (name, epoch, w)
        got = self._topics.get(k)
        if got is None:
            ok = self.client.call("kdc_scope", subject=name, scope=w, epoch=epoch)
            tk = TopicKeys(SecretBytes(_b(ok.get("key"), "topic key", _KEY)))
            if len(self._topics) >= _TOPIC_CACHE:
                self._topics.clear()
            got = self._topics[k] = (tk, _b(ok.get("token"), "topic token", _KEY))
        return got


class RemoteAuthority:
    """The default profile's authority of a key service (see the module docstring).
    ``authority_key``: pin the authority's public key (else taken from the service);
    ``clock``: for the :data:`REVOKED_TTL` refresh of :attr:`revoked`."""

    def __init__(
        self,
        client: KeyServiceClient,
        *,
        authority_key: VerifyKey | None = None,
        revoked_ttl: float = REVOKED_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.keys = RemoteKdc(client)
        self._pk = authority_key
        self._ttl, self._clock = revoked_ttl, clock
        self._revoked: tuple[float, set[bytes]] | None = None

    def __repr__(self) -> str:
        return f"RemoteAuthority({self.client!r})"

    @property
    def public_key(self) -> VerifyKey:
        if self._pk is None:
            self._pk = VerifyKey.from_bytes(_b(self.keys.info().get("authority_key"), "key"))
        return self._pk

    @property
    def schema(self) -> Schema:
        return self.keys.schema

    def epoch_at(self, now: float) -> int:
        return self.keys.epoch_at(now)

    @property
    def revoked(self) -> set[bytes]:
        """The revoked publisher keys (fetched again after ``revoked_ttl`` seconds)."""
        t = self._clock()
        if self._revoked is None or t - self._revoked[0] >= self._ttl:
            ok = self.client.call("authority_revoked")
            self._revoked = (t, {_b(k, "revoked key") for k in _l(ok.get("keys"), "keys")})
        return self._revoked[1]

    def _checked(self, ok: dict[str, Any], kind: str, name: str, key: VerifyKey) -> AuthorityPermit:
        try:
            p = AuthorityPermit.decode(_b(ok.get("permit"), "permit"))
        except (ValueError, TypeError, KeyError):
            raise _bad("permit") from None
        p.verify(self.public_key)  # InvalidToken unless the authority signed it
        if p.kind != kind or p.subject != name or p.key != key.to_bytes():
            raise InvalidToken()
        return p

    def publish_permit(
        self,
        name: str,
        key: VerifyKey,
        *,
        now: float,
        serial: int = 0,
        rng: _random.Random | None = None,
    ) -> AuthorityPermit:
        ok = self.client.call(
            "authority_publish_permit", subject=name, key=key.to_bytes(), serial=serial
        )
        return self._checked(ok, PUBLISH, name, key)

    def subscribe_permit(
        self,
        name: str,
        key: VerifyKey,
        digest: bytes,
        *,
        now: float,
        rng: _random.Random | None = None,
    ) -> AuthorityPermit:
        ok = self.client.call(
            "authority_subscribe_permit",
            subject=name,
            key=key.to_bytes(),
            digest=digest,
            epoch=self.epoch_at(now),
        )
        p = self._checked(ok, SUBSCRIBE, name, key)
        if p.digest != digest:
            raise InvalidToken()
        return p

    def revoke(self, key: Any) -> None:
        raise DropError(DropReason.UNAUTHORISED, "revocation happens at the key service")

"""The PSGuard KDC and the default profile's authority as key-service ops.

Theory of operation
-------------------
psguard.txt §3 has a key distribution centre hand subscribers the authorisation keys ``K(f)``
of the filters they may use and publishers the topic keys ``K(w)`` of the topics they publish
on; the default profile's :class:`~pubguard.schemes.default.client.DefaultAuthority` is that
KDC plus a permit signer. :class:`KdcService` hosts both inside the key-service process
(:class:`~pubguard.net.keyservice.core.KeyServiceCore` dispatches the ``kdc_*`` and
``authority_*`` ops here); :mod:`pubguard.net.keyservice.kdc_client` is the client side.

What each op gives, to whom (the caller is always the verified certificate's CN, ``peer``;
a ``subject`` field naming someone else is refused with ``unauthorised``, and so is every
certificate whose role is not ``client``: a broker, even under an open policy, gets no key):

- ``kdc_authorise {subject, filter, fid, epoch}``: the filter's routing tokens and ``K(f)``
  (psguard.txt §3.1 minimal covers, §4.1 tokens) if the policy lets ``peer`` subscribe to it.
  ``K(f)`` travels as its parts: the scope key ``S(w)``, the cover keys per constrained
  attribute, the aggregate ``P`` per candidate type, and the roots of the routable attributes
  the filter leaves unconstrained (what the in-process KDC issues on demand, §3.2.1).
- ``kdc_publisher {subject, epoch}``: whether ``peer`` may publish at all (its scopes, or
  ``None`` when the policy allows every scope). ``kdc_scope {subject, scope, epoch}``: the
  topic key ``K_e(w)`` and token ``T_e(w)`` of one scope of ``peer``'s, nothing else: a
  publisher learns exactly the key trees of its own scopes (the in-process ``_ScopedKDC``
  wraps the whole KDC; over the network only these two values cross). Per-publisher keys
  ``K^P(w)`` are not served (the profile's publishers do not use them).
- ``authority_publish_permit {subject, key, serial}`` / ``authority_subscribe_permit {subject,
  key, digest}``:
  permits in ``peer``'s name. The serial bound into a publish permit is the caller's
  certificate serial (a different non-zero serial in the request is refused); a subscribe
  permit is signed only for the digest of a token set this service issued to ``peer`` by
  ``kdc_authorise`` (bounded memory), so nobody gets a permit for tokens it was not given.
- ``authority_revoked {}``: the revoked publisher keys.
- ``authority_revoke {identity}`` or ``{key}`` (administrators only: the certificate CNs the
  policy's ``admins`` names; everyone else gets ``unauthorised``): revoke an identity and every
  public key it presented for a permit, or one key. Persisted and idempotent
  (:mod:`pubguard.net.keyservice.revocation`); the answer carries the list's new serial.
- ``authority_revocations {}``: the revocation list signed by the authority with its serial
  and issue time (:class:`~pubguard.schemes.common.revocation_list.SignedRevocations`), for any
  authenticated caller; brokers poll it (:mod:`pubguard.net.server.revocation`). A revoked identity
  gets nothing else from the service (``revoked``; :class:`~pubguard.net.keyservice.core.KeyServiceCore`).

Epochs (psguard.txt §3.2): keys are served for the previous, the current and, within
:data:`EPOCH_SKEW` seconds of its start, the next epoch only, so a subscriber whose rights are
withdrawn cannot stock up on future keys. The master secret never leaves :class:`KdcService`;
responses carry derived keys only, and no key reaches a log or a repr.
"""

from __future__ import annotations

import dataclasses
import json
import random as _random
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes, VerifyKey
from pubguard.crypto.secret import raw
from pubguard.crypto.x509 import Role
from pubguard.errors import ConfigError, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import EventType, Filter
from pubguard.net.keyservice.protocol import Caller, Op, Refused, field
from pubguard.net.keyservice.revocation import RevocationRegistry
from pubguard.schemes.default.broker import filter_digest
from pubguard.schemes.default.client import DefaultAuthority
from pubguard.schemes.psguard.authority import FilterKeys
from pubguard.schemes.psguard.keyservice import DEFAULT_EPOCH_LENGTH, NEXT_EPOCH_WINDOW
from pubguard.schemes.psguard.keytree import spec_tree
from pubguard.schemes.psguard.record import ProtectedFilterRows, Schema
from pubguard.schemes.psguard.wire import filter_to_wire, parse_filter

__all__ = ["EPOCH_SKEW", "KdcConfig", "KdcService", "keys_to_wire", "rows_to_wire"]

#: seconds before an epoch starts when its keys are already served (clock skew)
EPOCH_SKEW: Final = NEXT_EPOCH_WINDOW
#: (peer, digest) pairs remembered for subscribe permits
MAX_ISSUED: Final = 65536
MAX_FILTER_TEXT: Final = 4096


@dataclass(frozen=True, slots=True)
class KdcConfig:
    """What a KDC / authority is made of: the master secret and the public policy.

    ``subscribers`` / ``publishers``: as :class:`~pubguard.schemes.psguard.keyservice.PSGuardKeyService`
    (None: allow all). ``admins``: certificate CNs allowed to revoke (none by default).
    :meth:`policy_json` / :meth:`from_policy` carry everything but the master (which travels
    only through a child's environment)."""

    master: SecretBytes = dataclasses.field(repr=False)
    types: tuple[EventType, ...]
    # normalised on construction to name -> tuple of Filter / of scopes
    subscribers: Mapping[str, Iterable[Filter | str]] | None = None
    publishers: Mapping[str, Iterable[str]] | None = None
    epoch_length: float = DEFAULT_EPOCH_LENGTH
    origin: float = 0.0
    admins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(raw(self.master)) < 16:
            raise ValidationError("the KDC master secret must be at least 16 bytes")
        if not self.epoch_length > 0:
            raise ValidationError("epoch_length must be positive")
        subs = self.subscribers
        if subs is not None:
            subs = {
                n: tuple(Filter.parse(f) if isinstance(f, str) else f for f in fs)
                for n, fs in subs.items()
            }
        pubs = self.publishers
        if pubs is not None:
            pubs = {n: tuple(s) for n, s in pubs.items()}
        object.__setattr__(self, "types", tuple(self.types))
        if isinstance(self.admins, str) or not all(isinstance(a, str) and a for a in self.admins):
            raise ValidationError("admins is a list of certificate names")
        object.__setattr__(self, "admins", tuple(self.admins))
        object.__setattr__(self, "subscribers", subs)
        object.__setattr__(self, "publishers", pubs)

    def __repr__(self) -> str:
        return f"KdcConfig(types={[t.name for t in self.types]}, master=<secret>)"

    def authority(self) -> DefaultAuthority:
        return DefaultAuthority(
            self.master,
            Schema(self.types),
            subscribers=self.subscribers,
            publishers=self.publishers,
            epoch_length=self.epoch_length,
            origin=self.origin,
        )

    def bundle_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of a :class:`~pubguard.schemes.registry.KeyBundle` with this KDC."""
        return {
            "master": self.master,
            "types": self.types,
            "subscribers": self.subscribers,
            "publishers": self.publishers,
            "epoch_length": self.epoch_length,
            "origin": self.origin,
        }

    def policy_json(self) -> dict[str, Any]:
        subs = self.subscribers
        return {
            "types": [t.to_json() for t in self.types],
            "subscribers": None
            if subs is None
            else {n: [[str(f), getattr(f, "id", None)] for f in fs] for n, fs in subs.items()},
            "publishers": None
            if self.publishers is None
            else {n: list(s) for n, s in self.publishers.items()},
            "epoch_length": self.epoch_length,
            "origin": self.origin,
            "admins": list(self.admins),
        }

    @classmethod
    def from_policy(cls, d: Mapping[str, Any], master: SecretBytes | bytes) -> KdcConfig:
        try:
            subs = d.get("subscribers")
            pubs = d.get("publishers")
            return cls(
                SecretBytes(raw(master)),
                tuple(EventType.from_json(t) for t in d["types"]),
                None
                if subs is None
                else {
                    str(n): tuple(Filter.parse(t, id=i) for t, i in fs) for n, fs in subs.items()
                },
                None if pubs is None else {str(n): tuple(map(str, s)) for n, s in pubs.items()},
                float(d.get("epoch_length", DEFAULT_EPOCH_LENGTH)),
                float(d.get("origin", 0.0)),
                tuple(d.get("admins") or ()),
            )
        except (ValidationError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ConfigError(f"KDC policy: invalid ({type(exc).__name__})") from None

    def save_policy(self, path: Path) -> None:
        path.write_text(json.dumps(self.policy_json(), indent=1))
        path.chmod(0o600)

    @classmethod
    def load_policy(cls, path: Path, master: SecretBytes | bytes) -> KdcConfig:
        try:
            d = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}", path=str(path)) from None
        except ValueError:
            raise ConfigError(f"{path}: not JSON", path=str(path)) from None
        if not isinstance(d, dict):
            raise ConfigError(f"{path}: not a policy object", path=str(path))
        return cls.from_policy(d, master)


# -- wire forms of what the KDC returns --------------------------------------------------------


def rows_to_wire(rows: ProtectedFilterRows) -> list[Any]:
    """Token groups per scope (psguard.txt §4.1), as nested lists of 16-byte tokens."""
    return [[list(g) for g in groups] for groups in rows.groups]


def keys_to_wire(fk: FilterKeys, schema: Schema) -> list[dict[str, Any]]:
    """``K(f)`` as plain values (one map per scope), the roots of unconstrained attributes
    included (psguard.txt §3.2.1: the stateless KDC would issue them on demand)."""
    out = []
    for w, sk in fk.scopes.items():
        nodes = [
            [a, n.kind, list(n.node) if isinstance(n.node, tuple) else n.node, raw(k)]
            for a, grants in sk.keys.items()
            for n, k in grants
        ]
        roots: dict[tuple[str, str], bytes] = {}
        for tname in sk.aggregate:
            ta = schema.topic_attr(tname)
            for spec in schema.types[tname].routable:
                if spec.name != ta and spec.name not in sk.keys:
                    tree = spec_tree(spec)
                    if (tree, spec.name) not in roots:
                        roots[(tree, spec.name)] = sk.root(tree, spec.name)
        out.append(
            {
                "w": w,
                "s": raw(sk.scope_key),
                "n": nodes,
                "p": [[t, raw(x)] for t, x in sk.aggregate.items()],
                "r": [[t, a, k] for (t, a), k in roots.items()],
            }
        )
    return out


# -- the ops -----------------------------------------------------------------------------------


class KdcService:
    """Server side of the KDC / authority ops (see the module docstring)."""

    def __init__(
        self, config: KdcConfig, *, revocations: RevocationRegistry | Path | None = None
    ) -> None:
        """``revocations``: the registry or its SQLite file (None: in memory, lost on exit)."""
        self.config = config
        self.authority = config.authority()
        if not isinstance(revocations, RevocationRegistry):
            revocations = RevocationRegistry(revocations, self.authority.sign_revocations)
        self.revocations = revocations
        self.authority.revoked.update(revocations.keys)
        self.keys = self.authority.keys
        self._kdc = KDC(config.master)
        pubs = config.publishers
        self._pubs = None if pubs is None else {n: tuple(w) for n, w in pubs.items()}
        self._issued: OrderedDict[tuple[str, bytes], None] = OrderedDict()

    def __repr__(self) -> str:
        return f"KdcService(types={sorted(self.keys.schema.types)})"

    def ops(self) -> dict[str, Op]:
        return {
            "kdc_authorise": self.authorise,
            "kdc_publisher": self.publisher,
            "kdc_scope": self.scope,
            "authority_publish_permit": self.publish_permit,
            "authority_subscribe_permit": self.subscribe_permit,
            "authority_revoked": self.revoked,
            "authority_revoke": self.revoke,
            "authority_revocations": self.revocation_list,
        }

    def info(self) -> dict[str, Any]:
        c = self.config
        return {
            "schema": self.keys.schema.to_json(),
            "epoch_length": c.epoch_length,
            "origin": c.origin,
            "authority_key": self.authority.public_key.to_bytes(),
        }

    # -- checks ------------------------------------------------------------------------------
    @staticmethod
    def _subject(req: dict[str, Any], caller: Caller) -> None:
        if caller.role != Role.CLIENT.value:
            # brokers route on tokens and must never hold K(f) or K(w) (psguard.txt §2)
            raise Refused("unauthorised", "keys and permits are for client certificates only")
        if field(req, "subject", str) != caller.name:
            raise Refused("unauthorised", "keys can be requested only in one's own name")

    def _epoch(self, req: dict[str, Any], now: float) -> int:
        e = field(req, "epoch", int)
        cur = self.keys.epoch_at(now)
        if not cur - 1 <= e <= self.keys.epoch_at(now + EPOCH_SKEW):
            # psguard.txt §3.2: no keys of epochs that have not begun (a withdrawn right must
            # not be stocked up on) nor of old ones
            raise Refused("invalid", f"epoch {e} is not served now (current {cur})")
        return e  # type: ignore[no-any-return]

    def _scopes(self, peer: str) -> tuple[str, ...] | None:
        if self._pubs is None:
            return None
        s = self._pubs.get(peer)
        if s is None:
            raise Refused("unauthorised", "the policy does not let the caller publish")
        return s

    # -- psguard.txt §3: the KDC ---------------------------------------------------------------
    def authorise(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        self._subject(req, caller)
        text = field(req, "filter", str)
        if len(text) > MAX_FILTER_TEXT:
            raise Refused("malformed", "filter text too long")
        f = Filter.parse(text, id=field(req, "fid", str))
        epoch = self._epoch(req, now)
        if not self.keys.allowed(caller.name, f):
            raise Refused("unauthorised", "the policy does not let the caller subscribe to this")
        rows, fk = self.keys.authorise(caller.name, f, epoch=epoch)
        self._remember(caller.name, filter_digest(parse_filter(filter_to_wire(rows))))
        return {
            "rows": rows_to_wire(rows),
            "keys": keys_to_wire(fk, self.keys.schema),
            "epoch": epoch,
        }

    def publisher(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        self._subject(req, caller)
        self._epoch(req, now)
        s = self._scopes(caller.name)
        return {"scopes": None if s is None else list(s)}

    def scope(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        self._subject(req, caller)
        w = field(req, "scope", str)
        s = self._scopes(caller.name)
        if s is not None and w not in s:
            raise Refused("unauthorised", "the policy does not let the caller publish on this")
        kdc = self._kdc.for_epoch(self._epoch(req, now))
        # psguard.txt §3.1: the publisher holds K(w) and derives every tree below it
        return {"key": raw(kdc.topic_key(w)), "token": kdc.topic_token(w)}

    # -- the default profile's permits ------------------------------------------------------
    def _remember(self, peer: str, digest: bytes) -> None:
        self._issued[(peer, digest)] = None
        self._issued.move_to_end((peer, digest))
        while len(self._issued) > MAX_ISSUED:
            self._issued.popitem(last=False)

    def publish_permit(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        self._subject(req, caller)
        key = VerifyKey.from_bytes(field(req, "key", bytes))
        asked = req.get("serial", 0)
        if type(asked) is not int:
            raise Refused("malformed", "field 'serial' must be int")
        if asked and asked != caller.serial:
            raise Refused("unauthorised", "the serial is not the caller's certificate's")
        p = self.authority.publish_permit(
            caller.name, key, now=now, serial=caller.serial or 0, rng=rng
        )
        self.note_key(caller.name, key.to_bytes(), now)
        return {"permit": p.encode()}

    def subscribe_permit(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        self._subject(req, caller)
        key = VerifyKey.from_bytes(field(req, "key", bytes))
        digest = field(req, "digest", bytes)
        if (caller.name, digest) not in self._issued:
            raise Refused("unauthorised", "no token set with this digest was issued to the caller")
        at = now
        if "epoch" in req:  # the next epoch's permit, shortly before it begins (as its keys)
            e = self._epoch(req, now)
            at = max(now, self.keys.origin + e * self.keys.epoch_length)
        p = self.authority.subscribe_permit(caller.name, key, digest, now=at, rng=rng)
        self.note_key(caller.name, key.to_bytes(), now)
        return {"permit": p.encode()}

    def revoked(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        return {"keys": sorted(self.authority.revoked)}

    # -- revocation (docs/keyservice.md) ------------------------------------------------------
    def is_revoked(self, identity: str) -> bool:
        return self.revocations.is_revoked(identity)

    def note_key(self, identity: str, key: bytes, now: float) -> None:
        """``identity`` got a permit for ``key`` (or advertised it to the MS)."""
        self.revocations.note_key(identity, key, now=now)
        self.authority.revoked.update(self.revocations.keys)

    def revoke(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        if caller.role != Role.CLIENT.value or caller.name not in self.config.admins:
            raise Refused("unauthorised", "only an administrator named by the policy may revoke")
        ident, key = req.get("identity"), req.get("key")
        if (ident is None) == (key is None):
            raise Refused("malformed", "give exactly one of 'identity' and 'key'")
        if ident is not None:
            changed = self.revocations.revoke(field(req, "identity", str), by=caller.name, now=now)
        else:
            k = field(req, "key", bytes)
            if len(k) != 32:
                raise Refused("invalid", "a key is a 32-byte Ed25519 public key")
            changed = self.revocations.revoke_key(k, now=now)
        self.authority.revoked.update(self.revocations.keys)
        return {
            "serial": self.revocations.serial,
            "changed": changed,
            "keys": len(self.revocations.keys),
        }

    def revocation_list(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        return {"list": self.revocations.signed(now).encode()}

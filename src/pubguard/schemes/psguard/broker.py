"""The psguard profile's broker face: PSGuard (psguard.txt) as a
:class:`~pubguard.schemes.base.BrokerScheme` on the broker network.

Theory of operation
-------------------
The profile's cryptography is pure functions elsewhere in this package (publisher, KDC
authority, record signature check, counting match); this module only maps them onto the
broker's hooks, so the Spark pipeline and the broker network run the same cryptography. The
wire forms live in :mod:`pubguard.schemes.psguard.wire`, the token index in
:mod:`pubguard.schemes.psguard.match`, and the routing hooks shared with the default profile in
:mod:`pubguard.schemes.psguard.routing`; the client face is
:mod:`pubguard.schemes.psguard.client`.

Broker check: publications must carry a valid signature of a known publisher and a timestamp
within ``max_delay`` (:func:`~pubguard.schemes.psguard.record.check_record`): FORGED, then STALE.
PSGuard itself does not sign (psguard.txt §4 trusts brokers to route, not to authenticate);
this profile adds the publisher's Ed25519 signature so a broker can drop forgeries. Two forms:
one signature per record (over ``record.message()``), or amortised over a batch
(:meth:`~pubguard.schemes.psguard.client.PSGuardClient.protect_events`): the publisher signs
``ROOT_TAG || n || root`` of a Merkle tree whose leaves are ``H(record.message())``
(:mod:`pubguard.schemes.common.merkle`) and each publication carries its index, the batch size
and its path in ``meta`` (``mi``, ``mn``, ``mp``: the path's hashes concatenated, so ``meta``
stays a flat map of scalars); every leaf hash commits to its index and the batch size (so
altering ``mi`` or ``mn`` is ``forged``). A broker verifies one signature per batch and caches
the verified root. The two signed strings start with different tags, so neither signature
passes for the other form. PSGuard has no subscription guard: a subscription is only tokens,
and a subscriber without the KDC's keys can neither compute them nor open what they would
match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pubguard.crypto import H, VerifyKey
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.schemes.base import CheckContext
from pubguard.schemes.common.merkle import MAX_BATCH, PACKED_PATH_LENGTHS, check_packed_path
from pubguard.schemes.common.native_guard import FALLBACK, REASONS, root_verifier, token_run
from pubguard.schemes.psguard.fast import publication_guard
from pubguard.schemes.psguard.record import DEFAULT_MAX_DELAY_MS, PROFILE, PSGUARD_PAPER
from pubguard.schemes.psguard.routing import TokenRouting
from pubguard.schemes.psguard.wire import ROOT_TAG, parse_routing, signed_from_wire

__all__ = ["TRUST", "VERIFY_MODES", "PSGuardBroker", "make_scheme"]

#: broker ``verify`` mode -> the profile name it is served under
VERIFY_MODES: Final = {"signature": PROFILE, "none": PSGUARD_PAPER}
_MALFORMED: Final = DropReason.MALFORMED.value  # the native guard's verdict, by value
TRUST: Final = {
    "signature": "malicious brokers: forgeries and stale records dropped at the first broker",
    "none": "honest-but-curious brokers (psguard.txt §2): forgeries refused by subscribers only",
}


class PSGuardBroker(TokenRouting):
    """Broker face of the psguard profile. ``publishers``: name -> Ed25519 key of every
    publisher whose records are routed; ``max_delay_ms``: the timestamp window.

    ``verify``: what the broker checks before it matches (see :data:`VERIFY_MODES`):
    ``"signature"`` (profile ``psguard``, the default): the publisher's signature on the
    record or on its batch's Merkle root, then the timestamp window; ``"none"`` (profile
    ``psguard-paper``): psguard.txt §2's honest-but-curious routing nodes ("we assume that the
    pub-sub nodes are honest in routing"), which only match tokens. In that mode a forgery or a
    tampered record is routed and refused end to end: subscribers check the publisher's
    signature when they know its key and the AEAD under ``K(e)`` fails on any tampered
    ciphertext."""

    @property
    def catch_up_horizon(self) -> float:
        """Seconds a down link is routed a new epoch's publications (``CatchUpRouter.route``):
        the timestamp window, after which they would arrive stale anyway."""
        return self.max_delay_ms / 1000

    def __init__(
        self,
        publishers: Mapping[str, VerifyKey] = (),  # type: ignore[assignment]
        *,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
        verify: str = "signature",
    ) -> None:
        if max_delay_ms <= 0:
            raise ValidationError("max_delay_ms must be positive")
        if verify not in VERIFY_MODES:
            raise ValidationError(
                f"unknown psguard verify mode {verify!r} (valid: {', '.join(VERIFY_MODES)})"
            )
        self.verify = verify
        self.profile = VERIFY_MODES[verify]
        #: the assumption this broker's checks rest on (shown by docs/profiles.md's threat table)
        self.trust = TRUST[verify]
        self.publishers: dict[str, VerifyKey] = dict(publishers)
        #: revoked publisher keys (raw), and the names whose key is among them
        self.revoked: set[bytes] = set()
        self._revoked_names: set[str] = set()
        self.max_delay_ms = max_delay_ms
        self.roots = root_verifier(ROOT_TAG, ttl=2 * max_delay_ms / 1000)  # native when built
        # the native port of broker_check's publication guard (sharing roots, publishers,
        # revoked names), or None
        self._fast = (
            publication_guard(
                self.roots,
                max_delay_ms=max_delay_ms,
                publishers=self.publishers,
                revoked=self._revoked_names,
            )
            if verify != "none"
            else None
        )
        #: the core's flag: without checks it admits publications on its plain fast path
        self.checks_messages = verify != "none"
        if verify == "none":
            self.broker_check = _route_only  # type: ignore[method-assign]

    def __repr__(self) -> str:
        return f"PSGuardBroker(verify={self.verify!r}, publishers={len(self.publishers)})"

    def add_publisher(self, name: str, key: VerifyKey) -> None:
        self.publishers[name] = key
        if key.to_bytes() in self.revoked:
            self._revoked_names.add(name)

    revokes_publishers = True

    def revoke(self, publisher_key: VerifyKey | bytes) -> None:
        """Refuse this key's publications from now on with REVOKED (the authority's signed
        revocation list, :mod:`pubguard.net.server.revocation`; psguard.txt §3.2 alone cuts a
        publisher off only at the next key epoch). Brokers that verify nothing (``psguard-paper``)
        route on regardless: there a revoked publisher is cut off at the next key epoch."""
        raw = publisher_key.to_bytes() if isinstance(publisher_key, VerifyKey) else publisher_key
        k = bytes(raw)
        self.revoked.add(k)
        self._revoked_names.update(n for n, v in self.publishers.items() if v.to_bytes() == k)

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        if message.op != "publish":
            return None  # psguard.txt: keys, not brokers, enforce who may subscribe
        meta, routing = message.meta, message.routing
        te = self.decoded(routing) or parse_routing(routing)
        fast = self._fast
        if fast is not None and fast.roots is self.roots:
            v = fast.check_publish(
                message.event_id, te.mode, te.nonce, routing.get("t"), message.body, meta, ctx.now
            )
            if v == _MALFORMED:  # raised, as signed_from_wire and _batch_packed raise it
                raise ValidationError("malformed psguard publication")
            if v != FALLBACK:
                return REASONS[v] if v else None
        pub, ts, _, signed, sig = signed_from_wire(
            message.event_id, te, routing, message.body, meta
        )
        key = self.publishers.get(pub)
        if pub in self._revoked_names:
            return DropReason.REVOKED
        if "mn" not in meta:  # one signature per record (check_record: forged, then stale)
            if key is None or not key.is_valid(sig, signed):
                return DropReason.FORGED
        else:
            index, size, path = meta.get("mi"), meta["mn"], meta.get("mp")
            if not (
                type(index) is int
                and type(size) is int
                and 0 <= index < size <= MAX_BATCH
                and type(path) is bytes
                and len(path) in PACKED_PATH_LENGTHS
            ):
                index, size, path = _batch_packed(meta)  # ValidationError: MALFORMED
            if key is None:
                return DropReason.FORGED
            try:
                self.roots.verify_packed(key, H(signed), sig, ctx.now, index, size, path)
            except InvalidToken:
                return DropReason.FORGED
        return DropReason.STALE if abs(int(ctx.now * 1000) - ts) > self.max_delay_ms else None

    @property
    def checks_in_runs(self) -> bool:
        """Whether the native guard is built for this scheme (``broker_check_run``)."""
        return self._fast is not None

    def broker_check_run(
        self, messages: Sequence[Any], events: Sequence[Any], ctx: CheckContext
    ) -> list[DropReason | None]:
        """``broker_check`` on a run of publications, one native call for as much as it
        decides (``native_guard.check_run``), on the routing parts the core decoded
        (``events``); an empty prefix without the native guard."""
        return token_run(self._fast, self.roots, messages, events, ctx)


def _route_only(message: Any, ctx: CheckContext) -> DropReason | None:
    """psguard.txt §2/§4: an honest-but-curious broker routes on tokens and checks nothing
    else (the core has already decoded the routing part: a malformed one is MALFORMED)."""
    return None


def _batch_packed(meta: Mapping[str, Any]) -> tuple[int, int, bytes]:
    """:func:`~pubguard.schemes.psguard.wire.batch_fields` with the path left packed (the broker's verifier reads it so)."""
    index, size = meta.get("mi"), meta.get("mn")
    if type(index) is not int or type(size) is not int:
        raise ValidationError("psguard Merkle index and size must be integers")
    if not 0 <= index < size <= MAX_BATCH:
        raise ValidationError("psguard Merkle index/size out of range")
    return index, size, check_packed_path(meta.get("mp"))


def make_scheme(publishers: Mapping[str, VerifyKey], **options: Any) -> PSGuardBroker:
    """The broker scheme for a :class:`~pubguard.schemes.SchemeRegistry` (see the class)."""
    return PSGuardBroker(publishers, **options)

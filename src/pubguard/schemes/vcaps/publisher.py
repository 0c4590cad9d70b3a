"""The trusted v-CAPS publisher: PFPoset, Stage I registration, publish, recovery (sans-IO).

Theory of operation
-------------------
vcaps.txt §4.1 Stage I: a subscriber sends its filter ``F`` to the publisher over an
authenticated channel. The publisher looks ``F`` up in its PFPoset (:class:`CoveringPoset`
keyed by 16-byte filter IDs; identical filters share one ID); a new ``F`` gets a random ID.
It computes ``F_pred`` / ``F_succ`` (transitive: every PFPoset filter covering / covered by
``F``) and returns ``T_sub`` (:mod:`pubguard.schemes.vcaps.tokens`), signed, carrying
``E_ks(F)`` = AEAD under ``k_s`` of ``(ID_F, F)``. It grants the subscriber ``K_N``
(:class:`VcapsKeyService`).

§4.2 Publish: ``F_match = M(N, PFPoset)`` with the project's indexed matcher
(:class:`IndexedMatcher`, our SFF), then ``<RV, E_KN(N)>``: RV in clear (``vcaps-rv``),
``𝓔(F_match)`` (``vcaps-srv``, §5.4), or a nonce and padded PRF codewords (``vcaps-srv-fast``).
IDs are shuffled before encryption so a position says nothing.

§8 recovery: :meth:`VcapsPublisher.recover` rebuilds the PFPoset, with the same IDs, from the
``E_ks(F)`` the brokers hold (``BFPoset.tokens``, or their stored subscriptions).

Unsubscription (our extension) happens at the brokers; the publisher keeps the filter (its ID
stays in routing vectors until a restart without it: header bytes, never a wrong delivery).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from random import Random, SystemRandom
from typing import Any, Final

import msgpack

from pubguard.crypto import AesPrf, SecretBytes, SigningKey, hkdf, open_, random_bytes, seal
from pubguard.errors import InvalidToken, ValidationError
from pubguard.matching.index import IndexedMatcher
from pubguard.matching.poset import CoveringPoset
from pubguard.model.codec import constraint_from_json
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.base import ProtectedEvent
from pubguard.schemes.common.wire_id import WireIds
from pubguard.schemes.plain import new_event_id
from pubguard.schemes.vcaps.keyservice import VcapsKeyService
from pubguard.schemes.vcaps.swp import ID_BYTES, SwpKeys
from pubguard.schemes.vcaps.tokens import (
    ADVERT,
    FAST,
    RV,
    SRV,
    notification_message,
    sign_token,
    token_message,
)

__all__ = ["FAST_MIN_BUCKET", "PROFILES", "VcapsPublisher", "bucket", "event_aad"]

PROFILES: Final = (RV, SRV, FAST)
#: SRV-fast pads V to the next power of two, at least this (hides small |RV| differences)
FAST_MIN_BUCKET: Final = 8
_EF_AAD: Final = b"pubguard/vcaps/E_ks"


def bucket(n: int) -> int:
    """The padded length of an SRV-fast codeword set for ``n`` matches."""
    return max(FAST_MIN_BUCKET, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


def event_aad(publisher: str, epoch: int, event_id: str) -> bytes:
    return b"pubguard/vcaps/N\x00" + msgpack.packb([publisher, epoch, event_id])


class VcapsPublisher:
    """One publisher's PFPoset and keys for one profile. ``master``: the publisher's secret
    (``k_s`` and the SRV keys derive from it); ``signing_key``: what brokers verify tokens and
    notifications with (``BrokerKeys.publishers[name]``)."""

    def __init__(
        self,
        name: str,
        profile: str,
        *,
        master: SecretBytes | bytes,
        signing_key: SigningKey,
        keys: VcapsKeyService,
        rng: Random | None = None,
    ) -> None:
        if profile not in PROFILES:
            raise ValidationError(f"unknown v-CAPS profile {profile!r}")
        m = master if isinstance(master, SecretBytes) else SecretBytes(master)
        self.name = name
        self.profile = profile
        self._ks = SecretBytes(hkdf(m, info=b"pubguard/vcaps/k_s"))
        self._swp = SwpKeys(m)
        self._sk = signing_key
        #: opaque wire ids under the signing key (schemes/common/wire_id.py): the application's
        #: event id travels inside E_KN(N), never in clear
        self._wire_ids = WireIds.for_key(signing_key)
        self.keys = keys
        self._rng = rng
        self.poset = CoveringPoset()  # the PFPoset, keyed by ID
        self._matcher = IndexedMatcher()
        self._id_of: dict[Filter, bytes] = {}
        self._ef: dict[bytes, bytes] = {}
        self._fast: dict[bytes, AesPrf] = {}  # SRV-fast: AesPrf(k_f) per ID (publisher side)

    def __repr__(self) -> str:
        return f"VcapsPublisher({self.name!r}, {self.profile}, filters={len(self._id_of)})"

    def __len__(self) -> int:
        return len(self._id_of)

    # -- Stage I ------------------------------------------------------------------------------
    def filter_id(self, f: Filter) -> bytes | None:
        return self._id_of.get(Filter(f.constraints))

    def register(self, f: Filter, *, subscriber: str) -> dict[str, Any]:
        """vcaps.txt §4.1 Stage I: ``T_sub`` (the wire filter of the subscription) for ``f``."""
        if not isinstance(f, Filter) or not f.constraints:
            raise ValidationError("a v-CAPS subscription needs a non-empty Filter")
        fid = self._add(Filter(f.constraints), None)
        self.keys.grant(self.name, subscriber)
        return self.token(fid)

    def _add(self, f: Filter, fid: bytes | None) -> bytes:
        known = self._id_of.get(f)
        if known is not None:  # YES: look up ID_F
            return known
        if fid is None:  # NO: assign a unique 16-byte ID
            fid = random_bytes(ID_BYTES, self._rng)
            while fid in self._ef:
                fid = random_bytes(ID_BYTES, self._rng)
        self.poset.insert(fid, f)
        self._matcher.add(fid, f)
        self._id_of[f] = fid
        pt = msgpack.packb([fid, [c.to_json() for c in f.constraints]], use_bin_type=True)
        self._ef[fid] = seal(self._ks, pt, aad=_EF_AAD, rng=self._rng)
        if self.profile == FAST:
            self._fast[fid] = AesPrf(self._swp.fast_key(fid))
        return fid

    def relations(self, fid: bytes) -> tuple[list[bytes], list[bytes]]:
        """(F_pred, F_succ): every PFPoset filter covering ``fid``'s, and covered by it."""
        return list(self.poset.covered_by(fid)), list(self.poset.covering(fid))  # type: ignore[arg-type]

    def immediate(self, fid: bytes) -> tuple[list[bytes], list[bytes]]:
        """(F_parent, F_child): the immediate ones only (the alternative we did not take)."""
        return list(self.poset.parents(fid)), list(self.poset.children(fid))  # type: ignore[arg-type]

    def token(self, fid: bytes, *, immediate: bool = False) -> dict[str, Any]:
        pred, succ = self.immediate(fid) if immediate else self.relations(fid)
        ef = self._ef[fid]
        swp = self._swp
        if self.profile == RV:
            body: list[Any] = ["rv", fid, sorted(pred), sorted(succ), ef]
        elif self.profile == SRV:  # vcaps.txt §5.3 steps 2-4
            q = swp.query(fid)
            enc_p = list(swp.encrypt(self._shuffled(pred), rng=self._rng))
            enc_s = list(swp.encrypt(self._shuffled(succ), rng=self._rng))
            body = ["srv", q.x, q.k, enc_p, enc_s, ef]
        else:
            n = random_bytes(16, self._rng)
            cp = sorted(self._fast[i](n) for i in pred)
            cs = sorted(self._fast[i](n) for i in succ)
            body = ["fast", swp.fast_handle(fid), swp.fast_key(fid), n, cp, cs, ef]
        return sign_token(self._sk, self.name, body)

    def advertisement(self) -> dict[str, Any]:
        """The wire filter of this publisher's advertisement (v-CAPS routes without them; the
        brokers store it, signed, as they store any profile's)."""
        adv = ADVERT + self.profile.encode()
        return {"pub": self.name, "adv": adv, "sig": self._sk.sign(token_message(self.name, adv))}

    def _shuffled(self, ids: list[bytes]) -> list[bytes]:
        out = list(ids)
        (self._rng or _SYS).shuffle(out)
        return out

    # -- §4.2 publish ----------------------------------------------------------------------
    def match(self, event: Event | Mapping[str, Any]) -> list[bytes]:
        """``F_match = M(N, PFPoset)``: the IDs of every filter the notification matches."""
        return list(self._matcher.match(event))  # type: ignore[arg-type]

    def routing(self, ids: list[bytes]) -> dict[str, Any]:
        """The routing header for matched IDs (RV, SRV or SRV-fast)."""
        ids = self._shuffled(ids)
        if self.profile == RV:
            return {"pub": self.name, "rv": ids}
        if self.profile == SRV:  # §5.4: SRV = 𝓔(F_match, keys)
            return {"pub": self.name, "srv": list(self._swp.encrypt(ids, rng=self._rng))}
        n = random_bytes(16, self._rng)
        v = {self._fast[i](n) for i in ids}
        while len(v) < bucket(len(ids)):
            v.add(random_bytes(16, self._rng))
        return {"pub": self.name, "n": n, "v": sorted(v)}

    def wire_id(self, event_id: str) -> str:
        """The opaque id a notification of application event ``event_id`` carries."""
        return self._wire_ids(event_id)

    def publish(self, event: Event, *, now: float) -> ProtectedEvent:
        """``N_e = <RV> F_match </RV> <Payload> E_KN(N) </Payload>``, signed. The wire carries
        :meth:`wire_id`; the application's id is sealed in ``E_KN(N)`` with the attributes."""
        app_id = event.id if event.id is not None else new_event_id(self._rng)
        eid = self._wire_ids(app_id)
        routing = self.routing(self.match(event))
        epoch = self.keys.epoch(now)
        kn = self.keys.notification_key(self.name, epoch, requester=self.name)
        pt = msgpack.packb(
            [dict(event.attrs), event.type, event.payload, app_id], use_bin_type=True
        )
        body = seal(kn, pt, aad=event_aad(self.name, epoch, eid), rng=self._rng)
        sig = self._sk.sign(notification_message(eid, self.profile, routing, epoch, body))
        return ProtectedEvent(eid, routing, body, {"epoch": epoch, "sig": sig})

    # -- §8 recovery -------------------------------------------------------------------------
    def held_ciphertexts(self) -> list[bytes]:
        return list(self._ef.values())

    def recover(self, efs: Iterable[bytes]) -> int:
        """Rebuild the PFPoset from brokers' ``E_ks(F)`` (duplicates and foreign ones skipped:
        a ciphertext that does not open under ``k_s`` is ignored); the number of filters added."""
        added = 0
        for ef in efs:
            try:
                fid, cs = msgpack.unpackb(open_(self._ks, ef, aad=_EF_AAD), raw=False)
                f = Filter(tuple(constraint_from_json(c) for c in cs))
            except (InvalidToken, ValueError, TypeError):
                continue
            if f in self._id_of or fid in self._ef:
                continue
            self._add(f, fid)
            added += 1
        return added


_SYS: Final = SystemRandom()  # shuffles hide positions: not predictable

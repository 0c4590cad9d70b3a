"""The v-CAPS pipeline profiles: ``vcaps-rv``, ``vcaps-srv`` and ``vcaps-srv-fast`` on Spark.

The trusted driver is the publisher (vcaps.txt §4.1-4.2): it registers every filter in its
PFPoset first (Stage I: one signed ``T_sub`` per filter, the filter table's ``token``
column), then protects the events as ``<RV, E_KN(N)>`` (routing header, sealed body, signed
meta). Executors are untrusted brokers: each builds, once per Python worker, the BFPoset of the
broadcast tokens (recipients: filter IDs) and intersects each publication's routing header
with it (§4.3; SRV and SRV-fast test their filters, §5.5). They never see a filter or a value:
the tokens carry IDs, encrypted relations and ``E_ks(F)`` only. Validation is the broker face's
``broker_check`` (the publisher's signature over the header and body).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pubguard.crypto import SigningKey, VerifyKey, hkdf
from pubguard.model import Event, Filter
from pubguard.pipeline.profiles import register
from pubguard.pipeline.wire import WireContext, WireProfile, pack, unpack
from pubguard.schemes.base import ProtectedEvent
from pubguard.schemes.vcaps import (
    FAST,
    RV,
    SRV,
    BFPoset,
    VcapsBroker,
    VcapsClient,
    VcapsKeyService,
    VcapsPublisher,
)

__all__ = ["VcapsPipeline"]

_INDEX: list[Any] = []  # [(index, {publisher: BFPoset}, broker)]: this Python worker's posets


class VcapsPipeline(WireProfile):
    """One v-CAPS profile on Spark (module docstring)."""

    token_join = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.modes: tuple[str, ...] = ("deterministic",) if name == RV else ("randomized",)
        self.mode_note = (
            "vcaps-rv ships filter IDs in clear (the same IDs in every notification)"
            if name == RV
            else f"{name} encrypts the routing vector afresh for every notification"
        )

    # -- trusted side -------------------------------------------------------------------------
    def _keys(self, ctx: WireContext) -> VcapsKeyService:
        return ctx.memo(  # type: ignore[no-any-return]
            "vcaps-keys", lambda: VcapsKeyService(hkdf(ctx.master, info=b"pipeline/vcaps/K_N"))
        )

    def _signing_key(self, ctx: WireContext) -> SigningKey:
        return SigningKey.from_seed(
            hkdf(ctx.master, info=b"pubguard/pipeline/publisher/" + ctx.publisher.encode())
        )

    def _publisher(self, ctx: WireContext) -> VcapsPublisher:
        return ctx.memo(  # type: ignore[no-any-return]
            "vcaps-publisher",
            lambda: VcapsPublisher(
                ctx.publisher,
                self.name,
                master=hkdf(ctx.master, info=b"pipeline/vcaps/publisher"),
                signing_key=self._signing_key(ctx),
                keys=self._keys(ctx),
                rng=ctx.rng("vcaps"),
            ),
        )

    def protect(
        self, spark: Any, events: Sequence[Event], filters: Mapping[str, Filter], ctx: WireContext
    ) -> tuple[Any, Any]:
        """Stage I for every filter first (the PFPoset must hold them before a routing vector
        is computed), then the events."""
        from pubguard.pipeline.tables import filters_schema, wire_events_schema

        fl = spark.createDataFrame(self.protect_filters_pandas(filters, ctx), filters_schema())
        ev = spark.createDataFrame(self.protect_events_pandas(events, ctx), wire_events_schema())
        return ev, fl

    def protect_batch(self, ctx: WireContext, events: Sequence[Event]) -> list[ProtectedEvent]:
        pub = self._publisher(ctx)
        return [pub.publish(e, now=ctx.now) for e in events]

    def wire_id(self, ctx: WireContext, event_id: str) -> str:
        """The opaque id the protected row of application event ``event_id`` carries (the
        application's id is sealed in ``E_KN(N)``; ``schemes.common.wire_id``)."""
        return self._publisher(ctx).wire_id(event_id)

    def join_fields(
        self, ctx: WireContext, pe: ProtectedEvent
    ) -> tuple[str, bytes, int, int, str, bytes, list[int]]:
        key = self._signing_key(ctx).public.to_bytes()
        return ctx.publisher, key, ctx.now_ms, 0, self.modes[0], b"", []

    def filter_rows(
        self, ctx: WireContext, fid: str, f: Filter
    ) -> list[tuple[str, int, int, bytes]]:
        wire = self._publisher(ctx).register(f, subscriber=f"subscriber-{fid}")
        return [(fid, 1, 0, pack(wire))]

    def public(self, ctx: WireContext) -> dict[str, Any]:
        pk = self._signing_key(ctx).public.to_bytes().hex()
        return {"publishers": {ctx.publisher: pk}, "revoked": []}

    def broker(self, manifest: Mapping[str, Any], max_delay: float) -> VcapsBroker:
        keys = {
            n: VerifyKey.from_bytes(bytes.fromhex(k)) for n, k in manifest["publishers"].items()
        }
        return VcapsBroker(self.name, keys, check_every_hop=True)

    def subscriber(self, ctx: WireContext, fid: str, f: Filter) -> VcapsClient:
        pub = self._publisher(ctx)
        pub.register(f, subscriber=f"subscriber-{fid}")  # Stage I grants it K_N
        return VcapsClient(f"subscriber-{fid}", self._keys(ctx), registrar=pub)

    # -- untrusted side (executors) ----------------------------------------------------------
    def build_match_index(self, filters: Any, subs: Any) -> Any:
        toks = {
            r["filter_id"]: bytes(r["token"])
            for r in filters.select("filter_id", "token").collect()
        }
        by_f: dict[str, list[str]] = {}
        for r in subs.select("subscriber", "filter_id").toLocalIterator():
            by_f.setdefault(r["filter_id"], []).append(r["subscriber"])
        return {"tokens": toks, "subs": by_f}

    def _posets(self, index: Any) -> tuple[dict[str, BFPoset[str]], VcapsBroker]:
        if _INDEX and _INDEX[0][0] is index:
            return _INDEX[0][1], _INDEX[0][2]
        broker = VcapsBroker(self.name, {})
        posets: dict[str, BFPoset[str]] = {}
        for fid, blob in index["tokens"].items():
            pub, tok = broker.decode_filter(unpack(blob))
            if tok is not None:
                posets.setdefault(pub, BFPoset()).insert(tok, fid)
        _INDEX[:] = [(index, posets, broker)]
        return posets, broker

    def match_partition(self, index: Any, pdf: Any) -> list[tuple[str, str, str]]:
        posets, broker = self._posets(index)
        out = []
        for eid, routing in zip(pdf["event_id"], pdf["routing"], strict=True):
            pub, header = broker.decode_event(unpack(routing))
            bf = posets.get(pub)
            best: dict[str, str] = {}
            for fid in bf.match(header) if bf is not None else ():
                for sub in index["subs"].get(fid, ()):
                    if sub not in best or fid < best[sub]:
                        best[sub] = fid
            out += [(sub, eid, fid) for sub, fid in best.items()]
        return out


VCAPS_RV = register(VcapsPipeline(RV))
VCAPS_SRV = register(VcapsPipeline(SRV))
VCAPS_SRV_FAST = register(VcapsPipeline(FAST))

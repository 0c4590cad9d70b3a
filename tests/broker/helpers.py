"""Shared helpers for broker-core tests: a two-level tree wired by hand and a toy guard scheme."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pubguard.broker import Broker, Forward
from pubguard.errors import DropReason
from pubguard.model import Event, Filter
from pubguard.schemes import CheckContext, PlainScheme
from pubguard.wire.messages import Deliver, Publish, Subscribe

P = PlainScheme()


def sub(sub_id: str, text: str, profile: str = "plain", **meta: Any) -> Subscribe:
    return Subscribe(sub_id, profile, P.protect_filter(Filter.parse(text), now=0).filter, meta)


def pub(
    event_id: str, profile: str = "plain", meta: dict[str, Any] | None = None, **attrs: Any
) -> Publish:
    pe = P.protect_event(Event(attrs, id=event_id), now=0)
    return Publish(pe.event_id, profile, pe.routing, pe.body, meta or {})


def forwarded(actions: list[Any], op: str | None = None) -> list[Any]:
    return [
        a.message for a in actions if isinstance(a, Forward) and (op is None or a.message.op == op)
    ]


class GuardScheme(PlainScheme):
    """A toy profile with real decisions: publications need meta sig == b'ok'; an unsubscribe
    must name the same owner as the subscription it cancels (the role of EventGuard's UST);
    ``outgoing`` counts hops and suppresses events marked ``secret``."""

    profile = "guarded"

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        if message.op == "publish" and message.meta.get("sig") != b"ok":
            return DropReason.FORGED
        if message.op == "unsubscribe":
            if ctx.prior is None or ctx.prior.meta.get("owner") != message.meta.get("owner"):
                return DropReason.UNAUTHORISED
        return None

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        if isinstance(message, Deliver):
            ev = self.outgoing(message.event, ctx)
            return None if ev is None else replace(message, event=ev)
        if isinstance(message, Publish):
            if message.routing.get("secret"):
                return None
            meta = dict(message.meta)
            meta["hops"] = int(meta.get("hops", 0)) + 1
            return replace(message, meta=meta)
        return message


def two_level() -> tuple[Broker, Broker, Broker]:
    """root with children left and right; clients attach by the caller."""
    schemes = [PlainScheme(), GuardScheme()]
    root, left, right = (Broker(n, schemes) for n in ("root", "left", "right"))
    root.add_link("left", "child")
    root.add_link("right", "child")
    left.add_link("root", "parent")
    right.add_link("root", "parent")
    return root, left, right

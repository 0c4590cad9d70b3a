"""``BrokerScheme.outgoing_routed``'s default, as ``Broker.handle_batch`` drives it for a
profile that rewrites runs (``rewrites_in_runs``): the same actions, counters and calls as
one ``handle`` per message, with the messages to ``passes_through`` peers left as routed."""

from __future__ import annotations

import dataclasses
from typing import Any

from pubguard.broker import Broker, DeliverTo, Forward
from pubguard.schemes import PlainScheme
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
from tests.broker.helpers import pub, sub


class Tagging(PlainScheme):
    """Rewrites publications per link (the hop's broker id added), passes them unchanged to
    peer ``d`` (its ``passes_through`` peer), and suppresses deliveries to client ``c3``."""

    rewrites_in_runs = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (op, link) of each ``outgoing`` call

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        self.seen.append((message.op, ctx.link.link_id))
        if message.op == "deliver":
            return None if ctx.link.link_id == "c3" else message
        if message.op == "publish" and ctx.link.peer != "d":
            return dataclasses.replace(message, routing={**message.routing, "hop": ctx.broker_id})
        return message

    def passes_through(self, link: LinkInfo, now: float) -> frozenset[str]:
        return frozenset({"d"}) if link.kind is not LinkKind.CLIENT else frozenset()


def _broker() -> tuple[Broker, Tagging]:
    scheme = Tagging()
    b = Broker("b", [scheme])
    b.add_link("up", LinkKind.PARENT, peer="u")
    b.add_link("down", LinkKind.CHILD, peer="d")
    for c in ("c1", "c2", "c3"):
        b.add_link(c, LinkKind.CLIENT, peer=c)
    b.handle(sub("s2", "x > 0"), "c2", 0.0)
    b.handle(sub("s3", "x > 1"), "c3", 0.0)
    b.handle(sub("sd", "x > 0"), "down", 0.0)
    scheme.seen.clear()
    return b, scheme


def _run() -> list[Any]:
    bad = {"op": "publish", "event_id": "bad", "profile": "plain", "routing": {"x": [1]}}
    return [
        pub("e1", x=1).to_wire(),
        pub("e2", x=2).to_wire(),
        bad,  # malformed: dropped, and the run goes on in a second segment
        pub("e3", x=3).to_wire(),
        pub("e1", x=1).to_wire(),  # a duplicate
        pub("e4", x=0).to_wire(),  # matches no subscription: only to the parent
    ]


def test_the_default_hook_gives_the_per_message_actions_and_counters() -> None:
    for link in ("c1", "up"):
        one, s1 = _broker()
        runs, s2 = _broker()
        want = [a for m in _run() for a in one.handle(m, link, 1.0)]
        got = runs.handle_batch(_run(), link, 1.0)
        assert got == want
        assert runs.counters == one.counters and runs.drops == one.drops
        assert runs.counters["suppressed"] > 0  # the deliveries to c3
        # from a broker, the messages to peer d leave as routed: no per-message call
        skipped = {("publish", "down")} if link == "up" else set()
        assert [c for c in s1.seen if c not in skipped] == s2.seen
        if link == "up":
            assert ("publish", "down") in s1.seen and ("publish", "down") not in s2.seen
        kinds = {(type(a).__name__, a.link) for a in got if isinstance(a, Forward | DeliverTo)}
        assert ("DeliverTo", "c3") not in kinds and ("DeliverTo", "c2") in kinds
        hops = {(a.link, a.message.routing.get("hop")) for a in got if isinstance(a, Forward)}
        # rewritten on the hop up, never to d (as its ``outgoing`` says)
        assert hops == ({("up", "b"), ("down", None)} if link == "c1" else {("down", None)})

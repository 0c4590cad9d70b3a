"""A broker process that runs a malicious node model (``[malicious]`` in its ``broker.toml``).

Theory of operation
-------------------
For experiments and tests only: eventguard.txt §5 (selective and random dropping, against
which the r-resilient network guard of §5.2 gives every subscriber ``ind`` independent paths)
and psguard.txt §4.2 (honest-but-curious routing nodes that count the tokens on their own
routed paths) are about brokers that run the protocol but misbehave on what they route. The
decision logic is the simulator's (:mod:`pubguard.sim.malicious`: ``SelectiveDrop``,
``RandomDrop``, ``Eavesdrop``); this module only applies it to the actions the real core
returns in the server's batch processor, before they are queued on the links:

- the broker keeps its links up, acknowledges every frame and keeps its subscription and
  advertisement state (a stealthy node); only forwards and deliveries of publications are
  filtered;
- *selective* drops every publication whose ``topic`` is listed in ``topics`` or whose
  routing part carries one of ``tokens`` (a string, or bytes given as hex);
- *random* drops each publication with probability ``prob`` (one draw per publication from a
  ``Random(seed)``, however the batch processor chunks them);
- *eavesdrop* forwards everything and counts the distinct publications per routing token it
  routed (reported in the broker's status; no bytes are kept).

Drops are silent on the wire, as an attacker's would be; they are counted in the status
(``malicious``) and the broker logs one warning line at start.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from random import Random
from typing import Any, Final

from pubguard.broker.actions import Action
from pubguard.net.malicious_config import MaliciousSettings
from pubguard.sim.malicious import (
    Behaviour,
    Eavesdrop,
    RandomDrop,
    SelectiveDrop,
    publication_of,
)
from pubguard.wire.messages import Publish

__all__ = ["EAVESDROP_REPORTED", "MaliciousModel"]

log = logging.getLogger("pubguard.net.server")

#: the routing tokens an eavesdropper's status lists (its most frequent ones)
EAVESDROP_REPORTED: Final = 50


def _token_text(v: Any) -> str:
    return v.hex() if isinstance(v, bytes | bytearray) else str(v)


class MaliciousModel:
    """The model of ``settings`` for broker ``name`` (see the module docstring)."""

    def __init__(self, name: str, settings: MaliciousSettings) -> None:
        self.name = name
        self.settings = settings
        self.rng = Random(settings.seed)
        self.behaviour: Behaviour
        if settings.model == "selective":
            topics, tokens = frozenset(settings.topics), frozenset(settings.tokens)
            self.behaviour = SelectiveDrop(frozenset((*topics, *tokens)), self._selector)
        elif settings.model == "random":
            self.behaviour = RandomDrop(settings.prob)
        else:
            self.behaviour = Eavesdrop()

    def _selector(self, pub: Publish) -> Hashable:
        """The listed topic or token ``pub`` carries (what SelectiveDrop keys on), else None."""
        topic = pub.routing.get("topic")
        if isinstance(topic, str) and topic in self.settings.topics:
            return topic
        if self.settings.tokens:
            for v in pub.routing.values():
                for x in v if isinstance(v, list | tuple) else (v,):
                    t = _token_text(x)
                    if t in self.settings.tokens:
                        return t
        return None

    def warn(self) -> None:
        """The one line a malicious broker logs at start."""
        s = self.settings
        what = {
            "selective": f"drops publications of topics {list(s.topics)} / {len(s.tokens)} tokens",
            "random": f"drops each publication with probability {s.prob}",
            "eavesdrop": "counts the routing tokens of the publications it routes",
        }[s.model]
        log.warning(
            "broker %s: MALICIOUS model %r (research/test use only): it %s",
            self.name,
            s.model,
            what,
        )

    def filter(self, actions: Sequence[Action]) -> Sequence[Action]:
        """``actions`` without the publications the model drops (order kept). The behaviour
        decides once per publication: its actions (forwards, deliveries) are grouped by event
        id, as in the simulator where one ``handle`` routes one publication."""
        groups: dict[str, list[Action]] = {}
        for a in actions:
            pub = publication_of(a)
            if pub is not None:
                groups.setdefault(pub.event_id, []).append(a)
        if not groups:
            return actions
        kept: set[int] = set()
        for group in groups.values():
            kept.update(id(a) for a in self.behaviour.filter(self.name, group, self.rng))
        if len(kept) == sum(len(g) for g in groups.values()):
            return actions
        return [a for a in actions if publication_of(a) is None or id(a) in kept]

    def status(self) -> dict[str, Any]:
        """What the ``malicious`` entry of the broker's status reports."""
        out: dict[str, Any] = {"model": self.settings.model, "research_use": True}
        b = self.behaviour
        if isinstance(b, SelectiveDrop | RandomDrop):
            out["dropped"] = b.dropped
        if isinstance(b, SelectiveDrop):
            out |= {"topics": list(self.settings.topics), "tokens": len(self.settings.tokens)}
        if isinstance(b, RandomDrop):
            out |= {"prob": b.prob, "seed": self.settings.seed}
        if isinstance(b, Eavesdrop):
            out["publications"] = len(b.event_ids)
            out["tokens"] = {_token_text(k): n for k, n in b.counts.most_common(EAVESDROP_REPORTED)}
        return out

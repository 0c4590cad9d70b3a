"""The ``[malicious]`` table of a ``broker.toml``: run the broker as one of the malicious node
models (research and test use only; docs/resilience.md, "Malicious broker processes").

Theory of operation
-------------------
eventguard.txt §5 ("a malicious node may selectively drop messages"; the r-resilient network
guard of §5.2) and psguard.txt §4.2 (honest-but-curious routing nodes) study brokers that run
the protocol but misbehave on the publications they route. The simulator's models
(:mod:`pubguard.sim.malicious`) are the reference; this table selects one of them for a real
broker process (:mod:`pubguard.net.server.malicious` applies it)::

    [malicious]
    model = "selective"     # "selective" | "random" | "eavesdrop"
    topics = ["alerts"]     # selective: drop publications whose topic is listed ...
    tokens = ["9f0c..."]    # ... or whose routing part carries one of these tokens (hex)
    prob = 0.5              # random: drop each publication with this probability (default 1)
    seed = 7                # random: the draws' seed (default 0)

A cluster sets it per broker in ``[brokers.<name>.malicious]``. Only what each model reads
may be given (a ``prob`` on a selective broker is a mistake, reported as one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pubguard.errors import ConfigError

__all__ = [
    "MALICIOUS_MODELS",
    "MaliciousSettings",
    "malicious_toml",
    "parse_malicious",
    "status_summary",
]

#: the models a broker process can run (pubguard.sim.malicious)
MALICIOUS_MODELS: Final = ("selective", "random", "eavesdrop")

_KEYS: Final = {
    "selective": {"model", "topics", "tokens"},
    "random": {"model", "prob", "seed"},
    "eavesdrop": {"model"},
}


@dataclass(frozen=True, slots=True)
class MaliciousSettings:
    """One broker's malicious model (see the module docstring)."""

    model: str
    topics: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()
    prob: float = 1.0
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The table's entries (what ``malicious_toml`` writes back)."""
        out: dict[str, Any] = {"model": self.model}
        if self.model == "selective":
            out |= {"topics": list(self.topics), "tokens": list(self.tokens)}
        elif self.model == "random":
            out |= {"prob": self.prob, "seed": self.seed}
        return out


def parse_malicious(
    data: Mapping[str, Any] | None, fail: Callable[[str, str], ConfigError]
) -> MaliciousSettings | None:
    """The ``[malicious]`` table (``fail(key, message)`` makes the error naming the key)."""
    if data is None:
        return None
    model = data.get("model")
    if model not in MALICIOUS_MODELS:
        raise fail(
            "malicious.model", f"must be one of {', '.join(MALICIOUS_MODELS)}, got {model!r}"
        )
    extra = sorted(set(data) - _KEYS[model])
    if extra:
        raise fail(f"malicious.{extra[0]}", f"is not a setting of the {model!r} model")

    def names(k: str) -> tuple[str, ...]:
        v = data.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise fail(f"malicious.{k}", "must be a list of non-empty strings")
        return tuple(dict.fromkeys(v))

    topics, tokens = names("topics"), names("tokens")
    if model == "selective" and not (topics or tokens):
        raise fail("malicious.topics", "a selective dropper needs topics or tokens to drop")
    prob = data.get("prob", 1.0)
    if isinstance(prob, bool) or not isinstance(prob, int | float) or not 0.0 <= prob <= 1.0:
        raise fail("malicious.prob", f"must be a number in [0, 1], got {prob!r}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise fail("malicious.seed", f"must be an integer, got {seed!r}")
    return MaliciousSettings(model, topics, tokens, float(prob), seed)


def malicious_toml(data: Mapping[str, Any]) -> list[str]:
    """The lines of a ``[malicious]`` table with ``data``'s entries (a cluster writes it into
    a broker's ``broker.toml``; a JSON string, list or number is valid TOML)."""
    return ["[malicious]", *(f"{k} = {json.dumps(v)}" for k, v in data.items())]


def status_summary(st: dict[str, Any]) -> str:
    """One short line for a status table (``pubguard status``)."""
    if "dropped" in st:
        return f"MALICIOUS {st['model']}: dropped {st['dropped']}"
    return f"MALICIOUS {st['model']}: saw {st.get('publications', 0)} publications"

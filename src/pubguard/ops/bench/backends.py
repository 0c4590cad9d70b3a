"""The Python and native backends side by side (:mod:`pubguard.native`), in one run.

* Key trees at ``|R| = 10^4`` (a NAKT of depth 14, ``lc = 1``), psguard.txt Table 1: cold key
  generation from ``K(w)`` (the worst-case range, 26 keys), derivation at the maximum depth
  (14 hashes from the root's key) and a derivation answered by the key cache (§3.2.3). Each
  is timed at the public API (``TopicKeys.numeric_auth_keys``, ``derive_from``,
  ``KeyCache.derive``), and the first two also as the bare walk (``nakt.cover_keys``,
  ``nakt.derive_path``: raw keys as ``bytes``), which is what the paper's figure counts.
  "Cold" generation is what the KDC does for a new subscription with nothing memoised:
  ``K(w) = KH_rk(w)`` as a ``SecretBytes``, a fresh ``TopicKeys`` (its HMAC pads), the NAKT
  root ``KH_{K(w)}(num)``, the range checks and the cover walk. On the native backend the
  cover comes back as one ``AuthKeys`` mapping whose keys stay inside it until read, so the
  call makes no Python object per key; the walk alone (``nakt.cover_keys``) still returns
  every key as ``bytes``.
* Randomized-token matching, psguard.txt §4.1 ``<r, F_T(r)>``: one micro-batch of events
  against a broker's set of distinct subscription tokens (the paper's §5 workload has 128
  tokens), as :class:`~pubguard.schemes.psguard.tokens.TokenSet` runs it for the broker and
  the Spark match stage.

Each figure is the best of ``repeat`` timings in this process's CPU time (``process_time``), so
time spent descheduled on a shared machine does not count; the whole measurement is run
``runs`` times, the backends alternating, and the result reports the median of the runs with
their range (``*_range_us``) and the load average before and after (a shared machine's other
work still slows the CPU this process gets). Both backends must give the same keys and the
same hits; the result says whether they did (``agree``).
"""

from __future__ import annotations

import os
import random
import statistics
import time
import timeit
from typing import Any, Final

from pubguard import native
from pubguard.crypto import SecretBytes, prf_aes_blocks
from pubguard.keys import KDC, KeyCache, TopicKeys, derive_from, ktid
from pubguard.keys.nakt import cover_keys, derive_path
from pubguard.schemes.psguard.tokens import NONCE_BYTES, TOKEN_BYTES, TokenSet, tok64

__all__ = ["GOALS_US", "PAPER_US", "key_backends", "rows_for_table", "token_backends"]

#: psguard.txt Table 1, |R| = 10^4, lc = 1 (max cost): key generation and derivation, us
PAPER_US: Final = {
    "keygen_cold_us": 49.14,
    "keygen_walk_us": 49.14,
    "derive_max_us": 12.74,
    "derive_walk_us": 12.74,
}
#: what the native backend is asked to reach (the Python figures are reported beside them)
GOALS_US: Final = {
    "keygen_cold_us": 5.0,
    "keygen_walk_us": 5.0,
    "derive_max_us": 1.0,
    "derive_walk_us": 1.0,
    "cached_derive_us": 0.2,
    "token_match_us_per_event": 1.0,
}
RANGE_SIZE: Final = 10_000
TREE: Final = 1 << (RANGE_SIZE - 1).bit_length()  # the power-of-two tree the NAKT needs


def _best_us(stmt: str, env: dict[str, Any], number: int, repeat: int) -> float:
    """Best-of-``repeat`` microseconds per execution of ``stmt`` (names from ``env``)."""
    t = timeit.Timer(stmt, globals=env, timer=time.process_time)
    return min(t.repeat(number=number, repeat=repeat)) / number * 1e6


def _backends() -> list[native.Backend]:
    if native.available() and os.environ.get(native.ENV_VAR, "1") != "0":
        return ["python", "native"]
    return ["python"]


def _keys_once(number: int, repeat: int, leaves: list[str]) -> tuple[dict[str, float], Any]:
    kdc = KDC(SecretBytes(bytes(range(32))))
    lo, hi, m = 1, TREE - 2, TREE.bit_length() - 1  # worst case: 2m - 2 keys
    cold = _best_us(
        "T(kdc.topic_key('bench')).numeric_auth_keys('num', lo, hi, t, 1)",
        {"T": TopicKeys, "kdc": kdc, "lo": lo, "hi": hi, "t": TREE},
        number,
        repeat,
    )
    auth = kdc.numeric_auth_keys("bench", "num", lo, hi, TREE, 1)
    root = kdc.topic("bench").numeric_key("num", "")
    leaf = format(TREE // 3, f"0{m}b")
    derive = _best_us("f('', k, leaf)", {"f": derive_from, "k": root, "leaf": leaf}, number, repeat)
    raw_root = kdc.topic("bench").root("numeric", "num")
    walk = _best_us(
        "c(r, lo, hi, m)",
        {"c": cover_keys, "r": raw_root, "lo": lo, "hi": hi, "m": m},
        number,
        repeat,
    )
    dwalk = _best_us("d(r, leaf)", {"d": derive_path, "r": raw_root, "leaf": leaf}, number, repeat)
    cache = KeyCache(capacity=1 << 16)  # every derived key stays cached
    cache.add_all("bench", auth)
    for x in leaves:  # warm: every leaf and its intermediates are cached
        cache.derive("bench", x)
    cached = sum(
        _best_us("d('bench', x)", {"d": cache.derive, "x": x}, number, repeat) for x in leaves
    ) / len(leaves)
    got = (
        {k: v.reveal() for k, v in auth.items()},
        derive_from("", root, leaf).reveal(),
        [cache.derive("bench", x).reveal() for x in leaves],
        cover_keys(raw_root, lo, hi, m),
        derive_path(raw_root, leaf),
    )
    return {
        "keygen_cold_us": cold,
        "keygen_walk_us": walk,
        "derive_max_us": derive,
        "derive_walk_us": dwalk,
        "cached_derive_us": cached,
    }, got


def _load() -> float:
    """The 1-minute load average (0.0 where the OS does not report one)."""
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - platform dependent
        return 0.0


def _median_range(xs: list[float]) -> tuple[float, list[float]]:
    return statistics.median(xs), [min(xs), max(xs)]


def key_backends(*, quick: bool = False, seed: int = 1, runs: int = 5) -> dict[str, Any]:
    """Key-tree costs at |R| = 10^4 on each available backend, the median of ``runs`` runs
    (one with ``quick``) with their range (see the module notes)."""
    number, repeat, items = (20, 3, 10) if quick else (200, 9, 50)
    runs = 1 if quick else max(1, runs)
    rng = random.Random(seed)
    leaves = [ktid(rng.randint(1, TREE - 2), TREE, 1) for _ in range(items)]
    per: dict[str, dict[str, list[float]]] = {}
    outputs = []
    load_before = _load()
    for _ in range(runs):
        for b in _backends():
            with native.use(b):
                got_us, got = _keys_once(number, repeat, leaves)
            for metric, us in got_us.items():
                per.setdefault(b, {}).setdefault(metric, []).append(us)
            outputs.append(got)
    rows = []
    for metric, goal in GOALS_US.items():
        if metric not in per["python"]:
            continue
        py, py_range = _median_range(per["python"][metric])
        nat, nat_range = _median_range(per["native"][metric]) if "native" in per else (None, None)
        rows.append(
            {
                "metric": metric,
                "python_us": py,
                "python_range_us": py_range,
                "native_us": nat,
                "native_range_us": nat_range,
                "speedup": py / nat if nat else None,
                "goal_us": goal,
                "goal_met": nat is not None and nat <= goal,
                "paper_us": PAPER_US.get(metric),
            }
        )
    return {
        "range_size": RANGE_SIZE,
        "tree_size": TREE,
        "depth": TREE.bit_length() - 1,
        "keys_per_cover": len(outputs[0][0]),
        "backends": list(per),
        "backend_active": native.describe(),
        "runs": runs,
        "load_average": [load_before, _load()],
        "agree": all(o == outputs[0] for o in outputs),
        "rows": rows,
    }


def _token_workload(
    rng: random.Random, tokens: int, batch: int, tags: int, matching: int
) -> tuple[list[bytes], bytes, list[tuple[int, ...]]]:
    """``tokens`` distinct tokens; ``batch`` events, each carrying ``tags`` tags of which
    ``matching`` are tags of tokens in the set (the rest are tokens the broker does not hold)."""
    toks = [rng.randbytes(TOKEN_BYTES) for _ in range(tokens)]
    nonces = rng.randbytes(NONCE_BYTES * batch)
    out: list[tuple[int, ...]] = []
    for e in range(batch):
        r = nonces[NONCE_BYTES * e : NONCE_BYTES * (e + 1)]
        own = [tok64(prf_aes_blocks(t, r)) for t in rng.sample(toks, matching)]
        other = [
            tok64(prf_aes_blocks(rng.randbytes(TOKEN_BYTES), r)) for _ in range(tags - matching)
        ]
        out.append(tuple(own + other))
    return toks, nonces, out


def token_backends(
    *,
    tokens: int = 128,
    batch: int = 256,
    tags: int = 8,
    matching: int = 2,
    quick: bool = False,
    seed: int = 1,
    runs: int = 5,
) -> dict[str, Any]:
    """Randomized-token matching of one micro-batch on each available backend, the median of
    ``runs`` runs (one with ``quick``) with their range."""
    number, repeat = (3, 3) if quick else (20, 9)
    runs = 1 if quick else max(1, runs)
    toks, nonces, tagl = _token_workload(random.Random(seed), tokens, batch, tags, matching)
    samples: dict[str, list[float]] = {}
    hits: dict[str, list[tuple[int, int]]] = {}
    load_before = _load()
    for _ in range(runs):
        for b in _backends():
            with native.use(b):
                ts = TokenSet(toks)  # the broker's kept index: set up once, outside the timing
                hits[b] = ts.match_batch(nonces, tagl)
                m = ts.match_batch
                us = _best_us("m(n, t)", {"m": m, "n": nonces, "t": tagl}, number, repeat)
            samples.setdefault(b, []).append(us / batch)
    per_event = {b: statistics.median(xs) for b, xs in samples.items()}
    spread = {b: [min(xs), max(xs)] for b, xs in samples.items()}
    nat = per_event.get("native")
    goal = GOALS_US["token_match_us_per_event"]
    return {
        "tokens": tokens,
        "batch": batch,
        "tags_per_event": tags,
        "matching_tags_per_event": matching,
        "backends": list(per_event),
        "backend_active": native.describe(),
        "hits": len(hits["python"]),
        "agree": all(h == hits["python"] for h in hits.values()),
        "runs": runs,
        "load_average": [load_before, _load()],
        "python_us_per_event": per_event["python"],
        "python_range_us_per_event": spread["python"],
        "native_us_per_event": nat,
        "native_range_us_per_event": spread.get("native"),
        "speedup": per_event["python"] / nat if nat else None,
        "aes_evaluations_per_event": tokens,
        "goal_us_per_event": goal,
        "goal_met": nat is not None and nat <= goal,
        "paper": "no per-event figure; 128 tokens is psguard.txt §5's workload, whose whole "
        "overhead is 2.2 % throughput and 1.5 % latency",
    }


def rows_for_table(r: dict[str, Any]) -> list[tuple[str, ...]]:
    """Human-readable rows of :func:`key_backends` (for the CLI's table): medians, and the
    native figure's range over the runs (the JSON has both backends' ranges)."""

    def f(x: float | None, spec: str = ".3f") -> str:
        return "-" if x is None else format(x, spec)

    def m(x: float | None, rng: list[float] | None) -> str:
        """The median with the runs' range: ``1.061 (1.04-1.09)``."""
        return f(x) if not rng or len(set(rng)) == 1 else f"{f(x)} ({rng[0]:.3g}-{rng[1]:.3g})"

    out: list[tuple[str, ...]] = []
    for x in r["rows"]:
        out.append(
            (
                x["metric"],
                f(x["python_us"], ".2f"),
                m(x["native_us"], x.get("native_range_us")),
                f(x["speedup"], ".1f") + ("x" if x["speedup"] else ""),
                f(x["goal_us"], ".2f") + (" met" if x["goal_met"] else " missed"),
                f(x["paper_us"], ".2f"),
            )
        )
    return out

"""``pubguard keys ...`` (inspect NAKT ids, covers and derived keys) and ``pubguard bench keys``.

Examples::

    pubguard keys nakt-id --range-size 32 --least-count 4 --value 22 --json      {"ktid": "101"}
    pubguard keys nakt-cover --range-size 32 --least-count 4 --low 8 --high 19 --json
    pubguard keys derive --scheme psguard --master-hex 00..1f --topic cancerTrail \\
        --attribute age --ktid 101 --json

``derive`` is a debugging aid: it refuses to run unless the master secret is given explicitly
(no environment variable, no default) and never prints it. Bad input is one line on stderr and
a non-zero exit (the group turns every PubguardError into ``pubguard: error: ...``).
"""

from __future__ import annotations

import random
import statistics
import time
import timeit
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json
from pubguard.errors import ValidationError

if TYPE_CHECKING:  # crypto and the key services are imported when a command runs
    from pubguard.crypto import SecretBytes
    from pubguard.keys import KDC

__all__ = ["register"]


def _master(hex_text: str | None) -> SecretBytes:
    from pubguard.crypto import SecretBytes

    if not hex_text:
        raise ValidationError("refusing to derive keys: give the master secret with --master-hex")
    try:
        raw = bytes.fromhex(hex_text)
    except ValueError:
        raise ValidationError("--master-hex is not valid hex") from None  # never echo it
    if len(raw) < 16:
        raise ValidationError("--master-hex must encode at least 16 bytes")
    return SecretBytes(raw)


def _shape(f: click.decorators.FC) -> click.decorators.FC:
    f = click.option("--least-count", "least_count", type=int, required=True, help="lc(num)")(f)
    f = click.option("--range-size", "range_size", type=int, required=True, help="|R(num)|")(f)
    return f


def register(cli: click.Group) -> None:
    @cli.group(name="keys", help="Inspect key-tree identifiers and derived keys.")
    def keys() -> None:
        pass

    @keys.command("nakt-id", help="psguard.txt §3.1: ktid(v), the m-bit form of floor(v / lc).")
    @_shape
    @click.option("--value", type=int, required=True)
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    def nakt_id(range_size: int, least_count: int, value: int, as_json: bool) -> None:
        from pubguard.keys import ktid

        k = ktid(value, range_size, least_count)
        if as_json:
            print_json({"ktid": k})
        else:
            console.print(f"ktid({value}) = {k or '(root)'}")

    @keys.command("nakt-cover", help="Minimal NAKT cover of the range [low, high].")
    @_shape
    @click.option("--low", type=int, required=True)
    @click.option("--high", type=int, required=True)
    @click.option("--snap", is_flag=True, help="Widen the range to whole least-count buckets.")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    def cover(
        range_size: int, least_count: int, low: int, high: int, snap: bool, as_json: bool
    ) -> None:
        from pubguard.keys import nakt_cover

        c = nakt_cover(low, high, range_size, least_count, snap=snap)
        if as_json:
            print_json({"cover": c})
        else:
            console.print(f"cover [{low}, {high}] = {', '.join(n or '(root)' for n in c)}")

    @keys.command("derive", help="Derive one key from an explicit master (debugging aid).")
    @click.option("--scheme", type=click.Choice(["psguard", "eventguard"]), required=True)
    @click.option("--master-hex", "master_hex", help="The master secret (never printed).")
    @click.option("--topic", required=True)
    @click.option("--attribute", help="psguard: numeric attribute name (num).")
    @click.option("--ktid", "node", help="psguard: NAKT node; omit for the topic key.")
    @click.option("--publisher", help="psguard: per-publisher tree K^P(w).")
    @click.option("--epoch", type=int, help="eventguard: epoch e of K(w, e); psguard: rk_e.")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    def derive(
        scheme: str,
        master_hex: str | None,
        topic: str,
        attribute: str | None,
        node: str | None,
        publisher: str | None,
        epoch: int | None,
        as_json: bool,
    ) -> None:
        from pubguard.keys import KDC, MetaService

        master = _master(master_hex)
        out: dict[str, str]
        if scheme == "eventguard":
            if epoch is None:
                raise ValidationError("--scheme eventguard needs --epoch")
            if attribute or node or publisher:
                raise ValidationError("--attribute/--ktid/--publisher are psguard options")
            ms = MetaService(master)
            out = {
                "key_hex": ms.epoch_key(topic, epoch).reveal().hex(),
                "token_hex": ms.topic_token(topic).hex(),
            }
        else:
            kdc = KDC(master) if epoch is None else KDC(master).for_epoch(epoch)
            if attribute is None:
                if node is not None:
                    raise ValidationError("--ktid needs --attribute")
                key = kdc.publisher_key(publisher, topic) if publisher else kdc.topic_key(topic)
            else:
                key = kdc.numeric_key(topic, attribute, node or "", publisher=publisher)
            out = {"key_hex": key.reveal().hex()}
        if as_json:
            print_json(out)
        else:
            for k, v in out.items():
                console.print(f"{k}: {v}")

    get_group(cli, "bench", "Benchmarks (paper figures beside ours).").add_command(bench_keys)


# -- pubguard bench keys ---------------------------------------------------------------------

# psguard.txt Table 1 (max cost, lc = 1): |R| -> (# keys, key gen us, key derive us)
PAPER_T1: Final = {100: (12, 23.66, 6.37), 1000: (18, 34.58, 9.10), 10000: (26, 49.14, 12.74)}
# psguard.txt Table 2 (average cost, |R| = 10^4): phi_R -> (# keys, key gen us, key derive us)
PAPER_T2: Final = {10: (3.32, 14.20, 3.02), 100: (6.64, 17.22, 6.04), 1000: (9.97, 20.25, 9.07)}
# eventguard.txt Table 1 (MD5, HMAC-MD5, AES-128-CBC, ElGamal-512 on a 900 MHz Pentium III)
PAPER_EG: Final = {
    "H": ("MD5", "2 MB/s (16 B) - 61 MB/s (1024 B)", 2.0, 61.0),
    "KH": ("HMAC-MD5", "1.5 MB/s (16 B) - 49 MB/s (1024 B)", 1.5, 49.0),
    "AEAD encrypt": ("AES-128-CBC", "10 MB/s", 10.0, 10.0),
    "sign": ("ElGamal-512", "714 sign/s", 714.0, 714.0),
    "verify": ("ElGamal-512", "588 verify/s", 588.0, 588.0),
}
GOALS_US: Final = {"keygen": 20.0, "derive": 6.0, "cached_derive": 1.0}


def _us(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Best-of-``repeat`` microseconds per call over runs of ``number`` calls, in this
    process's CPU time (``time.process_time``), so time spent descheduled on a shared machine
    does not count; the minimum is the least disturbed run."""
    return (
        min(timeit.repeat(fn, number=number, repeat=repeat, timer=time.process_time)) / number * 1e6
    )


def _mean_us(fns: list[Callable[[], object]], number: int, repeat: int) -> float:
    """Average over work items (e.g. random ranges) of each item's best-of time."""
    return statistics.fmean(_us(fn, number, repeat) for fn in fns)


def _tree(r: int) -> int:
    """psguard.txt's |R| = 10^k rounded up to the power-of-two tree the NAKT needs."""
    return 1 << (r - 1).bit_length()


def _cold_gen(kdc: KDC, lo: int, hi: int, t: int) -> Mapping[str, SecretBytes]:
    """Key generation from ``rk`` with nothing memoised: K(w), the root, then the cover."""
    from pubguard.keys import TopicKeys

    return TopicKeys(kdc.topic_key("bench")).numeric_auth_keys("num", lo, hi, t, 1)


def _table1(kdc: KDC, n: int, rep: int) -> list[dict[str, Any]]:
    from pubguard.keys import derive_from

    rows = []
    for r, (p_keys, p_gen, p_der) in PAPER_T1.items():
        t = _tree(r)
        m = t.bit_length() - 1
        lo, hi = 1, t - 2  # the worst case: 2m - 2 keys
        tk = kdc.topic("bench")
        keys = tk.numeric_auth_keys("num", lo, hi, t, 1)
        fresh = partial(_cold_gen, kdc, lo, hi, t)
        cold = _us(fresh, n, rep)
        warm = _us(partial(tk.numeric_auth_keys, "num", lo, hi, t, 1), n, rep)
        root = tk.numeric_key("num", "")
        leaf = format(t // 3, f"0{m}b")
        der = _us(partial(derive_from, "", root, leaf), n, rep)
        rows.append(
            dict(
                range_size=r,
                tree_size=t,
                depth=m,
                keys=len(keys),
                paper_keys=p_keys,
                keygen_cold_us=cold,
                keygen_warm_us=warm,
                paper_keygen_us=p_gen,
                derive_us=der,
                paper_derive_us=p_der,
            )
        )
    return rows


def _table2(kdc: KDC, n: int, rep: int, items: int, rng: random.Random) -> list[dict[str, Any]]:
    from pubguard.keys import derive_from, ktid

    t = _tree(10_000)
    rows = []
    for phi, (p_keys, p_gen, p_der) in PAPER_T2.items():
        ranges = [(x, x + phi - 1) for x in (rng.randrange(t - phi + 1) for _ in range(items))]
        covers = [kdc.numeric_auth_keys("bench", "num", lo, hi, t, 1) for lo, hi in ranges]
        gens: list[Callable[[], object]] = []
        ders: list[Callable[[], object]] = []
        for (lo, hi), c in zip(ranges, covers, strict=True):
            leaf = ktid(rng.randint(lo, hi), t, 1)
            node = next(k for k in c if leaf.startswith(k))
            gens.append(partial(_cold_gen, kdc, lo, hi, t))
            ders.append(partial(derive_from, node, c[node], leaf))
        rows.append(
            dict(
                phi=phi,
                range_size=10_000,
                tree_size=t,
                keys=statistics.fmean(len(c) for c in covers),
                paper_keys=p_keys,
                keygen_cold_us=_mean_us(gens, n, rep),
                paper_keygen_us=p_gen,
                derive_us=_mean_us(ders, n, rep),
                paper_derive_us=p_der,
            )
        )
    return rows


def _cached(kdc: KDC, n: int, rep: int, items: int, rng: random.Random) -> dict[str, Any]:
    """psguard.txt §3.2.3: derivations that hit the subscriber's KeyCache."""
    from pubguard.keys import KeyCache, ktid

    t = _tree(10_000)
    cache = KeyCache(capacity=1 << 16)  # large enough that every derived key stays cached
    cache.add_all("bench", kdc.numeric_auth_keys("bench", "num", 1, t - 2, t, 1))
    leaves = [ktid(rng.randint(1, t - 2), t, 1) for _ in range(items)]
    for leaf in leaves:  # warm: the leaves and their intermediates are now cached
        cache.derive("bench", leaf)
    hits = cache.hits
    us = _mean_us([partial(cache.derive, "bench", leaf) for leaf in leaves], n, rep)
    return {
        "tree_size": t,
        "leaves": len(leaves),
        "cached_derive_us": us,
        "all_hits": cache.misses == len(leaves) and cache.hits > hits,
    }


def _eventguard(n: int, rep: int) -> tuple[list[dict[str, Any]], float]:
    from pubguard.crypto import KH, H, KeyedHash, SecretBytes, SigningKey, aad_for, seal

    key = SecretBytes(bytes(range(32)))
    key16 = SecretBytes(bytes(range(16)))  # a native AES-128 key (no per-call HKDF stretch)
    kh = KeyedHash(key)
    small, big = b"x" * 16, b"x" * 1024
    aad = aad_for("bench", "payload", 0)
    sk = SigningKey.from_seed(b"s" * 32)
    msg = b"m" * 64
    sig = sk.sign(msg)
    pk = sk.public

    def mbs(fn: Callable[[], object], size: int) -> float:
        return size / _us(fn, n, rep)  # bytes per microsecond = MB/s

    sha_us = _us(lambda: H(b"k" * 33), n, rep)
    rows = [
        ("H", "SHA-256", mbs(lambda: H(small), 16), mbs(lambda: H(big), 1024)),
        ("KH", "HMAC-SHA256", mbs(lambda: KH(key, small), 16), mbs(lambda: KH(key, big), 1024)),
        (
            "KH",
            "HMAC-SHA256, precomputed pads",
            mbs(lambda: kh(small), 16),
            mbs(lambda: kh(big), 1024),
        ),
        ("AEAD encrypt", "AES-256-GCM (1024 B)", mbs(lambda: seal(key, big, aad=aad), 1024), None),
        (
            "AEAD encrypt",
            "AES-128-GCM (1024 B)",
            mbs(lambda: seal(key16, big, aad=aad, alg="AES-128-GCM"), 1024),
            None,
        ),
        ("sign", "Ed25519", 1e6 / _us(lambda: sk.sign(msg), n, rep), None),
        ("verify", "Ed25519", 1e6 / _us(lambda: pk.verify(sig, msg), n, rep), None),
    ]
    out = []
    for prim, ours, lo, hi in rows:
        p_alg, p_text, p_lo, p_hi = PAPER_EG[prim]
        unit = "MB/s" if prim in ("H", "KH", "AEAD encrypt") else "ops/s"
        row = dict(
            primitive=prim,
            ours=ours,
            paper=p_alg,
            paper_figure=p_text,
            unit=unit,
            value=lo,
            speedup=lo / p_lo,
        )
        if hi is not None:
            row |= dict(value_1024=hi, speedup_1024=hi / p_hi)
        out.append(row)
    return out, sha_us


@click.command(
    "keys",
    help="psguard.txt Tables 1-2 and eventguard.txt Table 1, ours vs the paper; "
    "the Python and native backends side by side at |R| = 10^4.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quick", is_flag=True, help="Few iterations (smoke test; noisy numbers).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--runs",
    type=click.IntRange(1, 50),
    default=5,
    show_default=True,
    help="Runs of the backend comparison (median and range reported; 1 with --quick).",
)
def bench_keys(as_json: bool, quick: bool, seed: int, runs: int) -> None:
    from pubguard.crypto import SecretBytes
    from pubguard.keys import KDC
    from pubguard.ops.bench.backends import key_backends

    n, rep, items = (2, 2, 5) if quick else (20, 15, 200)  # calls per run, runs, work items
    rng = random.Random(seed)
    kdc = KDC(SecretBytes(bytes(range(32))))
    eg, sha_us = _eventguard(n, rep)
    t1 = _table1(kdc, n, rep)
    t2 = _table2(kdc, n, rep, items, rng)
    cached = _cached(kdc, n, rep, items, rng)
    backends = key_backends(quick=quick, seed=seed, runs=runs)
    big = t1[-1]
    goals = {
        "keygen_warm_us<=20": big["keygen_warm_us"] <= GOALS_US["keygen"],
        "keygen_cold_us<=20": big["keygen_cold_us"] <= GOALS_US["keygen"],
        "derive_max_us<=6": big["derive_us"] <= GOALS_US["derive"],
        "cached_derive_us<=1": cached["cached_derive_us"] <= GOALS_US["cached_derive"],
    }
    for row in backends["rows"]:  # the native fast path's goals, on the median of the runs
        if row["native_us"] is not None:
            goals[f"native_{row['metric']}<={row['goal_us']:g}"] = row["goal_met"]
    for row in t1 + t2:
        row["keygen_in_H"] = row["keygen_cold_us"] / sha_us
        row["derive_in_H"] = row["derive_us"] / sha_us
        row["keygen_speedup_vs_paper"] = row["paper_keygen_us"] / row["keygen_cold_us"]
        row["derive_speedup_vs_paper"] = row["paper_derive_us"] / row["derive_us"]
    result = {
        "baseline": {"sha256_33B_us": sha_us, "note": "one H call; *_in_H = cost in H calls"},
        "psguard_table1_max": t1,
        "psguard_table2_avg": t2,
        "key_cache": cached,
        "eventguard_table1": eg,
        "backends": backends,
        "goals": goals,
        "quick": quick,
    }
    if as_json:
        print_json(result)
    else:
        _print_tables(result)


def _print_tables(r: dict[str, Any]) -> None:
    t = Table(title="psguard.txt Table 1 (max cost, lc = 1): ours | paper")
    for col in (
        "|R| (tree)",
        "# keys",
        "key gen cold us",
        "key gen warm us",
        "derive us",
        "gen in H",
    ):
        t.add_column(col, justify="right")
    for x in r["psguard_table1_max"]:
        t.add_row(
            f"{x['range_size']} ({x['tree_size']})",
            f"{x['keys']} | {x['paper_keys']}",
            f"{x['keygen_cold_us']:.2f} | {x['paper_keygen_us']}",
            f"{x['keygen_warm_us']:.2f}",
            f"{x['derive_us']:.2f} | {x['paper_derive_us']}",
            f"{x['keygen_in_H']:.1f}",
        )
    console.print(t)
    t = Table(title="psguard.txt Table 2 (average, |R| = 10^4): ours | paper")
    for col in ("phi_R", "# keys", "key gen us", "derive us"):
        t.add_column(col, justify="right")
    for x in r["psguard_table2_avg"]:
        t.add_row(
            str(x["phi"]),
            f"{x['keys']:.2f} | {x['paper_keys']}",
            f"{x['keygen_cold_us']:.2f} | {x['paper_keygen_us']}",
            f"{x['derive_us']:.2f} | {x['paper_derive_us']}",
        )
    console.print(t)
    console.print(
        f"cached derivation (KeyCache, |R| = 10^4): {r['key_cache']['cached_derive_us']:.3f} us"
    )
    t = Table(title="eventguard.txt Table 1: ours | paper")
    for col in ("primitive", "ours", "value", "paper", "speedup"):
        t.add_column(col)
    for x in r["eventguard_table1"]:
        val = f"{x['value']:.1f} {x['unit']}"
        if "value_1024" in x:
            val = f"{x['value']:.1f} (16 B) / {x['value_1024']:.1f} (1024 B) {x['unit']}"
        t.add_row(
            x["primitive"],
            x["ours"],
            val,
            f"{x['paper']}: {x['paper_figure']}",
            f"{x['speedup']:.1f}x",
        )
    console.print(t)
    from pubguard.ops.bench.backends import rows_for_table

    b = r["backends"]
    t = Table(title=f"|R| = 10^4 (tree {b['tree_size']}, depth {b['depth']}): python | native")
    for col in ("metric", "python us", "native us (range)", "speedup", "goal", "paper"):
        t.add_column(col, justify="right", no_wrap=col == "metric")
    for row in rows_for_table(b):
        t.add_row(*row)
    console.print(t)
    load = ", ".join(f"{x:.2f}" for x in b["load_average"])
    console.print(
        f"backends agree: {b['agree']}; active: {b['backend_active']}; median of "
        f"{b['runs']} run(s) (range in brackets); load average before, after: {load}"
    )
    goals = ", ".join(f"{k} {'met' if ok else 'missed'}" for k, ok in r["goals"].items())
    console.print(
        f"baseline: one SHA-256 call = {r['baseline']['sha256_33B_us']:.3f} us; goals: {goals}"
    )

"""One Ed25519 signature per publication, verified one by one (pyca) and as batches.

The workload is the case the issue names: a Merkle batch of size 1, so every publication
carries its own publisher signature and a broker (or the pipeline's validate stage, one Arrow
batch at a time) verifies one signature per publication. Each publication's signed bytes are
~200 bytes from one of a few publishers. For each batch size the figure is the verification
cost per publication, best of ``repeat`` runs in process CPU time, for:

* ``pyca_us``: :meth:`VerifyKey.verify` per signature (OpenSSL; the Python backend);
* ``batch_us``: :func:`~pubguard.crypto.ed25519_batch.verify_batch` (``ed25519-dalek``'s batch
  equation in ``pubguard._native``; pyca's verdict per signature);
* ``forged_batch_us``: the same batch with one forged signature in it, which costs the batch
  its speed-up (every other signature is then checked alone), never its verdict.

The plain baseline (no signature) costs no verification; the paper's figure beside ours is
eventguard.txt Table 1's ElGamal-512 verify rate (588/s on a 900 MHz Pentium III).
"""

from __future__ import annotations

import random
import time
import timeit
from typing import Any, Final

from pubguard import native
from pubguard.crypto import SigningKey, VerifyKey
from pubguard.crypto.ed25519_batch import verify_batch

__all__ = ["PAPER_VERIFY_US", "signature_batches"]

#: eventguard.txt Table 1: ElGamal-512, 588 verify/s
PAPER_VERIFY_US: Final = 1e6 / 588
MESSAGE_BYTES: Final = 200


def _best_us(fn: Any, number: int, repeat: int) -> float:
    return (
        min(timeit.repeat(fn, number=number, repeat=repeat, timer=time.process_time)) / number * 1e6
    )


def _workload(rng: random.Random, n: int, publishers: int) -> list[tuple[VerifyKey, bytes, bytes]]:
    keys = [SigningKey.from_seed(rng.randbytes(32)) for _ in range(publishers)]
    out = []
    for i in range(n):
        sk = keys[i % publishers]
        msg = rng.randbytes(MESSAGE_BYTES)
        out.append((sk.public, sk.sign(msg), msg))
    return out


def signature_batches(
    *,
    sizes: tuple[int, ...] = (1, 16, 64, 256),
    publishers: int = 4,
    quick: bool = False,
    seed: int = 1,
) -> dict[str, Any]:
    """Per-publication verification cost at each batch size, both ways (module notes)."""
    rng = random.Random(seed)
    repeat = 3 if quick else 7
    rows = []
    for size in sizes:
        items = _workload(rng, size, publishers)
        forged = list(items)
        forged[size // 2] = (forged[size // 2][0], rng.randbytes(64), forged[size // 2][2])
        number = max(1, (8 if quick else 64) // size)
        with native.use("python"):
            pyca = _best_us(lambda: verify_batch(items), number, repeat) / size  # noqa: B023
            ref = verify_batch(forged)
        row: dict[str, Any] = {"batch": size, "pyca_us": pyca, "paper_verify_us": PAPER_VERIFY_US}
        if native.available():
            with native.use("native"):
                batch = _best_us(lambda: verify_batch(items, batch_min=1), number, repeat) / size  # noqa: B023
                bad = _best_us(lambda: verify_batch(forged, batch_min=1), number, repeat) / size  # noqa: B023
                agree = verify_batch(forged, batch_min=1) == ref
            row |= {
                "batch_us": batch,
                "forged_batch_us": bad,
                "speedup": pyca / batch,
                "agree": agree,
            }
        rows.append(row)
    return {
        "publishers": publishers,
        "message_bytes": MESSAGE_BYTES,
        "backend_active": native.describe(),
        "plain_us": 0.0,
        "rows": rows,
        "paper": "eventguard.txt Table 1: ElGamal-512 verify 588/s (1701 us); the paper switches "
        "signature checks off to stay under a 5 % throughput drop",
    }

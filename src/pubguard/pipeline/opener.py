"""Stage *open*: subscribers read their outbox and decrypt (trusted side, never on executors).

Each delivery names the filter whose authorisation keys open it (psguard.txt §3.1 ``K(f)``);
the subscriber's client (:class:`~pubguard.schemes.psguard.FilterKeys`) derives ``K(e)`` from
them, opens the sealed secret attributes and payload, and re-checks its own plaintext filter
(post-filter, exactness under least-count snapping). Runs on the driver over Arrow record
batches, so memory stays bounded by the batch size, and writes ``OUT/opened`` atomically.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubguard.errors import InvalidToken
from pubguard.model import Filter
from pubguard.pipeline.stages import TrustedContext
from pubguard.pipeline.tables import atomic_replace
from pubguard.schemes.psguard import FilterKeys

__all__ = ["OpenStats", "open_outbox", "read_opened"]

BATCH_ROWS = 8192


@dataclass
class OpenStats:
    opened: int = 0
    refused: int = 0  # InvalidToken: not authorised or tampered
    post_filtered: int = 0  # key trees admitted it, the filter did not (least count)
    by_subscriber: dict[str, int] = field(default_factory=dict)


def _opened_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("subscriber", pa.string()),
            ("event_id", pa.string()),
            ("type", pa.string()),
            ("attrs", pa.string()),  # JSON of every decrypted attribute, routable and secret
            ("payload", pa.binary()),
        ]
    )


def open_outbox(
    outbox: Path | str,
    opened: Path | str,
    ctx: TrustedContext,
    filters: Mapping[str, Filter],
    *,
    progress: Callable[[int], None] | None = None,
) -> OpenStats:
    """Decrypt every delivery of ``outbox`` with its subscriber's keys into ``opened``."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    stats = OpenStats()
    keys: dict[str, FilterKeys] = {}
    auth = ctx.authority()
    schema = _opened_schema()

    def write(staging: Path) -> None:
        staging.mkdir(parents=True, exist_ok=True)
        src = Path(outbox)
        if not src.exists() or not any(src.iterdir()):
            pq.write_table(schema.empty_table(), staging / "part-00000.parquet")
            return
        dataset = ds.dataset(str(src), format="parquet", partitioning="hive")
        writer = pq.ParquetWriter(staging / "part-00000.parquet", schema)
        try:
            for batch in dataset.to_batches(batch_size=BATCH_ROWS):
                cols = batch.to_pydict()
                out: dict[str, list[Any]] = {n: [] for n in schema.names}
                for i in range(batch.num_rows):
                    fid = cols["filter_id"][i]
                    fk = keys.get(fid)
                    if fk is None:
                        f = filters.get(fid)
                        if f is None:
                            stats.refused += 1
                            continue
                        fk = keys[fid] = auth.authorise(f)
                    rec = {
                        k: cols[k][i] for k in ("event_id", "epoch", "hint", "secrets", "payload")
                    }
                    try:
                        ev = fk.open_matching(rec)
                    except InvalidToken:
                        stats.refused += 1
                        continue
                    if ev is None:
                        stats.post_filtered += 1
                        continue
                    sub = str(cols["subscriber"][i])
                    out["subscriber"].append(sub)
                    out["event_id"].append(ev.id)
                    out["type"].append(ev.type)
                    out["attrs"].append(json.dumps(dict(ev.attrs), sort_keys=True))
                    out["payload"].append(ev.payload)
                    stats.opened += 1
                    stats.by_subscriber[sub] = stats.by_subscriber.get(sub, 0) + 1
                writer.write_table(pa.table(out, schema=schema))
                if progress is not None:
                    progress(batch.num_rows)
        finally:
            writer.close()

    atomic_replace(Path(opened), write)
    return stats


def read_opened(opened: Path | str) -> Any:
    """The opened deliveries as a pandas DataFrame."""
    import pyarrow.parquet as pq

    return pq.read_table(str(opened)).to_pandas()

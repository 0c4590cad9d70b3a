"""Table schemas and the on-disk layout of the pipeline.

A *protected* folder is what the trusted side hands to the untrusted cluster (and what the match
stage reads)::

    PROT/manifest.json       profile, mode, epoch, publishers' public keys (no secret)
    PROT/events/             protected events  (EVENTS_SCHEMA)
    PROT/filters/            protected filters (FILTERS_SCHEMA): one row per token
    PROT/subscriptions/      (subscriber, filter_id)

An *out* folder receives::

    OUT/protected/           the match stage's input (a protected folder, when run end to end)
    OUT/outbox/subscriber=S/ deliveries: the match stage's output, ciphertext only
    OUT/opened/              what subscribers decrypted (trusted side)
    OUT/summary.json

Every directory is written to a staging sibling and renamed into place
(:func:`atomic_replace`), so a failed job never leaves a half-written outbox.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pubguard.errors import InputError

__all__ = [
    "DELIVERY_COLUMNS",
    "EVENT_COLUMNS",
    "FILTER_COLUMNS",
    "MANIFEST",
    "SUBSCRIPTION_COLUMNS",
    "WIRE_EVENT_COLUMNS",
    "atomic_replace",
    "check_columns",
    "deliveries_schema",
    "events_schema",
    "filters_schema",
    "read_manifest",
    "subscriptions_schema",
    "wire_events_schema",
    "write_manifest",
]

MANIFEST = "manifest.json"
FORMAT = 1

EVENT_COLUMNS = (
    "event_id",
    "publisher",
    "ts",
    "epoch",
    "mode",
    "nonce",
    "tokens",
    "hint",
    "secrets",
    "payload",
    "sig",
)
FILTER_COLUMNS = ("filter_id", "n", "tok", "token")
#: the ``wire`` layout (pubguard.pipeline.wire): the scheme's publication as it travels on the
#: broker network (routing, body, meta; msgpack) and the public fields executors join and
#: order on, read from it with the broker face's decoder
WIRE_EVENT_COLUMNS = (
    "event_id",
    "publisher",
    "pkey",
    "ts",
    "seq",
    "mode",
    "nonce",
    "tokens",
    "routing",
    "body",
    "meta",
)
SUBSCRIPTION_COLUMNS = ("subscriber", "filter_id")
DELIVERY_COLUMNS = ("subscriber", "event_id", "filter_id", "epoch", "hint", "secrets", "payload")


def events_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("event_id", T.StringType(), False),
            T.StructField("publisher", T.StringType(), False),
            T.StructField("ts", T.LongType(), False),
            T.StructField("epoch", T.LongType(), False),
            T.StructField("mode", T.StringType(), False),
            T.StructField("nonce", T.BinaryType(), False),
            T.StructField("tokens", T.ArrayType(T.LongType(), False), False),
            T.StructField("hint", T.BinaryType(), False),
            T.StructField("secrets", T.BinaryType(), False),  # psguard.encode_secrets
            T.StructField("payload", T.BinaryType(), False),
            T.StructField("sig", T.BinaryType(), False),
        ]
    )


def wire_events_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("event_id", T.StringType(), False),
            T.StructField("publisher", T.StringType(), False),
            T.StructField("pkey", T.BinaryType(), False),  # the publisher's public key
            T.StructField("ts", T.LongType(), False),  # signed timestamp, ms
            T.StructField("seq", T.LongType(), False),  # narada §V-B sequence (0: none)
            T.StructField("mode", T.StringType(), False),
            T.StructField("nonce", T.BinaryType(), False),
            T.StructField("tokens", T.ArrayType(T.LongType(), False), False),
            T.StructField("routing", T.BinaryType(), False),
            T.StructField("body", T.BinaryType(), False),
            T.StructField("meta", T.BinaryType(), False),
        ]
    )


def filters_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("filter_id", T.StringType(), False),
            T.StructField("n", T.IntegerType(), False),
            T.StructField("tok", T.LongType(), False),
            T.StructField("token", T.BinaryType(), False),
        ]
    )


def subscriptions_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("subscriber", T.StringType(), False),
            T.StructField("filter_id", T.StringType(), False),
        ]
    )


def deliveries_schema() -> Any:
    from pyspark.sql import types as T

    ev = {f.name: f for f in events_schema().fields}
    return T.StructType(
        [
            T.StructField("subscriber", T.StringType(), False),
            T.StructField("event_id", T.StringType(), False),
            T.StructField("filter_id", T.StringType(), False),
            ev["epoch"],
            ev["hint"],
            ev["secrets"],
            ev["payload"],
        ]
    )


def check_columns(df: Any, wanted: Iterable[str], what: str, path: str | None = None) -> None:
    """InputError naming the first missing column (and what table it belongs to)."""
    have = set(df.columns)
    missing = [c for c in wanted if c not in have]
    if missing:
        raise InputError(
            f"{what} table is missing column(s) {', '.join(repr(c) for c in missing)} "
            f"(has: {', '.join(sorted(have)) or 'none'})",
            path=path,
        )


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).write_text(json.dumps({"format": FORMAT, **manifest}, indent=2) + "\n")


def read_manifest(folder: Path | str) -> dict[str, Any]:
    p = Path(folder) / MANIFEST
    try:
        m = json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError("not a protected folder (no manifest.json)", path=str(folder)) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable manifest: {exc}", path=str(p)) from None
    if not isinstance(m, dict):
        raise InputError("manifest must be a JSON object", path=str(p))
    for key in ("profile", "mode", "epoch", "publishers"):
        if key not in m:
            raise InputError(f"manifest is missing {key!r}", path=str(p))
    return m


def atomic_replace(target: Path, write: Callable[[Path], None]) -> None:
    """Run ``write(staging)`` then swap ``staging`` into ``target``. On any failure the
    staging directory is removed and ``target`` is left exactly as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:8]}"
    try:
        write(staging)
        if not staging.exists():
            staging.mkdir(parents=True)
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(target, old)
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

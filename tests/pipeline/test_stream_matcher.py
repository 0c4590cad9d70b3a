"""The streaming match stage's map-side matcher (``stream.index_matches``) on both backends of
:mod:`pubguard.native`: randomized tokens go through the native token matcher when it is built,
and the deliveries are the Python reference's, and contain the reference matcher's pairs.
No Spark: the matcher is the function each executor task runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pubguard import native
from pubguard.pipeline.profiles import get_profile
from pubguard.pipeline.stream import index_from_rows, index_matches
from tests.native_backends import BACKENDS
from tests.pipeline.helpers import MASTER, NOW, expected_pairs, make_workload


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    root: Path = tmp_path_factory.mktemp("stream-matcher")
    _, wl = make_workload(root, "psguard")
    prof = get_profile("default")
    ctx = prof.trusted(MASTER, list(wl.types.values()), mode="randomized", now_ms=NOW, seed=5)
    events = prof.protect_events_pandas(wl.events, ctx)
    fl = prof.protect_filters_pandas(wl.filters, ctx)
    subs = [{"subscriber": s.subscriber, "filter_id": s.filter.id} for s in wl.subscriptions]
    index = index_from_rows(fl.to_dict("records"), subs)
    # executors see the publisher's keyed wire ids; rows keep the workload's order
    app_id = dict(zip(events["event_id"], (str(e.id) for e in wl.events), strict=True))
    return (
        index,
        events,
        {(s, w) for w, a in app_id.items() for s, e in expected_pairs(wl) if e == a},
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_matcher_agrees_across_backends(protected: Any, backend: str) -> None:
    index, events, expected = protected
    with native.use("python"):
        reference = set(
            index_matches({**index, "tokens": list(index["tokens"])}, events, "randomized")
        )
    with native.use(backend):
        # a fresh token list: the per-worker memo is keyed by the list object
        got = set(index_matches({**index, "tokens": list(index["tokens"])}, events, "randomized"))
    assert got == reference
    # the key trees may admit a little more (least count), never less than the reference
    assert expected <= {(s, e) for s, e, _ in got}

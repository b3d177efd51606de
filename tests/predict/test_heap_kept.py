"""A bulk `predict` (more than 64 rows) sets the C heap to keep freed arrays for reuse
(`dse._heap.keep_freed`, issue 37): its ~30 MB of arrays a call no longer come back from the
kernel as fresh pages. A one-configuration call never touches the allocator."""

from __future__ import annotations

import sys

import pytest
from test_golden_small import golden_configs

from dse import _heap
from dse.predict import predict
from dse.predict import request as R


def test_bulk_batches_keep_the_heap_small_calls_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(R, "keep_freed", lambda: calls.append(1) or True)
    cfgs = golden_configs(R.REPEATS_AFTER + 1, 37)
    predict({k: v[:1] for k, v in cfgs.items()})
    predict({k: v[: R.REPEATS_AFTER] for k, v in cfgs.items()})
    assert calls == []
    predict(cfgs)
    assert calls == [1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt only")
def test_keep_freed_holds_once_set_and_is_tried_once() -> None:
    if not _heap._glibc():
        pytest.skip("not glibc")
    assert _heap.keep_freed() is True
    assert _heap.keep_freed() is True  # the second call reads the first one's result


def test_dse_keep_heap_0_leaves_the_allocator_alone() -> None:
    """An embedding program opts out: nothing set, in a fresh process (the setting is
    process-wide, so this one's state says nothing)."""
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = "from dse import _heap; print(_heap.keep_freed())"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    off = subprocess.run(
        [sys.executable, "-c", code], env={**env, "DSE_KEEP_HEAP": "0"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert off.stdout.strip() == "False"
    if sys.platform.startswith("linux") and _heap._glibc():
        on = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert on.stdout.strip() == "True"

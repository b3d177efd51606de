"""Issue 36: a search-space field walked from YAML to front.csv passes through each module
once: `dse sweep`, run under `benchmarks/walk.py`'s profiler hook, never calls back into a module
that is already on the call stack below it (work handed back and forth, which the one-way import
rule cannot see: callbacks and late imports). A handed-in callback is delegation and starts a new
segment of the stack. The walk reads call structure only, never time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _walk_module():
    spec = importlib.util.spec_from_file_location("walk", ROOT / "benchmarks" / "walk.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["walk"] = mod  # its dataclasses look their module up while being built
    spec.loader.exec_module(mod)
    return mod


walk = _walk_module()


def _sweep_walk(tmp_path: Path, space: Path):
    from dse.cli import main

    out = tmp_path / "out"
    rc: list[int] = []
    w = walk.trace(
        lambda: rc.append(main(["sweep", str(space), "--out", str(out), "-q", "--no-report"]))
    )
    assert rc == [0] and (out / "front.csv").exists()
    return w


@pytest.mark.slow
def test_the_sweep_hands_no_work_back(tmp_path: Path) -> None:
    w = _sweep_walk(tmp_path, ROOT / "search_spaces" / "heads_study.yaml")
    s = w.summary()
    # the walk went through the house: YAML, space, sweep, predictor, results folder
    for mod in ("dse.spec.space", "dse.sweep._run", "dse.predict.request", "dse.predict.pricing",
                "dse.predict.adapters", "dse.sweep.results"):  # fmt: skip
        assert any(m == mod for m, _ in w.stops), mod
    assert s["back_calls"] == 0, s["back_edges"]


def test_the_walk_sees_work_handed_back() -> None:
    """The rule can fail: a class of module A whose method module B calls while A is on the
    stack below B (what the pricer did with its row view until issue 36) is a back-call; a
    closure A hands B is a callback."""
    import types

    a = types.ModuleType("dse._walk_a")
    b = types.ModuleType("dse._walk_b")
    exec(
        "class View:\n    def get(self):\n        return 1\n"
        "def outer(run):\n    def cb():\n        return 2\n    return run(View(), cb)\n",
        a.__dict__,
    )
    exec("def run(view, cb):\n    return view.get() + cb()\n", b.__dict__)
    w = walk.trace(lambda: a.outer(b.run))
    assert w.back_edges[("dse._walk_b", "dse._walk_a")] == 1
    assert w.back_functions["dse._walk_a.View.get"] == 1
    assert w.callbacks[("dse._walk_b", "dse._walk_a")] == 1

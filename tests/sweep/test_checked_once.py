"""A sweep checks each batch of configurations once (issue 36): `SearchSpace.columns_from`
makes a checked `Configs`, and the predictor takes it without checking it again."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sweep_results import SMALL

import dse.predict
from dse.spec import columns as C
from dse.sweep import SweepOptions, run_sweep


def test_a_sweep_checks_each_batch_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[tuple[str, int]] = []  # (calling module, rows) of every check
    predicted: list[Any] = []  # what the predictor was given
    real_check, real_predict = C.as_columns, dse.predict.predict

    def check(configs: Any, **kw: Any) -> Any:
        out = real_check(configs, **kw)
        checked.append((sys._getframe(1).f_globals["__name__"], out[1]))
        return out

    def predict(configs: Any, *args: Any, **kw: Any) -> Any:
        predicted.append(configs)
        return real_predict(configs, *args, **kw)

    monkeypatch.setattr(C, "as_columns", check)
    monkeypatch.setattr(dse.predict, "predict", predict)
    space = tmp_path / "small.yaml"
    space.write_text(SMALL.replace("trials: 48", "trials: 32"))
    out = tmp_path / "out"
    outcome = run_sweep(SweepOptions(space_file=space, out=out, quiet=True))  # a journal storage
    assert not outcome.interrupted and outcome.done == 32
    assert (out / "trials.parquet").is_file()
    assert predicted and all(isinstance(p, C.Configs) for p in predicted)
    callers = {m for m, _ in checked}
    assert not any(m.startswith("dse.predict") for m in callers), callers
    # every row predicted was checked before, by the space, once per batch
    assert sum(p.n for p in predicted) <= sum(n for m, n in checked if m == "dse.spec.space")
    assert all(not v.flags.writeable for p in predicted for v in p.values())
    assert np.isfinite(np.concatenate([p["d_model"] for p in predicted]).astype(float)).all()

"""The `screened` sampler: it finds the exact front of an enumerable space with a fraction of
its configurations as trials (and beats random sampling at the same budget), never proposes a
configuration twice, resumes into the same sequence, counts what it priced, and runs on a
space whose configurations cannot be numbered in 64 bits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from dse import pareto
from dse.spec.space import load_space
from dse.sweep import SweepOptions, exact_front, run_sweep
from dse.sweep._screened import ScreenedSampler, _crowding
from dse.sweep.space_index import digit_columns, space_columns

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_exact import KILL_SPACE

# slow: minutes on a 2-core VM (fits, sweeps, builds); `pytest -m "not slow"` leaves it out
pytestmark = pytest.mark.slow

# test_exact's kill-test space (7 x 3 x 33 x 2 x 2 x 9 = 24,948 configurations: batch size
# trades TPOT against energy per token, so the exact front is long; 48 heads do not divide
# 2048 or 4096), as a screened study of 160 trials in batches of 16.
SPACE = KILL_SPACE.replace("name: ex", "name: scr").replace(
    "study: {sampler: exact, trials: 100, seed: 3}",
    "study: {sampler: screened, trials: 160, seed: 0, batch_size: 16}",
)
PARAMS = ["batch_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"]
OBJ = ["obj.latency_tpot", "obj.energy_hymell_per_output_token"]


def _space(tmp_path: Path, text: str = SPACE) -> Path:
    p = tmp_path / "scr.yaml"
    p.write_text(text)
    return p


def _sweep(space: Path, out: Path, **kw: object) -> pd.DataFrame:
    run_sweep(SweepOptions(space_file=space, out=out, quiet=True, **kw))  # type: ignore[arg-type]
    return pd.read_parquet(out / "trials.parquet")


def _hv_ratio(t: pd.DataFrame, ex: object) -> float:
    norm = ex.normalisation  # type: ignore[attr-defined]
    pts = t.loc[t["feasible"], OBJ].to_numpy(float)
    return pareto.hypervolume(pts, norm) / pareto.hypervolume(ex.objectives, norm)  # type: ignore[attr-defined]


def test_finds_the_exact_front_with_a_fraction_of_the_space(tmp_path: Path) -> None:
    path = _space(tmp_path)
    space = load_space(path)
    ex = exact_front(space)
    t = _sweep(path, tmp_path / "s")
    assert len(t) == 160 and space.size() == 24_948
    assert len(t[PARAMS].drop_duplicates()) == 160  # no configuration proposed twice
    scr = _hv_ratio(t, ex)
    # Random sampling with the same budget and seed falls well short of the exact front.
    rnd = _hv_ratio(_sweep(path, tmp_path / "r", sampler="random"), ex)
    assert scr >= 0.999 and rnd < 0.99, (scr, rnd)
    # Most of the exact front's configurations are among the 160 trials.
    exact_rows = space_columns(space, ex.index)
    exact_keys = {tuple(int(exact_rows[p][i]) for p in PARAMS) for i in range(len(ex.index))}
    found = {tuple(int(v) for v in r) for r in t.loc[t["on_front"], PARAMS].to_numpy()}
    assert len(found & exact_keys) >= 0.8 * len(exact_keys), (
        len(found & exact_keys),
        len(exact_keys),
    )
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert s["sampler"] == "screened"
    # 10 batches of 16 trials, each chosen from up to 16 x 64 priced candidates
    assert 160 < s["screened_configs"] <= 10 * 16 * 64


def test_resume_continues_the_same_sequence_and_keeps_counting(tmp_path: Path) -> None:
    path = _space(tmp_path)
    cols = ["number", *PARAMS]
    whole = _sweep(path, tmp_path / "whole", trials=96)
    part = tmp_path / "part"
    first = _sweep(path, part, trials=48)
    resumed = _sweep(path, part, trials=96)
    assert resumed[cols].equals(whole[cols])
    assert np.allclose(resumed[OBJ].to_numpy(), whole[OBJ].to_numpy(), rtol=1e-6)
    assert len(first) == 48
    s_whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    s_part = json.loads((part / "summary.json").read_text())
    assert s_part["screened_configs"] == s_whole["screened_configs"] > 96
    study = optuna.load_study(
        study_name="scr",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(part / "journal.log"))
        ),
    )
    assert study.user_attrs["dse:screened"] == s_part["screened_configs"]


def test_the_plan_ranks_front_entrants_first_and_spreads_a_tied_rank() -> None:
    front = np.array([[1.0, 5.0], [5.0, 1.0]])
    cand = np.array(
        [
            [6.0, 6.0],  # dominated by the front: last
            [2.0, 2.0],  # enters the front (dominates nothing of it, nothing dominates it)
            [3.0, 3.0],  # dominated only by the candidate above: rank 1
            [0.5, 9.0],  # enters the front at its end
        ]
    )
    assert list(ScreenedSampler._select(cand, front, 2)) == [1, 3]
    assert list(ScreenedSampler._select(cand, front, 4)) == [1, 3, 2, 0]
    # Three tied entrants, two places: the boundary points (infinite crowding) are kept.
    tied = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    assert sorted(ScreenedSampler._select(tied, np.empty((0, 2)), 2)) == [0, 2]
    assert np.isinf(_crowding(tied)[[0, 2]]).all() and np.isfinite(_crowding(tied)[1])


def test_digit_columns_match_the_enumeration(tmp_path: Path) -> None:
    space = load_space(_space(tmp_path))
    idx = np.array([0, 1, 777, 24_947])
    digits = np.column_stack(np.unravel_index(idx, [len(p.values) for p in space.searched]))
    a, b = space_columns(space, idx), digit_columns(space, digits)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k


def test_runs_on_a_space_too_large_to_number(tmp_path: Path) -> None:
    """More configurations than a 64-bit index holds: digits, never flat indices."""
    text = (
        SPACE.replace(
            "batch_size: {values: [1, 2, 4, 8, 16, 32, 64]}", "batch_size: {low: 1, high: 512}"
        )
        .replace("prompt_tokens: 1024", "prompt_tokens: {low: 16, high: 8192}")
        .replace("output_tokens: 256", "output_tokens: {low: 16, high: 4096}")
        .replace(
            "d_ff: {low: 8192, high: 16384, step: 1024}", "d_ff: {low: 4096, high: 32768, step: 8}"
        )
        .replace("vocab_size: 128256", "vocab_size: {low: 32000, high: 160000, step: 8}")
        .replace("trials: 160", "trials: 48")
    )
    path = _space(tmp_path, text)
    space = load_space(path)
    assert space.size() > 2**63
    t = _sweep(path, tmp_path / "huge")
    searched = [p.name for p in space.searched]
    assert len(t) == 48 and len(t[searched].drop_duplicates()) == 48
    assert t["feasible"].any()

"""The `exact` sampler: chunked enumeration equals brute force (constraints, maximised
objectives), resumes after SIGKILL without losing or double-counting a chunk, refuses a space
above --max-configs naming the sampler to use, and records the front plus a sample as trials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from dse import pareto
from dse.cli import main
from dse.spec.space import load_space
from dse.sweep import SweepOptions, run_sweep
from dse.sweep import _enumerate as E
from dse.sweep._evaluate import evaluate
from dse.sweep.space_index import space_columns

# slow: minutes on a 2-core VM (fits, sweeps, builds); `pytest -m "not slow"` leaves it out
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

# 7 x 3 x 5 x 2 x 2 x 2 = 840 configurations. Batch size trades time per output token against
# energy per token, so the front is long; n_heads 48 does not divide d_model 2048/4096 (invalid).
SPACE = """\
name: ex
hardware: h100_sxm
workload:
  batch_size: {values: [1, 2, 4, 8, 16, 32, 64]}
  prompt_tokens: 1024
  output_tokens: 256
  tensor_parallel: 1
space:
  d_model: {values: [2048, 3072, 4096]}
  n_layers: {low: 16, high: 48, step: 8}
  n_heads: {values: [32, 48]}
  n_kv_heads: {values: [2, 8]}
  d_ff: {values: [8192, 16384]}
  vocab_size: 128256
constraints:
  active_params: {min: 2.0e+9, max: 15.0e+9}
  fits_memory: true
objectives:
  latency: {metric: tpot}
  energy: {source: hymell, metric: per_output_token}
study: {sampler: exact, trials: 100, seed: 3}
"""
PARAMS = ["batch_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"]


def _write(tmp_path: Path, text: str, name: str = "ex.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _brute(space_file: Path) -> tuple[set[tuple[object, ...]], int, int, int]:
    """The feasible front of every configuration evaluated at once: (keys, size, valid,
    feasible)."""
    space = load_space(space_file)
    cols = space_columns(space, np.arange(space.size()))
    ev = evaluate(space, cols, with_tokens2wh=False)
    keep = pareto.front_indices(ev.objectives, ev.feasible, space.objectives.directions)
    keys = {tuple(np.asarray(cols[k])[i].item() for k in PARAMS) for i in keep}
    return keys, space.size(), int(ev.valid.sum()), int(ev.feasible.sum())


def _keys(table: pd.DataFrame) -> set[tuple[object, ...]]:
    return {tuple(r) for r in table[PARAMS].itertuples(index=False)}


def _exact(space_file: Path, out: Path, **kw: object) -> dict[str, object]:
    outcome = run_sweep(SweepOptions(space_file=space_file, out=out, quiet=True, **kw))  # type: ignore[arg-type]
    assert not outcome.interrupted
    return json.loads((out / "summary.json").read_text())


def _check_against_brute(space_file: Path, out: Path, s: dict[str, object]) -> None:
    keys, size, valid, feasible = _brute(space_file)
    assert len(keys) > 1
    front = pd.read_csv(out / "front.csv")
    assert _keys(front) == keys
    assert _keys(pd.read_csv(out / "exact_front.csv")) == keys
    x = s["exact"]
    assert isinstance(x, dict)
    assert (x["configurations"], x["enumerated"]) == (size, size)
    assert (x["valid"], x["invalid"], x["feasible"]) == (valid, size - valid, feasible)
    assert x["front"] == len(keys)
    assert s["hypervolume"] == pytest.approx(s["exact_hypervolume"], rel=1e-12)
    assert not (out / E.PROGRESS_FILE).exists()  # the study holds the result now


def test_exact_front_equals_brute_force(tmp_path: Path) -> None:
    f = _write(tmp_path, SPACE)
    out = tmp_path / "r"
    s = _exact(f, out, chunk_size=97)  # chunks that do not divide the space
    _check_against_brute(f, out, s)
    assert s["sampler"] == "exact"
    # Real trials: the front plus a seeded sample of the rest (here all of it: 840 < 2,000).
    trials = pd.read_parquet(out / "trials.parquet")
    assert len(trials) == 840 and s["exact"]["sample"] == 840 - s["exact"]["front"]  # type: ignore[index]
    study = optuna.load_study(
        study_name="ex",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(out / "journal.log"))
        ),
    )
    assert study.user_attrs["dse:exact"]["enumerated"] == 840
    assert len(study.get_trials()) == 840
    # The same command again changes nothing (the study is finished).
    s2 = _exact(f, out, chunk_size=97)
    assert s2["exact"] == s["exact"]
    assert _keys(pd.read_csv(out / "front.csv")) == _keys(pd.read_csv(out / "exact_front.csv"))


def test_the_scan_judges_by_code_and_the_trials_keep_the_messages(tmp_path: Path) -> None:
    """The enumeration evaluates with texts=False: validity from the rules' codes, no message
    formatted; its verdicts are the full evaluation's row for row, and the recorded trials
    carry the full messages (the same text `dse check` counts)."""
    from dse.spec import rules as R

    space = load_space(_write(tmp_path, SPACE))
    cols = space_columns(space, np.arange(space.size()))
    full = evaluate(space, cols)
    scan = evaluate(space, cols, with_tokens2wh=False, texts=False)
    np.testing.assert_array_equal(scan.valid, full.valid)
    np.testing.assert_array_equal(scan.feasible, full.feasible)
    np.testing.assert_array_equal(scan.invalid_code, full.invalid_code)
    np.testing.assert_array_equal(scan.objectives, full.objectives)
    bad = ~full.valid
    assert bad.sum() == 7 * 5 * 2 * 2 * 2  # n_heads 48 with d_model 2048 or 4096
    assert set(full.invalid_reason[bad]) == {
        "n_heads: must divide d_model=2048 (or set head_dim), got 48",
        "n_heads: must divide d_model=4096 (or set head_dim), got 48",
    }
    assert set(scan.invalid_reason[bad]) == {R.reasons()[int(scan.invalid_code[bad][0]) - 1]}
    assert (full.invalid_reason[~bad] == "").all() and (scan.invalid_code[~bad] == 0).all()
    trials = E.record_trials(space, np.flatnonzero(bad)[:3])
    assert [t.user_attrs["invalid_reason"] for t in trials] == list(full.invalid_reason[bad][:3])


def test_the_scan_predicts_only_rows_a_prediction_could_make_feasible(tmp_path: Path) -> None:
    """`evaluate(feasible_only=True)` (the enumeration's scan) predicts only the valid rows
    inside the constraints told without a prediction (sizes, memory); the verdicts, the counts
    and every feasible row's objectives are the full evaluation's, under a predicted limit too."""
    from dse.predict import predict

    text = SPACE.replace("  fits_memory: true\n", "  fits_memory: true\n  tpot: {max: 0.006}\n")
    space = load_space(_write(tmp_path, text))
    cols = space_columns(space, np.arange(space.size()))
    seen: list[int] = []

    def counted(part):  # the shipped predictor, counting the rows it is given
        seen.append(len(part["d_model"]))
        return predict(part, texts=False)

    full = evaluate(space, cols, with_tokens2wh=False, texts=False)
    scan = evaluate(space, cols, predictor=counted, with_tokens2wh=False, feasible_only=True)
    np.testing.assert_array_equal(scan.valid, full.valid)
    np.testing.assert_array_equal(scan.feasible, full.feasible)
    ok = full.feasible
    assert 0 < ok.sum() < full.valid.sum()  # the tpot limit binds, and so do the sizes
    # the scan predicts a subset of the rows: another batch layout, so float32 round-off of
    # the MLPs (1e-8 on AVX2's OpenBLAS kernels, nn.MLP.predict) and nothing more
    np.testing.assert_allclose(scan.objectives[ok], full.objectives[ok], rtol=1e-6, atol=0)
    static = full.valid & (full.constraints["active_params_max"] <= 0)
    static &= (full.constraints["active_params_min"] <= 0) & (full.constraints["fits_memory"] <= 0)
    assert seen == [int(static.sum())] and static.sum() < full.valid.sum()
    assert np.isnan(scan.objectives[full.valid & ~static]).all()


def test_sample_is_seeded_and_off_the_front(tmp_path: Path) -> None:
    f = _write(tmp_path, SPACE)
    space = load_space(f)
    front = np.array([0, 5, 17])
    a = E.sample_rest(space, front, seed=1, n=50)
    assert len(a) == 50 and not np.isin(a, front).any() and (np.diff(a) > 0).all()
    assert np.array_equal(a, E.sample_rest(space, front, seed=1, n=50))
    assert not np.array_equal(a, E.sample_rest(space, front, seed=2, n=50))


def test_chunk_order_does_not_change_the_front(tmp_path: Path) -> None:
    """Chunks merged in any order (a resume, a cluster) give the same front, index for index."""
    space = load_space(_write(tmp_path, SPACE))
    key = {"size": space.size(), "chunk": 64}
    results = [E.evaluate_chunk(space, c, 64) for c in range(-(-space.size() // 64))]
    fronts = []
    for order in (range(len(results)), reversed(range(len(results)))):
        st = E.Enumeration.new(key, 2, space.objectives.directions)
        for c in order:
            st.merge(results[c])
            st.merge(results[c])  # a chunk merged twice counts once
        fronts.append((st.index, st.objectives, st.total, st.valid, st.feasible))
        assert st.complete and st.total == space.size()
    assert np.array_equal(fronts[0][0], fronts[1][0])
    np.testing.assert_allclose(fronts[0][1], fronts[1][1], rtol=1e-12)
    assert fronts[0][2:] == fronts[1][2:]


def test_constraints_are_respected(tmp_path: Path) -> None:
    """A static limit (active parameters) and a predicted one (TPOT) both bound the front."""
    text = SPACE.replace("  fits_memory: true\n", "  fits_memory: true\n  tpot: {max: 0.006}\n")
    f = _write(tmp_path, text)
    out = tmp_path / "r"
    s = _exact(f, out)
    _check_against_brute(f, out, s)
    front = pd.read_csv(out / "front.csv")
    assert (front["feasible"]).all()
    assert (front["pred.tpot_s"] <= 0.006 * (1 + 1e-9)).all()
    assert front["active_params"].between(2.0e9, 15.0e9).all()
    # The predicted limit binds: without it the front reaches a slower TPOT.
    loose = _write(tmp_path, SPACE, "loose.yaml")
    s_loose = _exact(loose, tmp_path / "loose")
    assert s_loose["exact"]["feasible"] > s["exact"]["feasible"]  # type: ignore[index]
    assert pd.read_csv(tmp_path / "loose" / "front.csv")["pred.tpot_s"].max() > 0.006


def test_maximised_objective(tmp_path: Path) -> None:
    # Batch size trades TPOT (minimised) against throughput per GPU (maximised).
    text = SPACE.replace(
        "  energy: {source: hymell, metric: per_output_token}\n",
        "  throughput: {metric: per_gpu}\n",
    ).replace("name: ex", "name: exmax")
    f = _write(tmp_path, text)
    out = tmp_path / "r"
    s = _exact(f, out)
    assert [o["direction"] for o in s["objectives"]] == ["minimize", "maximize"]  # type: ignore[index]
    _check_against_brute(f, out, s)


def test_too_large_names_the_sampler(tmp_path: Path, capsys) -> None:
    f = _write(tmp_path, SPACE)
    rc = main(["sweep", str(f), "--out", str(tmp_path / "r"), "--max-configs", "100", "-q"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "--max-configs: sampler exact enumerates at most 100 configurations" in err
    assert "got a space of 840" in err and "--sampler screened" in err
    assert not (tmp_path / "r").exists()  # refused before anything was written
    rc = main(["sweep", str(f), "--out", str(tmp_path / "r"), "--max-configs", "0", "-q"])
    assert rc == 2
    assert "--max-configs: must be an integer >= 1, got 0" in capsys.readouterr().err
    # auto samples instead, and says why.
    from dse.sweep import _samplers as S

    space = load_space(f)
    assert S.resolve("auto", space, 50, max_configs=100) == "screened"
    assert S.resolve("auto", space, 50) == "exact"
    assert "more than 100 to enumerate" in S.explain("auto", space, 50, max_configs=100)


# A larger space for the kill test: 7 x 3 x 33 x 2 x 2 x 9 = 24,948 configurations in 98
# chunks of 256, so the kill lands mid-enumeration.
KILL_SPACE = SPACE.replace("{low: 16, high: 48, step: 8}", "{low: 16, high: 48, step: 1}").replace(
    "d_ff: {values: [8192, 16384]}", "d_ff: {low: 8192, high: 16384, step: 1024}"
)


def test_resume_after_sigkill(tmp_path: Path) -> None:
    f = _write(tmp_path, KILL_SPACE)
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "dse", "sweep", str(f), "--out", str(out), "-q", "--no-report"]
    cmd += ["--chunk-size", "256"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sidecar = out / E.PROGRESS_FILE
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done_at_kill = 0
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        st = E.Enumeration.load(sidecar, None)
        if st is not None and st.done.sum() >= 3:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the enumeration finished before the kill"
    st = E.Enumeration.load(sidecar, None)
    assert st is not None and 3 <= st.done.sum() < len(st.done)
    done_at_kill = int(st.done.sum())
    assert st.total == sum(min(256, 24_948 - 256 * c) for c in np.nonzero(st.done)[0])
    assert not (out / "summary.json").exists()
    # The same command again resumes: the chunks done are not evaluated again.
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["exact"]["enumerated"] == 24_948 and s["exact"]["chunks"] == 98
    assert done_at_kill < 98
    _check_against_brute(f, out, s)


def test_ctrl_c_stops_after_a_chunk(tmp_path: Path) -> None:
    f = _write(tmp_path, KILL_SPACE)
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "dse", "sweep", str(f), "--out", str(out), "--no-report"]
    cmd += ["--chunk-size", "256"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sidecar = out / E.PROGRESS_FILE
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        st = E.Enumeration.load(sidecar, None)
        if st is not None and st.done.sum() >= 2:
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.005)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "configurations; results so far" in err and "Resume with:" in err
    st = E.Enumeration.load(sidecar, None)
    assert st is not None and 2 <= st.done.sum() < len(st.done)


def test_dask_local_cluster_gives_the_one_core_front(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    f = _write(tmp_path, SPACE)
    one = _exact(f, tmp_path / "one", chunk_size=97)
    two = _exact(f, tmp_path / "two", chunk_size=97, workers=2)
    _check_against_brute(f, tmp_path / "two", two)
    a, b = one["exact"], two["exact"]
    assert isinstance(a, dict) and isinstance(b, dict)
    same = ("enumerated", "valid", "invalid", "feasible", "front", "sample", "chunks")
    assert {k: a[k] for k in same} == {k: b[k] for k in same}
    fa = pd.read_csv(tmp_path / "one" / "front.csv")
    fb = pd.read_csv(tmp_path / "two" / "front.csv")
    assert list(fa[PARAMS].itertuples(index=False)) == list(fb[PARAMS].itertuples(index=False))
    cols = [c for c in fa if c.startswith("obj.")]
    np.testing.assert_allclose(fa[cols].to_numpy(), fb[cols].to_numpy(), rtol=1e-9)


def test_dask_flags_need_exact(tmp_path: Path, capsys) -> None:
    f = _write(tmp_path, SPACE)
    rc = main(["sweep", str(f), "--out", str(tmp_path / "r"), "--sampler", "tpe", "--workers", "2"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--workers: only sampler exact runs on Dask" in err and "got sampler tpe" in err
    rc = main(["sweep", str(f), "--out", str(tmp_path / "r"), "--workers", "0", "-q"])
    assert rc == 2
    assert "--workers: must be an integer >= 1, got 0" in capsys.readouterr().err

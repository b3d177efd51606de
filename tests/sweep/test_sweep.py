"""`dse sweep` end to end on small real spaces: outputs, determinism, resume, samplers, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from sweep_results import SMALL

from dse import pareto
from dse.cli import main
from dse.errors import ArtifactError, ConfigError, DSEError
from dse.predict import predict
from dse.spec import columns as C
from dse.spec.space import load_space
from dse.sweep import SweepOptions, evaluate, exact_front, run_sweep
from dse.sweep._evaluate import tokens2wh_module
from dse.sweep._samplers import resolve

REPO = Path(__file__).resolve().parents[2]

# A larger space (3 x 13 x 3 x 4 x 17 = 7,956) where sampling matters.
MEDIUM = (
    SMALL.replace("{low: 24, high: 48, step: 8}", "{low: 24, high: 48, step: 2}")
    .replace("d_ff: {values: [8192, 16384]}", "d_ff: {low: 8192, high: 16384, step: 512}")
    .replace("n_heads: {values: [24, 32]}", "n_heads: {values: [16, 24, 32]}")
    .replace("n_kv_heads: {values: [4, 8]}", "n_kv_heads: {values: [1, 2, 4, 8]}")
    .replace("d_model: {values: [3072, 4096]}", "d_model: {values: [3072, 4096, 5120]}")
)

SUMMARY_KEYS = {
    "format_version",
    "dse_version",
    "created",
    "study",
    "space_file",
    "space",
    "sampler",
    "seed",
    "trials_requested",
    "objectives",
    "counts",
    "artifacts",
    "gpus",
    "hypervolume",
    "reference_point",
    "normalisation",
    "hypervolume_history",
    "exact_hypervolume",
    "catalogue",
    "storage",
    "elapsed_s",
}
PARAMS = ["d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    p = tmp_path / "small.yaml"
    p.write_text(SMALL)
    return p


def sweep(space: Path, out: Path, **kw: object) -> pd.DataFrame:
    opts = SweepOptions(space_file=space, out=out, quiet=True, **kw)  # type: ignore[arg-type]
    outcome = run_sweep(opts)
    assert not outcome.interrupted
    return pd.read_parquet(out / "trials.parquet")


# ------------------------------------------------------------------ the objective on arrays
def test_invalid_configurations_never_reach_the_predictor(small: Path) -> None:
    space = load_space(small)
    cols = space.enumerate()
    seen: list[np.ndarray] = []

    def recording(batch):  # the real predictor, remembering what it was asked
        seen.append(np.asarray(batch["n_heads"]))
        d = C.derived(batch, len(batch["d_model"]))
        assert (np.asarray(d["invalid"]) == "").all(), "an invalid configuration was predicted"
        return predict(batch)

    ev = evaluate(space, cols, predictor=recording)
    invalid = ~ev.valid
    assert invalid.sum() == 16  # d_model 4096 with 24 heads: 1 x 4 x 1 x 2 x 2
    assert sum(len(s) for s in seen) == 64 - 16
    assert np.isnan(ev.objectives[invalid]).all()
    assert np.isfinite(ev.objectives[ev.valid]).all()
    assert np.isnan(ev.pred["latency_s"][invalid]).all()
    assert (ev.constraints["valid"][invalid] == 1).all()
    # Feasible means valid and every constraint <= 0.
    cons = np.column_stack(list(ev.constraints.values()))
    assert np.array_equal(ev.feasible, ev.valid & (cons <= 0).all(axis=1))
    # Objectives are the predictor's latency and energy.
    assert np.allclose(ev.objectives[ev.valid, 0], ev.pred["latency_s"][ev.valid])
    assert np.allclose(ev.objectives[ev.valid, 1], ev.pred["energy_j"][ev.valid])
    if tokens2wh_module() is not None:
        assert np.isfinite(ev.t2wh["energy_j"][ev.valid]).all()


# ------------------------------------------------------------------ outputs
def test_results_folder_follows_the_format(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    t = sweep(small, out)
    space = load_space(small)
    assert len(t) == 48
    assert t["number"].tolist() == list(range(48))
    for f in ("trials.parquet", "trials.csv", "front.csv", "summary.json", "journal.log"):
        assert (out / f).is_file(), f
    assert not (out / "exact_front.csv").exists()
    head = ["number", "state", "feasible", "on_front"]
    assert list(t.columns[:4]) == head
    for col in (*C.CONFIG_FIELDS, "invalid_reason", "total_params", "active_params"):
        assert col in t, col
    for col in ("kv_bytes_per_token", "memory_bytes", "pred.latency_s", "pred.energy_j"):
        assert col in t, col
    assert {"pred.source", "pred.artifact_id", "pred.out_of_range"} <= set(t.columns)
    assert {"constraint.valid", "constraint.active_params_min", "constraint.fits_memory"} <= set(
        t.columns
    )
    if tokens2wh_module() is not None:
        assert {"t2wh.energy_j", "t2wh.prefill_energy_j", "t2wh.decode_energy_j"} <= set(t.columns)
    names = [f"obj.{n}" for n in space.objectives.names]
    assert names == ["obj.latency_request", "obj.energy_hymell_request"]
    # Invalid configurations: FAIL, NaN objectives and predictions, the reason given.
    bad = t["invalid_reason"] != ""
    assert bad.any()
    assert (t.loc[bad, "state"] == "FAIL").all()
    assert t.loc[bad, [*names, "pred.latency_s"]].isna().all().all()
    assert not t.loc[bad, "feasible"].any()
    # Stored predictions are what the predictor says for the stored configuration.
    ok = t[~bad]
    cols = {k: ok[k].to_numpy() for k in C.CONFIG_FIELDS}
    fresh = predict(cols)
    # (to 1e-6: the predictor's result moves in the 8th digit with the batch it is part of)
    assert np.allclose(ok["pred.latency_s"], fresh["latency_s"], rtol=1e-6)
    assert np.allclose(ok["obj.energy_hymell_request"], fresh["energy_j"], rtol=1e-6)
    # The front: feasible, non-dominated, one per distinct point, same rows as front.csv.
    front = pd.read_csv(out / "front.csv")
    on = t[t["on_front"]]
    assert sorted(front["number"]) == sorted(on["number"])
    assert on["feasible"].all()
    feas = t[t["feasible"]]
    expect = feas["number"].to_numpy()[pareto.front_indices(feas[names].to_numpy(float))]
    assert sorted(expect) == sorted(on["number"])
    assert front[names[0]].is_monotonic_increasing
    # The summary.
    s = json.loads((out / "summary.json").read_text())
    assert set(s) == SUMMARY_KEYS
    assert s["counts"] == {
        "trials": 48,
        "complete": int((t["state"] == "COMPLETE").sum()),
        "feasible": int(t["feasible"].sum()),
        "front": len(front),
        "distinct_configurations": len(t[list(C.CONFIG_FIELDS)].astype(str).drop_duplicates()),
        "repeats": 48 - len(t[list(C.CONFIG_FIELDS)].astype(str).drop_duplicates()),
        "front_trials": int(front["trials"].sum()),
        "indistinguishable": int(front["indistinguishable"].sum()),
    }
    assert s["sampler"] == "random" and s["seed"] == 0 and s["trials_requested"] == 48
    assert s["objectives"] == [
        {"name": "latency_request", "unit": "s", "direction": "minimize"},
        {"name": "energy_hymell_request", "unit": "J", "direction": "minimize"},
    ]
    assert s["gpus"] == ["h100_sxm"] and set(s["artifacts"]) == {"h100_sxm"}
    assert s["reference_point"] == [1.1, 1.1]
    norm = pareto.Normalisation(
        np.asarray(s["normalisation"]["ideal"]), np.asarray(s["normalisation"]["nadir"])
    )
    assert s["hypervolume"] == pytest.approx(pareto.hypervolume(front[names].to_numpy(), norm))
    assert s["hypervolume_history"][-1] == [48, pytest.approx(s["hypervolume"])]
    assert s["exact_hypervolume"] is None
    assert s["storage"].startswith("journal:///") and s["storage"].endswith("journal.log")
    # Every trial's prediction is also in the storage's user attributes.
    study = optuna.load_study(
        study_name="small",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(out / "journal.log"))
        ),
    )
    trials = study.get_trials()
    assert len(trials) == 48
    good = [tr for tr in trials if tr.state == optuna.trial.TrialState.COMPLETE]
    assert all(json.loads(tr.user_attrs["pred"])["latency_s"] > 0 for tr in good)
    assert all(set(tr.constraints) >= {"valid", "active_params_min"} for tr in trials)


@pytest.mark.slow
def test_same_seed_same_study_other_seed_other_study(small: Path, tmp_path: Path) -> None:
    space = tmp_path / "medium.yaml"
    space.write_text(MEDIUM)
    cols = ["number", *PARAMS, "obj.latency_request", "obj.energy_hymell_request"]
    a = sweep(space, tmp_path / "a", sampler="tpe", trials=40, batch_size=8)
    b = sweep(space, tmp_path / "b", sampler="tpe", trials=40, batch_size=8)
    c = sweep(space, tmp_path / "c", sampler="tpe", trials=40, batch_size=8, seed=1)
    assert a[cols].equals(b[cols])
    assert not a[PARAMS].equals(c[PARAMS])


@pytest.mark.slow
def test_resume_runs_only_the_missing_trials_and_continues_the_same_sequence(
    tmp_path: Path,
) -> None:
    space = tmp_path / "medium.yaml"
    space.write_text(MEDIUM)
    cols = ["number", *PARAMS, "obj.latency_request"]
    whole = sweep(space, tmp_path / "whole", sampler="nsga2", trials=96, batch_size=16)
    part = tmp_path / "part"
    first = sweep(space, part, sampler="nsga2", trials=48, batch_size=16)
    assert len(first) == 48
    again = sweep(space, part, sampler="nsga2", trials=48, batch_size=16)  # nothing to do
    assert again[cols].equals(first[cols])
    resumed = sweep(space, part, sampler="nsga2", trials=96, batch_size=16)
    assert resumed[cols[:-1]].equals(whole[cols[:-1]])
    # the latency within float32 round-off: a resumed batch may hold other unique rows than
    # the whole run's (repeats are told, not priced), and a CPU's GEMM kernels depend on that
    np.testing.assert_allclose(
        resumed[cols[-1]].to_numpy(float), whole[cols[-1]].to_numpy(float), rtol=1e-6,
        equal_nan=True,
    )  # fmt: skip
    assert (part / "journal.log").read_text().count('"op_code":4') == 96  # one line per trial


def test_exhaustive_is_every_configuration_and_the_exact_front(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "ex"
    t = sweep(small, out, sampler="exhaustive")
    space = load_space(small)
    assert len(t) == space.size() == 64
    assert len(t[PARAMS].drop_duplicates()) == 64
    exact = exact_front(space)
    front = pd.read_csv(out / "exact_front.csv")
    names = ["obj.latency_request", "obj.energy_hymell_request"]
    assert np.allclose(front[names].to_numpy(), exact.objectives)
    s = json.loads((out / "summary.json").read_text())
    assert s["exact_hypervolume"] == pytest.approx(s["hypervolume"])
    assert s["exact_hypervolume"] == pytest.approx(exact.hypervolume())
    assert exact.total == 64 and exact.valid == 48 and exact.feasible == int(t["feasible"].sum())


def test_reference_exact_scores_a_sampler_against_the_exact_front(tmp_path: Path) -> None:
    space = tmp_path / "medium.yaml"
    space.write_text(MEDIUM)
    out = tmp_path / "ref"
    sweep(space, out, sampler="random", trials=32, reference="exact")
    s = json.loads((out / "summary.json").read_text())
    exact = pd.read_csv(out / "exact_front.csv")
    names = ["obj.latency_request", "obj.energy_hymell_request"]
    ideal = exact[names].min().to_numpy()
    assert np.allclose(s["normalisation"]["ideal"], ideal)
    assert 0 <= s["hypervolume"] <= s["exact_hypervolume"] + 1e-12
    assert exact["on_front"].all() and exact["feasible"].all()


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["screened", "tpe", "nsga2", "nsga3", "random", "gp"])
def test_every_sampler_runs_batched_and_respects_constraints(
    sampler: str, small: Path, tmp_path: Path
) -> None:
    # GP fits after its 10 random start-up trials and costs seconds per trial: its last
    # batch of 4 is drawn from a fitted GP.
    n, batch = (16, 4) if sampler == "gp" else (24, 6)
    if sampler == "gp":  # one GP per objective and per constraint: keep one constraint
        small.write_text(SMALL.replace("  fits_memory: true\n", "").replace("min: 5.0e+9, ", ""))
    t = sweep(small, tmp_path / sampler, sampler=sampler, trials=n, batch_size=batch)
    assert len(t) == n
    s = json.loads((tmp_path / sampler / "summary.json").read_text())
    assert s["sampler"] == sampler
    assert (t.loc[t["on_front"], "feasible"]).all()


def test_auto_enumerates_small_spaces(small: Path, tmp_path: Path) -> None:
    t = sweep(small, tmp_path / "auto", sampler="auto")
    s = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert s["sampler"] == "exact" and len(t) == 64  # front + sample: all 64 here
    big = load_space(REPO / "benchmarks" / "sweep_big_space.yaml")  # 1.2M configurations
    assert resolve("auto", big, 2000) == "exact"  # within --max-configs: enumerated
    assert resolve("auto", big, 2000, max_configs=1_000_000) == "screened"
    assert resolve("auto", big, 50_000, max_configs=1_000_000) == "screened"
    assert resolve("auto", load_space(small), 10) == "exact"


# ------------------------------------------------------------------ the command line
@pytest.mark.slow
def test_cli_sweep_show_and_studies(small: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(small), "--trials", "32"]) == 0
    err = capsys.readouterr().err
    assert "trial" in err and "results in results/small" in err  # progress bar and summary
    assert main(["sweep", str(small), "--trials", "32", "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and cap.out == ""
    assert main(["show", "small"]) == 0
    out = capsys.readouterr().out
    front = pd.read_csv(tmp_path / "results" / "small" / "front.csv")
    assert f"{len(front)} configurations on the front" in out
    assert "latency_request [ms]" in out and "*" in out
    assert main(["studies"]) == 0
    out = capsys.readouterr().out
    assert "small" in out and "32" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sampler", "nsga4"], "--sampler: must be one of"),
        (["--storage", "redis://localhost"], "unknown storage URL"),
        (["--storage", "postgresql://nobody@127.0.0.1:1/none"], "cannot open"),
        (["--trials", "0"], "--trials: must be an integer >= 1"),
    ],
)
def test_bad_options_give_one_message_and_exit_2(
    args: list[str], message: str, small: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "res"
    assert main(["sweep", str(small), "--out", str(out), "-q", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()  # nothing written


def test_yaml_error_is_reported_with_its_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SMALL.replace("n_layers: {low: 24", "n_layers: {low: 24,, "))
    assert main(["sweep", str(bad), "--out", str(tmp_path / "r"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:" in err and "not valid YAML" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_existing_study_with_another_space_is_refused_untouched(
    small: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "res"
    sweep(small, out, trials=16)
    before = (out / "journal.log").read_bytes()
    other = tmp_path / "other.yaml"
    other.write_text(SMALL.replace("max: 12.0e+9", "max: 11.0e+9"))
    assert main(["sweep", str(other), "--study", "small", "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "exists with a different search space" in err
    assert (out / "journal.log").read_bytes() == before
    # Another sampler on the same study is refused too (it would not continue the sequence).
    assert main(["sweep", str(small), "--out", str(out), "--sampler", "tpe", "-q"]) == 2
    assert "created with sampler='random'" in capsys.readouterr().err


def test_unwritable_results_folder(small: Path, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["sweep", str(small), "--out", str(blocker / "res"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "results folder is not writable" in err
    if os.geteuid() != 0:  # root ignores permissions
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert main(["sweep", str(small), "--out", str(ro / "res"), "-q"]) == 2


def test_missing_predictor_artifact_fails_before_anything_is_written(
    small: Path, tmp_path: Path
) -> None:
    def no_artifact(batch):
        raise ArtifactError("surrogates/h100_sxm/manifest.json: no artifact for h100_sxm")

    out = tmp_path / "res"
    with pytest.raises(DSEError, match="no artifact for h100_sxm"):
        run_sweep(SweepOptions(space_file=small, out=out, quiet=True, predictor=no_artifact))
    assert not out.exists()


def test_gp_refuses_budgets_it_cannot_handle(small: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="gp: a Gaussian process"):
        run_sweep(SweepOptions(space_file=small, out=tmp_path / "r", sampler="gp", trials=5000))
    assert not (tmp_path / "r").exists()


def test_a_torn_last_journal_line_is_cut_and_the_study_resumes(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    first = sweep(small, out, trials=32)
    journal = out / "journal.log"
    with open(journal, "ab") as f:  # a write cut short by a crash
        f.write(b'{"op_code":4,"worker_id":"x","study_id":0,"datetime_st')
    t = sweep(small, out, trials=48)
    assert t["number"].tolist() == list(range(48))
    assert t.iloc[:32][["number", *PARAMS]].equals(first[["number", *PARAMS]])
    assert journal.read_bytes().endswith(b"\n")


def test_journal_storage_elsewhere_and_workers_need_a_database(
    small: Path, tmp_path: Path, capsys
) -> None:
    store = tmp_path / "store" / "studies.log"
    store.parent.mkdir()
    out = tmp_path / "res"
    args = ["sweep", str(small), "--out", str(out), "--storage", f"journal:{store}", "-q"]
    assert main([*args, "--trials", "16"]) == 0
    assert store.is_file() and not (out / "journal.log").exists()
    s = json.loads((out / "summary.json").read_text())
    assert s["storage"] == f"journal:///{str(store.resolve()).lstrip('/')}"
    assert main(["worker", "--storage", f"journal:{store}", "--study", "small", "-q"]) == 2
    assert "workers share a study through a database" in capsys.readouterr().err

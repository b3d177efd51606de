"""Fronts that can be trusted (issue 17): one row per distinct configuration with its trial
count, each configuration predicted once per study (resume and shared storages included), the
band-aware `indistinguishable` mark, `dse show` columns and `--compare`, `auto`/exhaustive
against brute force, and a report whose size grows slowly with trials."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.offline
import pytest
from sweep_results import SMALL

from dse import pareto
from dse.cli import main
from dse.predict import predict
from dse.report import load_results, write_report
from dse.spec import columns as C
from dse.spec.space import load_space
from dse.sweep import SweepOptions, evaluate, run_sweep, space_columns
from dse.sweep import fronts as F

PARAMS = ["d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    p = tmp_path / "small.yaml"
    p.write_text(SMALL)
    return p


class Counting:
    """The real predictor, remembering every configuration it was asked for, call by call."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[object, ...]]] = []
        self.placements = 0  # calls placing the catalogue models (`write_results`), not counted

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "place_many":
            frame = frame.f_back
        if frame is not None:  # the catalogue models, not configurations of the study
            self.placements += 1
            return predict(batch)
        n = len(batch["d_model"])
        self.calls.append([tuple(np.asarray(batch[k])[i].item() for k in PARAMS) for i in range(n)])
        return predict(batch)

    def swept(self, runs: list[int]) -> list[tuple[object, ...]]:
        """Configurations predicted by the sweeps, without each run's first call (the
        one-row-per-GPU check before anything is written, `check_predictor`)."""
        out: list[tuple[object, ...]] = []
        start = 0
        for n in runs:
            for call in self.calls[start + 1 : start + n]:
                out += call
            start += n
        return out


def _sweep(space: Path, out: Path, **kw: object) -> Counting:
    counting = Counting()
    opts = SweepOptions(space_file=space, out=out, quiet=True, predictor=counting, **kw)  # type: ignore[arg-type]
    assert not run_sweep(opts).interrupted
    return counting


def _keys(t: pd.DataFrame) -> list[tuple[object, ...]]:
    return [tuple(r) for r in t[PARAMS].itertuples(index=False)]


# ---------------------------------------------------------------------- dedupe
@pytest.mark.slow
def test_front_has_distinct_configurations_and_trial_counts(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    _sweep(small, out, trials=160)  # 160 random trials of 64 configurations: many repeats
    t = pd.read_parquet(out / "trials.parquet")
    front = pd.read_csv(out / "front.csv")
    hits = Counter(_keys(t))
    assert len(hits) < len(t)  # the study did repeat configurations
    assert len(set(_keys(front))) == len(front)  # one row per configuration
    for key, n in zip(_keys(front), front["trials"], strict=True):
        assert n == hits[key]
    # on_front marks the first trial of each front configuration, and nothing else.
    on = t[t["on_front"]]
    assert sorted(on["number"]) == sorted(front["number"])
    for key, number in zip(_keys(on), on["number"], strict=True):
        assert number == min(t.loc[[k == key for k in _keys(t)], "number"])
    s = json.loads((out / "summary.json").read_text())
    assert s["counts"]["distinct_configurations"] == len(hits)
    assert s["counts"]["repeats"] == len(t) - len(hits)
    assert s["counts"]["front_trials"] == int(front["trials"].sum())
    # A repeat holds the values of the trial it copies (no second prediction).
    first = t.drop_duplicates(subset=PARAMS).set_index(PARAMS)
    again = t[t.duplicated(subset=PARAMS) & (t["state"] == "COMPLETE")]
    assert len(again)
    ref = first.loc[[tuple(k) for k in again[PARAMS].to_numpy().tolist()]]
    assert np.array_equal(
        again["obj.latency_request"].to_numpy(), ref["obj.latency_request"].to_numpy()
    )


def test_copies_that_differ_by_float_noise_are_one_front_row() -> None:
    """Two trials of one configuration whose objectives differ by 1e-9 (predicted in two
    batches, before the cache) are one front row with trials = 2; float equality would keep
    both, since neither dominates the other."""
    rows = {
        "number": [0, 1, 2, 3],
        "state": ["COMPLETE"] * 4,
        "feasible": [True] * 4,
        "d_model": [4096, 4096, 3072, 5120],
        "n_layers": [32, 32, 24, 40],
        "obj.a": [1.0, 1.0 - 1e-9, 0.5, 2.0],
        "obj.b": [1.0, 1.0 + 1e-9, 3.0, 0.2],
    }
    front, idx = F.front_table(pd.DataFrame(rows), ["a", "b"])
    assert front["number"].tolist() == [2, 0, 3]  # sorted by a; the copy (trial 1) is not a row
    assert front["trials"].tolist() == [1, 2, 1]
    assert idx.tolist() == [2, 0, 3]


# ---------------------------------------------------------------------- predicted once
@pytest.mark.slow
def test_no_configuration_is_predicted_twice_across_resume(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    first = _sweep(small, out, trials=60)
    second = _sweep(small, out, trials=150)  # resumed: the journal's configurations are known
    swept = first.swept([len(first.calls)]) + second.swept([len(second.calls)])
    assert len(swept) == len(set(swept))  # never the same configuration twice
    t = pd.read_parquet(out / "trials.parquet")
    assert len(t) == 150
    valid = t[t["invalid_reason"] == ""]
    # Every valid configuration of the study was predicted exactly once, invalid ones never.
    assert set(swept) == set(_keys(valid))


@pytest.mark.slow  # minutes on a 2-core VM
def test_shared_storage_predicts_each_configuration_once(small: Path, tmp_path: Path) -> None:
    db = tmp_path / "study.db"
    counting = _sweep(small, tmp_path / "res", trials=120, storage=f"sqlite:///{db}")
    swept = counting.swept([len(counting.calls)])
    assert len(swept) == len(set(swept))
    t = pd.read_parquet(tmp_path / "res" / "trials.parquet")
    assert len(t) == 120 and len(set(_keys(t))) < 120


@pytest.mark.slow
def test_budget_beyond_the_space_warns(small: Path, tmp_path: Path, capsys) -> None:
    assert main(["sweep", str(small), "--out", str(tmp_path / "r"), "--trials", "100", "-q"]) == 0
    err = capsys.readouterr().err
    assert "the budget of 100 trials exceeds the 64 configurations" in err


# ---------------------------------------------------------------------- exact enumeration
def _brute_force_front(space_file: Path) -> set[tuple[object, ...]]:
    space = load_space(space_file)
    idx = np.arange(space.size())
    cols = space_columns(space, idx)
    ev = evaluate(space, cols)
    keep = pareto.front_indices(ev.objectives, ev.feasible)
    return {tuple(np.asarray(cols[k])[i].item() for k in PARAMS) for i in keep}


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["exhaustive", "auto"])
def test_exact_enumeration_matches_brute_force(
    small: Path, tmp_path: Path, sampler: str, capsys
) -> None:
    out = tmp_path / sampler
    rc = main(["sweep", str(small), "--out", str(out), "--sampler", sampler, "--no-report"])
    assert rc == 0
    err = capsys.readouterr().err
    if sampler == "auto":
        assert "sampler auto -> exact: the space has 64 configurations" in err
    s = json.loads((out / "summary.json").read_text())
    assert s["sampler"] == ("exact" if sampler == "auto" else sampler)
    assert s["counts"]["trials"] == 64
    assert s["counts"]["repeats"] == 0
    front = pd.read_csv(out / "front.csv")
    assert set(_keys(front)) == _brute_force_front(small)
    assert (front["trials"] == 1).all()


def test_auto_says_why_it_samples(tmp_path: Path, capsys) -> None:
    big = Path(__file__).resolve().parents[2] / "benchmarks" / "sweep_big_space.yaml"
    from dse.sweep import _samplers as S

    msg = S.explain("auto", load_space(big), 2000, max_configs=1_000_000)
    assert msg.startswith("sampler auto -> screened: the space has 1,")
    assert "more than 1,000,000 to enumerate (--max-configs)" in msg


# ---------------------------------------------------------------------- band
def _band_table(lat: list[float], en: list[float], rel: float) -> pd.DataFrame:
    lat_a, en_a = np.asarray(lat), np.asarray(en)
    return pd.DataFrame(
        {
            "obj.latency_request": lat_a,
            "obj.energy_hymell_request": en_a,
            "obj.total_params": [1e9, 2e9, 3e9, 4e9][: len(lat)],
            "pred.latency_s": lat_a,
            "pred.latency_lo_s": lat_a * (1 - rel),
            "pred.latency_hi_s": lat_a * (1 + rel),
            "pred.energy_j": en_a,
            "pred.energy_lo_j": en_a * (1 - rel),
            "pred.energy_hi_j": en_a * (1 + rel),
        }
    )


def test_band_marks_neighbours_inside_each_others_band() -> None:
    # Rows 0 and 1 differ by 1% and 2% under a +-5% band; row 2 is 50% away from row 1.
    t = _band_table([1.00, 1.01, 1.50], [2.00, 1.96, 1.00], 0.05)
    assert F.front_marks(t, ["latency_request", "energy_hymell_request"]).tolist() == [
        True,
        True,
        False,
    ]
    # With a +-0.5% band nothing is too close.
    t = _band_table([1.00, 1.01, 1.50], [2.00, 1.96, 1.00], 0.005)
    assert not F.front_marks(t, ["latency_request", "energy_hymell_request"]).any()
    # A non-predicted objective (sizes) has zero band: distinct sizes tell the points apart.
    t = _band_table([1.00, 1.01, 1.50], [2.00, 1.96, 1.00], 0.05)
    names = ["latency_request", "energy_hymell_request", "total_params"]
    assert not F.front_marks(t, names).any()
    lo, hi = F.band(t, "total_params")
    assert np.isnan(lo).all() and np.isnan(hi).all()


def test_energy_per_token_band_scales_from_the_request_band() -> None:
    t = _band_table([1.0], [2.0], 0.1)
    t["obj.energy_hymell_per_output_token"] = [0.5]
    lo, hi = F.band(t, "energy_hymell_per_output_token")
    assert lo[0] == pytest.approx(0.45) and hi[0] == pytest.approx(0.55)


def test_throughput_band_is_the_inverted_latency_band() -> None:
    t = _band_table([2.0], [1.0], 0.1)
    t["obj.throughput_per_gpu"] = [100.0]
    lo, hi = F.band(t, "throughput_per_gpu")
    assert lo[0] == pytest.approx(100 / 1.1) and hi[0] == pytest.approx(100 / 0.9)


def test_maximised_objectives_front() -> None:
    rows = {
        "number": [0, 1, 2],
        "state": ["COMPLETE"] * 3,
        "feasible": [True] * 3,
        "d_model": [1, 2, 3],
        "obj.a": [1.0, 2.0, 3.0],  # minimised
        "obj.t": [10.0, 30.0, 20.0],  # maximised: trial 2 is dominated by trial 1
    }
    front, _ = F.front_table(pd.DataFrame(rows), ["a", "t"], ("minimize", "maximize"))
    assert front["number"].tolist() == [0, 1]


# ---------------------------------------------------------------------- dse show
@pytest.mark.slow
def test_show_prints_every_searched_column(small: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "res"
    _sweep(small, out, trials=160)
    front = pd.read_csv(out / "front.csv")
    constant = [p for p in PARAMS if front[p].nunique() == 1]
    assert constant, "the test needs a searched column constant on the front"
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if "trial" in line and "trials" in line)
    for p in PARAMS:
        assert p in header.split(), p
    if front["indistinguishable"].any():
        assert "~ indistinguishable" in text


@pytest.mark.slow
def test_show_compare_places_a_catalogue_model(small: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "res"
    _sweep(small, out, trials=48)
    capsys.readouterr()
    assert main(["show", str(out), "--compare", "llama-3-8b"]) == 0
    text = capsys.readouterr().out
    assert "Llama-3-8B (catalogue)" in text
    assert "the front dominates Llama-3-8B at" in text
    verdicts = [x for x in text.splitlines() if "dominated by trial" in x or "not dominated" in x]
    assert len(verdicts) == 1  # one placement: the space fixes the GPU and the workload
    # Llama-2-7B's vocabulary (32,000) contradicts the space's fixed vocab_size.
    assert main(["show", str(out), "--compare", "llama-2-7b"]) == 2
    err = capsys.readouterr().err
    assert "does not fit the space's fixed fields" in err and "vocab_size" in err


def test_compare_verdict_agrees_with_dominance(small: Path, tmp_path: Path) -> None:
    from dse.sweep import catalogue as K

    out = tmp_path / "res"
    _sweep(small, out, trials=48)
    front = pd.read_csv(out / "front.csv")
    placed = K.place(load_space(small), "llama-3-8b", front)
    assert placed.fits and placed.table is not None and placed.dominated_by is not None
    cols = ["obj.latency_request", "obj.energy_hymell_request"]
    p = placed.table[cols].to_numpy(float)[0]
    f = front[cols].to_numpy(float)
    dominated = bool(((f <= p).all(axis=1) & (f < p).any(axis=1)).any())
    assert (placed.dominated_by[0] >= 0) == dominated


# ---------------------------------------------------------------------- the report
@pytest.mark.slow
def test_report_size_grows_slowly_with_trials(small: Path, tmp_path: Path) -> None:
    """Ten times the trials, and the page's data (everything but plotly.js, which is in it
    once) grows by well under ten times: repeats are drawn once, clouds are capped."""
    lib = len(plotly.offline.get_plotlyjs())
    sizes = []
    for n in (40, 400):
        out = tmp_path / f"r{n}"
        _sweep(small, out, trials=n)
        page = write_report(out)
        text = page.read_text()
        assert text.count(plotly.offline.get_plotlyjs()[:200]) == 1  # plotly.js once
        sizes.append(len(text.encode()) - lib)
    assert sizes[1] / sizes[0] < 3.0, sizes


@pytest.mark.slow
def test_report_front_has_one_point_per_configuration(small: Path, tmp_path: Path) -> None:
    from dse.report import _info as I

    out = tmp_path / "res"
    _sweep(small, out, trials=160)
    res = load_results(out)
    info = I.pareto_info(res)
    t = res.trials
    numbers = np.concatenate([info.front.numbers, info.dominated.numbers])
    keys = _keys(t.set_index("number").loc[numbers].reset_index())
    assert len(keys) == len(set(keys))
    assert info.front.trials is not None and info.front.trials.sum() >= len(info.front.numbers)
    fields = [c for c in C.CONFIG_FIELDS if c in res.front]
    assert len(res.front[fields].astype(str).drop_duplicates()) == len(res.front)


@pytest.mark.slow
def test_sweep_prints_what_the_front_trades(small: Path, tmp_path: Path, capsys) -> None:
    """`dse sweep` ends with the front's best configuration in each objective and its knee,
    each with every objective and every searched column, read from the written front."""
    out = tmp_path / "trade"
    assert main(["sweep", str(small), "--out", str(out), "--no-report"]) == 0
    err = capsys.readouterr().err
    front = pd.read_csv(out / "front.csv")
    s = json.loads((out / "summary.json").read_text())
    names = [o["name"] for o in s["objectives"]]
    assert f"the front trades ({len(front)} configurations):" in err
    lines = [ln.strip() for ln in err.splitlines() if ln.startswith("  best ")]
    assert [ln.split()[1] for ln in lines] == names
    for name, line in zip(names, lines, strict=True):
        best = front.loc[front[f"obj.{name}"].idxmin()]
        for p in PARAMS:
            if p in front and front[p].nunique() > 1:
                assert f"{p}={best[p]}" in line, (name, p, line)


def test_training_token_budgets_are_distinct_configurations() -> None:
    """Issue 34: one architecture at two training-token budgets is two configurations (its loss
    and training energy differ), so neither the front nor the distinct count merges them."""
    from dse.sweep.fronts import config_ids

    table = pd.DataFrame(
        {
            "d_model": [4096, 4096, 4096],
            "n_layers": [32, 32, 32],
            "training_tokens": [10**12, 2 * 10**12, 10**12],
            "lifetime_tokens": [10**12, 10**12, 10**12],
        }
    )
    ids = config_ids(table)
    assert ids[0] != ids[1] and ids[0] == ids[2]

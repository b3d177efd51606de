"""The report: pure info builders checked against the trials table, the page, the command."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.offline
import pytest
from sweep_results import no_feasible_sweep, run_sweep

from dse.cli import main
from dse.pareto import knee_index
from dse.report import ResultsError, fmt_quantity, load_results, unit_scale, write_report
from dse.report import _header_info as IH
from dse.report import _info as I
from dse.report import _page as P
from dse.report import _render as R
from dse.report import _study_info as IS
from dse.spec import columns as C


# ---------------------------------------------------------------------- results folders
@pytest.fixture(scope="module")
def gpu_batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 random trials of a space over three GPUs and four batch sizes: invalid, infeasible
    and feasible trials, TPOT latency and per-output-token energy (ms and J)."""
    return run_sweep(
        "tests/data/spaces/gpu_batch.yaml",
        tmp_path_factory.mktemp("gpu_batch"),
        *("--sampler", "random", "--trials", "200", "--seed", "1"),
    )


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three objectives (latency, energy, total parameters), NSGA-II, and the exact front of the
    240-configuration space beside it (--reference exact)."""
    return run_sweep(
        "tests/data/spaces/moe.yaml",
        tmp_path_factory.mktemp("moe"),
        *("--sampler", "nsga2", "--trials", "64", "--seed", "0", "--reference", "exact"),
    )


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An exhaustive run: exact_front.csv and an exact hypervolume."""
    return run_sweep("search_spaces/heads_study.yaml", tmp_path_factory.mktemp("heads"))


@pytest.fixture(scope="module")
def main_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's main job: `dse sweep search_spaces/gpu_batch.yaml` (sampler auto -> exact,
    360 configurations; loss, TPOT and energy per output token)."""
    return run_sweep(
        "search_spaces/gpu_batch.yaml", tmp_path_factory.mktemp("main_job"), "--no-report"
    )


@pytest.fixture(scope="module")
def infeasible(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No feasible trial among the 30 a random sampler drew."""
    d = no_feasible_sweep(tmp_path_factory.mktemp("infeasible"))
    assert not load_results(d).trials["feasible"].any()
    return d


def _objectives(t: pd.DataFrame, names: list[str]) -> np.ndarray:
    return t[[f"obj.{n}" for n in names]].to_numpy(float)


# ---------------------------------------------------------------------- loading
@pytest.mark.slow
def test_load_results_reads_the_folder(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    assert [o.name for o in res.objectives] == ["latency_tpot", "energy_hymell_per_output_token"]
    assert [o.unit for o in res.objectives] == ["s", "J"]
    assert len(res.trials) == 200
    assert res.front["on_front"].all() and res.front["feasible"].all()
    # The searched fields come from the space in summary.json, not from what happens to vary.
    assert set(res.searched) == {
        "gpu",
        "batch_size",
        "d_model",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "d_ff",
        "vocab_size",
    }
    assert "head_dim" in res.varying and "head_dim" not in res.searched
    assert res.fixed["prompt_tokens"] == 512


def test_csv_only_folder_reads_like_parquet(gpu_batch: Path, tmp_path: Path) -> None:
    d = tmp_path / "csv"
    shutil.copytree(gpu_batch, d)
    (d / "trials.parquet").unlink()
    a, b = load_results(gpu_batch), load_results(d)
    assert a.front["number"].tolist() == b.front["number"].tolist()
    assert a.trials["feasible"].tolist() == b.trials["feasible"].tolist()


# ---------------------------------------------------------------------- the Pareto figure
def test_pareto_info_partitions_the_trials(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    t = res.trials
    info = I.pareto_info(res)
    F = _objectives(t, ["latency_tpot", "energy_hymell_per_output_token"])
    finite = np.isfinite(F).all(axis=1)
    # One point per distinct configuration (its first trial): repeats are not drawn again.
    first = ~t[[c for c in C.CONFIG_FIELDS if c in t]].astype(str).duplicated().to_numpy()
    assert set(info.front.numbers) == set(t.loc[t["on_front"], "number"])
    assert set(info.dominated.numbers) == set(
        t.loc[t["feasible"] & ~t["on_front"] & first, "number"]
    )
    assert set(info.infeasible.numbers) == set(t.loc[~t["feasible"] & finite & first, "number"])
    assert info.n_invalid == int((~finite).sum()) > 0  # gpu_batch has impossible head counts
    assert len(info.infeasible.numbers) > 0
    # The front is sorted by latency, and no feasible trial beats a front point on both axes.
    assert np.all(np.diff(info.front.x) >= 0)
    fx, fy = info.front.x, info.front.y
    for x, y in zip(info.dominated.x, info.dominated.y, strict=True):
        assert np.any((fx <= x) & (fy <= y))
    for x, y in zip(fx, fy, strict=True):
        assert not np.any(
            (info.dominated.x <= x)
            & (info.dominated.y <= y)
            & ((info.dominated.x < x) | (info.dominated.y < y))
        )


def test_knee_and_best_marks(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    info = I.pareto_info(res)
    marks = {m.label: m for m in info.marks}
    feas = res.feasible
    lat, en = "obj.latency_tpot", "obj.energy_hymell_per_output_token"
    assert marks["best Time per output token"].x == feas[lat].min()
    assert marks["best Energy per output token (HYMELL)"].y == feas[en].min()
    F = np.column_stack([info.front.x, info.front.y])
    k = knee_index(F)
    assert marks["knee"].number == info.front.numbers[k]


def test_axes_pick_readable_units(gpu_batch: Path) -> None:
    info = I.pareto_info(load_results(gpu_batch))
    # TPOT is tens of milliseconds; energy per output token is below a joule.
    assert (info.x.unit_label, info.x.factor) == ("ms", 1e3)
    assert info.y.unit_label in ("mJ", "J")
    assert info.x.title == "Time per output token (ms)"


@pytest.mark.parametrize(
    ("values", "unit", "expected"),
    [
        ([2.5, 0.3], "s", (1.0, "s")),
        ([0.0123], "s", (1e3, "ms")),
        ([4e-5], "s", (1e6, "µs")),
        ([0.04], "J", (1e3, "mJ")),
        ([1500.0], "J", (1e-3, "kJ")),
        ([8.0e9, 7.1e9], "parameters", (1e-9, "billion parameters")),
        ([131072.0], "bytes", (1 / 1024, "KiB")),
        ([np.nan, 0.5], "s", (1e3, "ms")),
    ],
)
def test_unit_scale(values: list[float], unit: str, expected: tuple[float, str]) -> None:
    factor, label = unit_scale(values, unit)
    assert label == expected[1]
    assert factor == pytest.approx(expected[0])


def test_fmt_quantity() -> None:
    assert fmt_quantity(0.0123, "s") == "12.3 ms"
    assert fmt_quantity(815.86, "J") == "816 J"
    assert fmt_quantity(8.03e9, "parameters") == "8.03 B"
    assert fmt_quantity(math.nan, "J") == "n/a"


def test_error_bands_bracket_the_front(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    info = I.pareto_info(res)
    assert info.has_bands
    f = info.front
    assert np.all(f.x_lo <= f.x) and np.all(f.x <= f.x_hi)
    assert np.all(f.y_lo <= f.y) and np.all(f.y <= f.y_hi)
    # Energy per output token has no band column of its own: it scales the request band.
    row = res.trials.set_index("number").loc[f.numbers[0]]
    ratio = row["pred.energy_lo_j"] / row["pred.energy_j"]
    assert f.y_lo[0] == pytest.approx(f.y[0] * ratio, rel=1e-12)


def test_hover_shows_parameters_and_breakdown(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    info = I.pareto_info(res)
    row = res.trials.set_index("number").loc[info.front.numbers[0]]
    h = info.front.hover[0]
    assert f"trial {info.front.numbers[0]}" in h
    for p in res.searched:
        assert f"{p}={row[p]}" in h
    assert "prefill:" in h and "decode:" in h and "TTFT" in h
    assert "violates: " in info.infeasible.hover[0]


@pytest.mark.slow
def test_third_objective_as_colour(moe: Path) -> None:
    res = load_results(moe)
    info = I.pareto_info(res)
    assert info.colour is not None and info.study_front is not None
    assert info.colour.objective.name == "total_params"
    assert info.colour.unit_label == "billion parameters"
    # Every feasible configuration once: the study's front, the 2-D front, the rest.
    feas = res.distinct
    drawn = np.concatenate([info.study_front.numbers, info.front.numbers, info.dominated.numbers])
    assert set(drawn) == set(feas["number"])
    assert set(info.study_front.numbers) == set(res.front["number"]) and len(res.front) >= 1
    by_number = feas.set_index("number")["obj.total_params"]
    for ps in (info.study_front, info.front, info.dominated):
        assert ps.colour is not None
        np.testing.assert_array_equal(ps.colour, by_number.loc[ps.numbers].to_numpy(float))


def test_no_colour_with_two_objectives(gpu_batch: Path) -> None:
    info = I.pareto_info(load_results(gpu_batch))
    assert info.colour is None and info.study_front is None and info.dominated.colour is None
    assert info.front_name == f"Pareto front ({len(info.front.numbers)})"
    assert I.objective_pairs(load_results(gpu_batch)) == [(0, 1)]


# ---------------------------------------------------------------------- the README's main job
# `dse sweep search_spaces/gpu_batch.yaml` (issue 32): loss, TPOT and energy per output token,
# 360 configurations evaluated exactly, 8-15B dense models beside the catalogue's Llama-3.2-1B.
@pytest.mark.slow
def test_headline_is_energy_against_latency_coloured_by_loss(main_job: Path) -> None:
    res = load_results(main_job)
    names = [o.name for o in res.objectives]
    assert names == ["loss_chinchilla", "latency_tpot", "energy_hymell_per_output_token"]
    assert I.objective_pairs(res) == [(1, 2), (0, 1), (0, 2)]
    info = I.pareto_info(res)
    assert info.x.objective.name == "latency_tpot"
    assert info.y.objective.name == "energy_hymell_per_output_token"
    assert info.colour is not None and info.colour.objective.name == "loss_chinchilla"
    front = res.front.set_index("number").loc[info.study_front.numbers]
    np.testing.assert_array_equal(info.study_front.x, front["obj.latency_tpot"].to_numpy(float))
    np.testing.assert_array_equal(
        info.study_front.colour, front["obj.loss_chinchilla"].to_numpy(float)
    )
    # The page: the headline first, then the two other pairs, each coloured by the third.
    sections = P.build_sections(res)
    assert [s.anchor for s in sections[:2]] == ["pareto", "pairs"]
    head = sections[0].figures[0][1]
    assert head.layout.xaxis.title.text == "Time per output token (ms)"
    assert head.layout.yaxis.title.text == "Energy per output token (HYMELL) (J)"
    study = next(t for t in head.data if t.meta == "points:study_front")
    np.testing.assert_allclose(study.marker.color, info.study_front.colour)
    assert study.marker.colorbar.title.text == "Loss (Chinchilla) (nats)"
    pairs = [f.layout.title.text for _, f in sections[1].figures]
    assert pairs == [
        "Time per output token against Loss (Chinchilla); colour: Energy per output token (HYMELL)",
        "Energy per output token (HYMELL) against Loss (Chinchilla); colour: Time per output token",
    ]


def test_legend_says_which_front(main_job: Path) -> None:
    res = load_results(main_job)
    n = len(res.front)
    for pair in I.objective_pairs(res):
        info = I.pareto_info(res, pair)
        n2 = len(info.front.numbers)
        assert 0 < n2 < n
        assert set(info.front.numbers) <= set(res.front["number"])
        assert (
            info.front_name == f"2-D front of this pair ({n2} of the {n} on the 3-objective front)"
        )
        assert info.study_front_name == f"on the 3-objective front ({n})"
        fig = R.pareto_figure(info)
        traces = {t.meta: t for t in fig.data}
        assert traces["points:front"].name == info.front_name
        assert len(traces["points:study_front"].x) == n


def test_far_catalogue_model_does_not_set_the_axis_range(main_job: Path) -> None:
    """Llama-3.2-1B's loss (2.24 nats) is far beyond the study's 2.05-2.09: in the loss figures
    it is an arrow on the right edge with its value, and the x range is the study's."""
    res = load_results(main_job)
    models, _ = I.model_marks(res)
    assert any(m.label.startswith("Llama-3.2-1B") for m in models)
    info = I.pareto_info(res, (0, 1), models)
    loss = res.feasible["obj.loss_chinchilla"]
    lo, hi = info.x_range
    span = loss.max() - loss.min()
    assert lo == pytest.approx(loss.min() - I.RANGE_MARGIN * span)
    assert hi == pytest.approx(loss.max() + I.RANGE_MARGIN * span)
    small = next(m for m in info.models if m.label.startswith("Llama-3.2-1B"))
    assert small.x > hi and (small.off_x, small.off_y) == (1, 0)
    note = next(n for n in info.notes if n.startswith("catalogue models off the axes"))
    assert f"{small.label} (Loss (Chinchilla) {fmt_quantity(small.x, 'nats')}" in note
    fig = R.pareto_figure(info)
    assert list(fig.layout.xaxis.range) == pytest.approx([lo, hi])
    drawn = next((t for t in fig.data if t.meta == "marks:models"), None)
    assert drawn is None or "Llama-3.2-1B" not in drawn.text
    (arrow,) = [a for a in fig.layout.annotations if "Llama-3.2-1B" in a.text]
    assert (arrow.xref, arrow.x, arrow.yref) == ("paper", 1.0, "y")
    assert arrow.text == f"Llama-3.2-1B: loss {fmt_quantity(small.x, 'nats')}"
    # The linear / log buttons keep the study's range.
    lin, log = (b.args[0] for b in fig.layout.updatemenus[0].buttons)
    assert lin["xaxis.range"] == pytest.approx([lo, hi])
    assert log["xaxis.range"] == pytest.approx([np.log10(lo), np.log10(hi)])


def test_log_axis_with_a_narrow_span_keeps_readable_ticks(main_job: Path) -> None:
    """Energy spans decades, so energy against loss starts on log axes; the loss (2.05 to 2.09
    nats) has no 1-2-5 value to label, so its axis keeps plotly's own ticks."""
    info = I.pareto_info(load_results(main_job), (0, 2))
    assert info.log_axes
    fig = R.pareto_figure(info)
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.dtick is None
    assert fig.layout.yaxis.dtick == "D2"


def test_axis_range_hand_example() -> None:
    # Points 1..2 (span 1): a model at 2.1 is within MODEL_REACH (0.25) and widens the range
    # to 1..2.1 (span 1.1, margin 0.055); one at 10 does not.
    lo, hi = I.axis_range(np.array([1.0, 1.5, 2.0]), [2.1, 10.0])
    assert (lo, hi) == pytest.approx((1.0 - 0.055, 2.1 + 0.055))
    # Log axes: the margin is a fraction of the decades (1 to 100: two decades, 0.1 each side).
    lo, hi = I.axis_range(np.array([1.0, 100.0]), [1e4], log=True)
    assert (lo, hi) == pytest.approx((10**-0.1, 10**2.1))
    assert I.axis_range(np.array([np.nan])) is None


@pytest.mark.slow
def test_hypervolume_only_for_samplers(main_job: Path, moe: Path) -> None:
    """An exact sweep's trial order is storage order: no hypervolume curve, one line why; a
    sampler's (NSGA-II) curve stays."""
    res = load_results(main_job)
    assert res.summary["sampler"] == "exact" and res.summary["hypervolume_history"]
    assert IS.hypervolume_info(res) is None and IS.exact_front_info(res) is None
    sections = {s.anchor: s for s in P.build_sections(res)}
    assert sections["hypervolume"].figures == []
    assert sections["hypervolume"].missing.startswith("sampler exact evaluates every configuration")
    assert sections["exact"].figures == [] and "is the exact front" in sections["exact"].missing
    sampled = {s.anchor: s for s in P.build_sections(load_results(moe))}
    assert [d for d, _ in sampled["hypervolume"].figures] == ["hypervolume"]
    assert [d for d, _ in sampled["exact"].figures] == ["exact-front"]


def test_marks_name_each_objective(main_job: Path) -> None:
    """'best loss #N', not 'best params #N' (the label came from string prefixes)."""
    res = load_results(main_job)
    info = I.pareto_info(res, (0, 1))
    shorts = {m.label: m.short for m in info.marks}
    assert shorts == {
        "knee": "knee",
        "best Loss (Chinchilla)": "best loss",
        "best Time per output token": "best TPOT",
    }
    for fig in (R.pareto_figure(info), P.image_figure(res)):
        texts = [t.text[0] for t in fig.data if str(t.meta).startswith("marks:") and t.text]
        assert texts and not any("params" in t for t in texts), texts
    assert any(
        t.startswith("best energy #")
        for t in (
            tr.text[0] for tr in P.image_figure(res).data if str(tr.meta).startswith("marks:")
        )
    )


def test_objective_table_names_every_spec_objective() -> None:
    """Every objective a space can declare has its kind, a short name and a title."""
    from dse.report._results import objective_table
    from dse.spec import space as S

    table = objective_table()
    declared = [
        S.Objective(kind, m, src)
        for kind, m, src in [
            *(("latency", m, None) for m in S.LATENCY_METRICS),
            *(("energy", m, s) for m in S.ENERGY_METRICS for s in S.ENERGY_SOURCES),
            *(("size", m, None) for m in S.SIZE_METRICS),
            *(("loss", "loss", law) for law in S.LOSS_LAWS),
            *(("throughput", m, None) for m in S.THROUGHPUT_METRICS),
            *(("user_speed", m, None) for m in S.USER_SPEED_METRICS),
            ("training_energy", "total", None),
            ("lifetime_energy", "total", None),
        ]
    ]
    assert {o.kind for o in declared} == set(S.OBJECTIVE_KINDS)
    assert set(table) == {o.name for o in declared}
    for o in declared:
        assert table[o.name].kind == o.kind
    short = {n: e.short for n, e in table.items()}
    assert short["loss_chinchilla"] == "loss" and short["throughput_per_gpu"] == "throughput"
    assert short["total_params"] == "model size" and short["kv_bytes_per_token"] == "KV bytes"
    assert short["latency_tpot"] == "TPOT" and short["energy_tokens2wh_request"] == "energy"
    assert "params" not in {short[n] for n in short if n != "active_params"}


def test_front_staircase_with_a_maximised_objective(tmp_path: Path) -> None:
    """Throughput (maximised) against loss: each corner of the front's staircase is a point
    both neighbouring front points dominate, so it goes up first, then across ('vh')."""
    space = tmp_path / "tput.yaml"
    space.write_text(
        "name: tput\nhardware: h100_sxm\n"
        "workload: {batch_size: {values: [1, 8, 64]}, prompt_tokens: 512, output_tokens: 128}\n"
        "space:\n  d_model: {values: [2048, 4096]}\n  n_layers: {values: [16, 32]}\n"
        "  n_heads: 32\n  d_ff: 11008\n  training_tokens: 3.0e+11\n"
        "objectives:\n  throughput: {}\n  loss: {source: chinchilla}\n"
    )
    res = load_results(run_sweep(space, tmp_path / "r", "--no-report"))
    info = I.pareto_info(res)
    assert info.directions == ("maximize", "minimize") and len(info.front.x) >= 2
    trace = next(t for t in R.pareto_figure(info).data if t.meta == "points:front")
    assert trace.line.shape == "vh"
    x, y = info.front.x, info.front.y  # sorted by throughput: the loss rises with it
    for a in range(len(x) - 1):
        corner = (x[a], y[a + 1])  # where 'vh' turns
        assert corner[0] <= min(x[a], x[a + 1]) and corner[1] >= max(y[a], y[a + 1])
    # Loss (minimised) on x: horizontal first, as for two minimised objectives.
    flipped = R.pareto_figure(I.pareto_info(res, (1, 0)))
    assert next(t for t in flipped.data if t.meta == "points:front").line.shape == "hv"


def test_image_figure_has_no_buttons(main_job: Path) -> None:
    res = load_results(main_job)
    assert P.build_sections(res)[0].figures[0][1].layout.updatemenus  # the page has them
    assert not P.image_figure(res).layout.updatemenus


@pytest.mark.slow
def test_report_prints_a_line_per_stage(main_job: Path, tmp_path: Path, capsys) -> None:
    assert main(["report", str(main_job), "--out", str(tmp_path / "a.html")]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("report ")]
    assert [ln.split(":")[0] for ln in lines] == [
        f"report {i}/{P.N_STAGES}" for i in range(1, P.N_STAGES + 1)
    ]
    assert "catalogue models" in lines[0] and "parameter importance" in err
    assert main(["report", str(main_job), "--out", str(tmp_path / "b.html"), "-q"]) == 0
    assert "report 1/" not in capsys.readouterr().err


# ---------------------------------------------------------------------- other figures
def test_parallel_info(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    info = IS.parallel_info(res)
    assert [d.label for d in info.dimensions] == res.searched
    assert info.n_rows == len(res.distinct) < len(res.feasible)  # one line per configuration
    gpu = next(d for d in info.dimensions if d.label == "gpu")
    assert gpu.ticktext == sorted(res.feasible["gpu"].unique())
    n_layers = next(d for d in info.dimensions if d.label == "n_layers")
    assert np.array_equal(n_layers.values, res.distinct["n_layers"].to_numpy(float))
    assert [a.objective.name for a, _ in info.colours] == [o.name for o in res.objectives]


def test_importance_uses_ped_anova(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    info = IS.importance_info(res)
    assert info.method == "PED-ANOVA (Optuna)"
    assert set(info.importances) == {o.label for o in res.objectives}
    for imp in info.importances.values():
        assert set(imp) == set(res.searched)
        assert sum(imp.values()) == pytest.approx(1.0)
        assert all(v >= 0 for v in imp.values())


def test_correlation_ratio_hand_example() -> None:
    # y depends on a only: a explains all of its variance, b none.
    rows = pd.DataFrame({"a": [1, 1, 2, 2], "b": [1, 2, 1, 2], "y": [1.0, 1.0, 3.0, 3.0]})
    imp = IS.correlation_ratio(rows, ["a", "b"], "y")
    assert imp == {"a": 1.0, "b": 0.0}


@pytest.mark.slow
def test_importance_falls_back_with_few_trials(gpu_batch: Path, tmp_path: Path) -> None:
    d = run_sweep(
        "tests/data/spaces/gpu_batch.yaml",
        tmp_path / "few",
        *("--sampler", "random", "--trials", "12", "--seed", "0"),
    )
    res = load_results(d)
    assert 2 <= len(res.feasible) < IS.MIN_IMPORTANCE_TRIALS
    info = IS.importance_info(res)
    assert info.method.startswith("correlation ratio")
    assert info.notes


def test_hypervolume_and_exact_front(moe: Path, heads: Path) -> None:
    res = load_results(moe)  # NSGA-II with --reference exact
    hv = IS.hypervolume_info(res)
    assert hv is not None
    assert hv.n_trials[-1] == len(res.trials)
    assert hv.exact == res.summary["exact_hypervolume"]
    ex = IS.exact_front_info(res)
    assert ex is not None
    assert ex.n_found <= len(res.exact_front) == len(ex.exact_x) >= 1
    # An exhaustive sweep's front is the exact front, its trial order the enumeration's.
    assert IS.hypervolume_info(load_results(heads)) is None
    assert IS.exact_front_info(load_results(heads)) is None


def test_energy_breakdown_sums_to_the_total(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    info = IS.breakdown_info(res)
    assert info is not None and info.t2wh
    assert {c for c, _ in info.t2wh} >= {"compute", "kv_write", "attn_read", "static"}
    parts = sum(info.t2wh.values())
    np.testing.assert_allclose(parts, info.t2wh_total, rtol=1e-9)
    front = res.front.set_index("number").loc[info.numbers]
    np.testing.assert_array_equal(info.hymell_total, front["pred.energy_j"].to_numpy(float))


def test_header_says_how_to_reproduce(gpu_batch: Path) -> None:
    res = load_results(gpu_batch)
    h = IH.header_info(res)
    rows = dict(h.rows)
    assert rows["sampler"] == "random · seed 1"
    assert "h100_sxm" in rows["GPU"] and "a100_sxm" in rows["GPU"]
    assert "batch_size∈{" in rows["workload"] and "prompt_tokens=512" in rows["workload"]
    for gpu, artifact in res.summary["artifacts"].items():
        assert f"{gpu}: {artifact}" in rows["artifacts"]
    assert f"{len(res.feasible):,} feasible" in rows["trials"]
    assert "tests/data/spaces/gpu_batch.yaml" in h.reproduce and "--seed 1" in h.reproduce


# ---------------------------------------------------------------------- the page
def test_report_is_one_self_contained_file(gpu_batch: Path, tmp_path: Path) -> None:
    out = write_report(gpu_batch, tmp_path / "r.html")
    text = out.read_text()
    lib = plotly.offline.get_plotlyjs()
    assert lib in text  # the library itself, inline
    page = text.replace(lib, "")
    assert "<script src" not in page and "http://" not in page and "https://" not in page
    assert text.count("Plotly.newPlot(") >= 5
    # plotly finds each figure by its id: every id of the page must be unique.
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for div in ("pareto", "parallel-0", "importance", "hypervolume", "breakdown-0"):
        assert f'id="{div}"' in text
    assert write_report(gpu_batch) == gpu_batch / "report.html"


def test_no_feasible_trial_report(infeasible: Path) -> None:
    res = load_results(infeasible)
    info = I.pareto_info(res)
    assert len(info.front.numbers) == 0 and len(info.infeasible.numbers) > 0
    assert info.marks == []
    text = write_report(infeasible).read_text()
    assert "No feasible trial" in text


def test_command_writes_the_report(gpu_batch: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "cli.html"
    assert main(["report", str(gpu_batch), "--out", str(out)]) == 0
    assert out.is_file()
    assert "wrote" in capsys.readouterr().out


@pytest.mark.slow
def test_report_reads_the_catalogue_the_sweep_placed(
    main_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dse sweep` places the catalogue models against the front and saves them (catalogue.csv,
    the artifact ids in summary.json): a report built after the artifacts are swapped (an
    empty DSE_SURROGATES: a prediction now takes the roofline) shows the very same marks."""
    d = tmp_path / "res"
    shutil.copytree(main_job, d)
    s = json.loads((d / "summary.json").read_text())
    cat = s["catalogue"]
    assert cat["file"] == "catalogue.csv" and (d / "catalogue.csv").is_file()
    assert "Llama-3.2-1B" in cat["models"] and cat["artifacts"]
    assert all(s["artifacts"][gpu] == a for gpu, a in cat["artifacts"].items())
    before, note = I.model_marks(load_results(d))
    assert before and note == ""
    empty = tmp_path / "no_artifacts"
    empty.mkdir()
    monkeypatch.setenv("DSE_SURROGATES", str(empty))
    res = load_results(d)
    # The control: placed now, without the artifacts, the marks move (TPOT by more than 10%).
    now, now_note = I.model_marks(dataclasses.replace(res, catalogue=None))
    assert [m.label for m in now] == [m.label for m in before]
    assert now_note == I.CURRENT_ARTIFACTS_NOTE
    assert all(abs(n.values[1] / b.values[1] - 1) > 0.1 for n, b in zip(now, before, strict=True))
    after, note = I.model_marks(res)
    assert after == before and note == ""
    page = write_report(d, tmp_path / "r.html")
    assert "Llama-3.2-1B" in page.read_text()


def test_an_old_folder_places_the_catalogue_now_and_says_so(main_job: Path, tmp_path: Path):
    """A folder written before `dse sweep` saved its placements (no catalogue.csv, no
    summary.json `catalogue`) still reports: the models are placed now, with today's
    artifacts (the same marks while they are unchanged), and a note says so."""
    d = tmp_path / "res"
    shutil.copytree(main_job, d)
    recorded, _ = I.model_marks(load_results(d))
    s = json.loads((d / "summary.json").read_text())
    del s["catalogue"]
    (d / "summary.json").write_text(json.dumps(s))
    (d / "catalogue.csv").unlink()
    marks, note = I.model_marks(load_results(d))
    assert note == I.CURRENT_ARTIFACTS_NOTE
    assert [(m.label, m.dominated_by) for m in marks] == [
        (m.label, m.dominated_by) for m in recorded
    ]
    for m, r in zip(marks, recorded, strict=True):
        assert m.values == pytest.approx(r.values, rel=1e-9)
    assert I.CURRENT_ARTIFACTS_NOTE in write_report(d, tmp_path / "r.html").read_text()
    s["catalogue"] = {"file": "catalogue.csv", "models": ["Llama-3-8B"], "artifacts": {}}
    (d / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ResultsError, match=r"catalogue\.csv: missing"):
        load_results(d)


def test_command_on_no_feasible_trial_warns(infeasible: Path, tmp_path: Path, capsys) -> None:
    assert main(["report", str(infeasible), "--out", str(tmp_path / "x.html")]) == 0
    assert "no feasible trial" in capsys.readouterr().err


# ---------------------------------------------------------------------- bad input
def _older(d: Path) -> None:
    s = json.loads((d / "summary.json").read_text())
    del s["format_version"]
    (d / "summary.json").write_text(json.dumps(s))


def _no_columns(d: Path) -> None:
    t = pd.read_parquet(d / "trials.parquet").drop(columns=["on_front"])
    t.to_parquet(d / "trials.parquet")


def _no_rows(d: Path) -> None:
    pd.read_parquet(d / "trials.parquet").head(0).to_parquet(d / "trials.parquet")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: shutil.rmtree(d), "does not exist"),
        (lambda d: [p.unlink() for p in d.iterdir()], "not a results folder"),
        (lambda d: (d / "summary.json").unlink(), "summary.json is missing"),
        (_older, "older dse"),
        (lambda d: (d / "summary.json").write_text("{not json"), "got unreadable text"),
        (_no_columns, "missing column(s) on_front"),
        (_no_rows, "holds no trials"),
        (lambda d: (d / "trials.parquet").write_bytes(b"garbage"), "cannot be read"),
    ],
)
def test_bad_folder_gets_one_clear_message(
    gpu_batch: Path, tmp_path: Path, capsys, damage, message: str
) -> None:
    d = tmp_path / "res"
    shutil.copytree(gpu_batch, d)
    (d / "trials.csv").unlink()
    damage(d)
    with pytest.raises(ResultsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_results(d)
    assert main(["report", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse report: error: ") and message in err
    assert "Traceback" not in err


def test_newer_format_asks_for_an_upgrade(gpu_batch: Path, tmp_path: Path) -> None:
    d = tmp_path / "res"
    shutil.copytree(gpu_batch, d)
    s = json.loads((d / "summary.json").read_text())
    s["format_version"] = 99
    (d / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ResultsError, match="newer dse"):
        load_results(d)


# ---------------------------------------------------------------------- static image
def test_image_with_an_unknown_extension_fails_clearly(gpu_batch: Path, tmp_path: Path, capsys):
    out = tmp_path / "r.html"
    assert (
        main(["report", str(gpu_batch), "--out", str(out), "--image", str(tmp_path / "f.bmp")]) == 3
    )
    err = capsys.readouterr().err
    assert "image format must be one of png, svg, pdf" in err
    assert out.is_file()  # the HTML report is written all the same


@pytest.mark.slow
def test_image_svg(gpu_batch: Path, tmp_path: Path) -> None:
    pytest.importorskip("kaleido", reason="kaleido (static image export) is not installed")
    if not (shutil.which("chromium") or shutil.which("google-chrome")):
        pytest.skip("no Chrome or Chromium for kaleido")
    from dse.report import write_image

    out = write_image(gpu_batch, tmp_path / "front.svg")
    svg = out.read_text()
    assert svg.lstrip().startswith("<svg") and "Time per output token (ms)" in svg
    assert ">linear<" not in svg and ">log<" not in svg  # no buttons in a static image


@pytest.mark.slow
def test_image_without_a_browser_says_so(
    gpu_batch: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("kaleido", reason="kaleido (static image export) is not installed")
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))
    out = tmp_path / "r.html"
    rc = main(["report", str(gpu_batch), "--out", str(out), "--image", str(tmp_path / "f.png")])
    err = capsys.readouterr().err
    assert rc == 3
    assert "cannot write a static image" in err and "Chrome or Chromium" in err
    assert "Traceback" not in err
    assert out.is_file() and not (tmp_path / "f.png").exists()


def test_log_axes_when_the_trials_span_decades(gpu_batch: Path, heads: Path) -> None:
    info = I.pareto_info(load_results(gpu_batch))
    y = np.concatenate([info.front.y, info.dominated.y, info.infeasible.y])
    # Energy per output token spans batch sizes 1 to 64: far more than a factor 20.
    assert y.max() / y.min() > I.LOG_AXES_SPAN
    assert info.log_axes
    assert not I.pareto_info(load_results(heads)).log_axes


def test_header_and_hovers_say_when_the_loss_law_extrapolates(tmp_path: Path) -> None:
    """Front points outside the scaling law's fitted range are named in the header (with the
    inputs that left it) and in their hover; inside points are not."""
    space = tmp_path / "law.yaml"
    space.write_text(
        "name: law\nhardware: h100_sxm\n"
        "workload: {batch_size: 8, prompt_tokens: 512, output_tokens: 128}\n"
        "space:\n  d_model: {values: [2048, 4096, 8192]}\n  n_layers: {values: [16, 48]}\n"
        "  n_heads: 32\n  d_ff: 11008\n  training_tokens: 3.0e+11\n"
        "objectives:\n  loss: {source: chinchilla}\n  latency: {metric: request}\n"
    )
    out = tmp_path / "r"
    assert main(["sweep", str(space), "--out", str(out), "-q", "--no-report"]) == 0
    res = load_results(out)
    flagged = res.front["loss_out_of_range"].astype(bool)
    assert flagged.any() and not flagged.all()  # 16B+ models leave Chinchilla's 16B range
    warn = " ".join(IH.header_info(res).warnings)
    assert f"{int(flagged.sum())} of {len(res.front)} front configurations lie outside" in warn
    assert "params ×" in warn
    hovers = I.hover_texts(res.front, res, "front")
    for text, out_of_range in zip(hovers, flagged, strict=True):
        assert ("outside the scaling law's fitted range: params" in text) == out_of_range
        assert "loss law: chinchilla" in text  # which law priced the point (issue 34)

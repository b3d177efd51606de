"""Objectives and constraints in the engine's language: quality (a scaling law's loss), serving
limits (TTFT / TPOT / latency / energy per token) and throughput, each with its direction, on
real sweeps (journal storages, the real predictor) against brute force over the same space."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from dse import pareto
from dse.cli import main
from dse.errors import ConfigError
from dse.spec.space import count_feasible, load_space
from dse.sweep import SweepOptions, evaluate, run_sweep

# 2 GPUs x 3 batches x 2 widths x 2 depths x 2 KV-head counts = 48 configurations, all valid:
# TPOT grows with batch and model size, so a TPOT limit cuts through the space.
BASE = """\
name: metrics
hardware: {values: [h100_sxm, h200_sxm]}
workload: {batch_size: {values: [1, 8, 32]}, prompt_tokens: 512, output_tokens: 128}
space:
  d_model: {values: [2048, 4096]}
  n_layers: {values: [16, 32]}
  n_heads: 32
  n_kv_heads: {values: [8, 32]}
  d_ff: 8192
"""
TOKENS = "  training_tokens: 2.0e+11\n"  # appended to `space:` (line 10)


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def quality_module() -> object | None:
    try:
        from dse.estimators import quality
    except ImportError:
        return None
    return quality


needs_quality = pytest.mark.skipif(
    quality_module() is None, reason="dse.estimators.quality is not there yet"
)


# ------------------------------------------------------------------ parsing
def test_default_objectives_are_request_latency_and_energy(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, BASE))
    assert space.objectives.names == ("latency_request", "energy_hymell_request")
    assert space.objectives.directions == ("minimize", "minimize")


def test_every_objective_kind_has_its_column_name_and_direction(tmp_path: Path) -> None:
    text = (
        BASE
        + TOKENS
        + """\
objectives:
  loss: {source: besiroglu}
  latency: {metric: ttft}
  energy: {source: tokens2wh, metric: per_output_token, preset: paper}
  throughput: {metric: per_gpu}
  user_speed:
  size: {metric: memory_bytes, direction: maximize}
"""
    )
    o = load_space(write(tmp_path, text)).objectives
    assert o.names == (
        "loss_besiroglu",
        "latency_ttft",
        "energy_tokens2wh_per_output_token",
        "throughput_per_gpu",
        "user_tokens_per_s",
        "memory_bytes",
    )
    assert o.directions == ("minimize", "minimize", "minimize", "maximize", "maximize", "maximize")
    assert o.energy_source == "tokens2wh" and o.energy_preset == "paper"
    assert o.loss_law == "besiroglu"


def test_existing_forms_keep_their_names(tmp_path: Path) -> None:
    text = BASE + (
        "objectives:\n  latency: {metric: tpot}\n  energy: {source: hymell, metric: "
        "per_output_token}\n  size: {metric: total_params}\n"
    )
    o = load_space(write(tmp_path, text)).objectives
    assert o.names == ("latency_tpot", "energy_hymell_per_output_token", "total_params")
    assert o.directions == ("minimize",) * 3


def test_predicted_constraints_are_kept_apart_from_static_ones(tmp_path: Path) -> None:
    text = (
        BASE
        + TOKENS
        + """\
constraints:
  active_params: {max: 9.0e+9}
  fits_memory: true
  ttft: {max: 0.5}
  tpot: {max: 0.05}
  latency: {max: 20}
  energy_per_output_token: {max: 2.0}
  throughput: {min: 10}
  loss: {max: 3.0, source: chinchilla}
"""
    )
    space = load_space(write(tmp_path, text))
    assert list(space.static_constraints) == ["active_params", "fits_memory"]
    assert list(space.predicted_constraints) == [
        "ttft",
        "tpot",
        "latency",
        "energy_per_output_token",
        "throughput",
        "loss",
    ]
    assert space.constraints["tpot"] == {"min": None, "max": 0.05}
    assert space.constraints["loss"] == {"min": None, "max": 3.0, "source": "chinchilla"}
    assert space.loss_laws == ("chinchilla",)
    # `dse check` counts the static constraints only: a TPOT limit needs predictions.
    count = count_feasible(space)
    assert count.feasible == count.valid == space.size()


def test_a_loss_constraint_takes_the_loss_objectives_law(tmp_path: Path) -> None:
    text = (
        BASE
        + TOKENS
        + "constraints: {loss: {max: 3.0}}\n"
        + "objectives:\n  loss: {source: chinchilla}\n  energy: {}\n"
    )
    space = load_space(write(tmp_path, text))
    assert space.constraints["loss"]["source"] == "chinchilla"
    assert space.loss_laws == ("chinchilla",)


def test_check_says_predicted_limits_are_checked_during_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE + "constraints: {tpot: {max: 0.05}, ttft: {max: 1.0}}\n"
    text += "objectives:\n  throughput: {}\n  latency: {metric: tpot}\n"
    assert main(["check", str(write(tmp_path, text))]) == 0
    out = capsys.readouterr().out
    assert "feasible:            48 (satisfy every static constraint)" in out
    assert "predicted limits:    tpot, ttft (checked per configuration during the sweep)" in out
    assert "objectives:          throughput_per_gpu (max), latency_tpot (min)" in out


def test_training_tokens_travel_in_the_configuration_columns(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, BASE + "  training_tokens: {values: [1.0e+11, 4.0e+11]}\n"))
    assert space.size() == 96
    assert "training_tokens" in [p.name for p in space.searched]
    cols = space.enumerate()
    assert cols["training_tokens"].dtype == np.int64
    assert sorted(set(cols["training_tokens"].tolist())) == [100_000_000_000, 400_000_000_000]
    some = space.columns_from([{**e} for e in space.examples(5)])
    assert "training_tokens" in some and len(some["training_tokens"]) == 5
    fixed = load_space(write(tmp_path, BASE + "  training_tokens: 1.5e13\n", "f.yaml"))
    assert fixed.fixed["training_tokens"] == 15_000_000_000_000
    assert (fixed.enumerate()["training_tokens"] == 15_000_000_000_000).all()


OBJ = "objectives:\n  latency: {}\n  energy: {}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            BASE + "objectives:\n  latncy: {metric: ttft}\n  energy: {}\n",
            ":11: objectives.latncy: unknown key (did you mean 'latency'?); valid keys: latency, "
            "energy, size, loss, throughput, user_speed",
        ),
        (
            BASE + "objectives:\n  loss: {source: chinchila}\n  energy: {}\n",
            ":11: objectives.loss.source: must be one of chinchilla, besiroglu, joint_moe, "
            "krajewski2024, gqa_chen2025, besiroglu_heads, shen2024, auto (did you mean 'chinchilla'?), "
            "got 'chinchila'",
        ),
        (
            BASE + "objectives:\n  loss: {}\n  energy: {}\n",
            ":11: objectives.loss.source: is required (one of chinchilla, besiroglu, "
            "joint_moe, krajewski2024, gqa_chen2025, besiroglu_heads, shen2024, auto), got none",
        ),
        (
            BASE + "objectives:\n  loss: {source: chinchilla}\n  energy: {}\n",
            ":11: objectives.loss: needs space.training_tokens (the training token budget), "
            "got none",
        ),
        (
            BASE + "constraints: {loss: {max: 2.1, source: joint_moe}}\n",
            ":10: constraints.loss: needs space.training_tokens (the training token budget), "
            "got none",
        ),
        (
            BASE + TOKENS + "constraints: {loss: {max: 2.1}}\n",
            ":11: constraints.loss.source: is required when no loss objective names the law "
            "(chinchilla, besiroglu, joint_moe, krajewski2024, gqa_chen2025, besiroglu_heads, "
            "shen2024, auto), got none",
        ),
        (
            BASE + TOKENS + "constraints: {loss: {max: 2.1, source: gpt4}}\n",
            ":11: constraints.loss.source: must be one of chinchilla, besiroglu, joint_moe, "
            "krajewski2024, gqa_chen2025, besiroglu_heads, shen2024, auto, got 'gpt4'",
        ),
        (
            BASE.replace("  d_ff: 8192\n", "  d_ff: 8192\n  n_experts: {values: [1, 8]}\n")
            + TOKENS
            + "objectives:\n  loss: {source: gqa_chen2025}\n  energy: {}\n",
            ":13: objectives.loss.source: gqa_chen2025 prices dense models only and "
            "space.n_experts reaches 8 (use joint_moe, or auto for the most specific law per "
            "row), got 'gqa_chen2025'",
        ),
        (
            BASE.replace("  d_ff: 8192\n", "  d_ff: 8192\n  n_experts: {values: [1, 4]}\n")
            + TOKENS
            + "constraints: {loss: {max: 2.1, source: shen2024}}\n",
            ":12: constraints.loss.source: shen2024 prices dense models only and "
            "space.n_experts reaches 4 (use joint_moe, or auto for the most specific law per "
            "row), got 'shen2024'",
        ),
        (
            BASE + "constraints: {tpott: {max: 0.05}}\n",
            ":10: constraints.tpott: unknown key (did you mean 'tpot'?)",
        ),
        (
            BASE + "constraints:\n  ttft: {max: -0.5}\n",
            ":11: constraints.ttft.max: must be a finite number > 0, got -0.5",
        ),
        (
            BASE + "constraints:\n  throughput: {min: 0}\n",
            ":11: constraints.throughput.min: must be a finite number > 0, got 0",
        ),
        (
            BASE + "constraints:\n  tpot: {min: 0.1, max: 0.05}\n",
            ":11: constraints.tpot: `min <= max` must hold, but got (min=0.1, max=0.05)",
        ),
        (
            BASE + "constraints:\n  tpot: {max: fast}\n",
            ":11: constraints.tpot.max: must be a finite number > 0, got 'fast'",
        ),
        (
            BASE + "constraints:\n  tpot: {}\n",
            ":11: constraints.tpot: needs `min`, `max` or both",
        ),
        (
            BASE + "constraints:\n  tpot: {max: 0.05, source: chinchilla}\n",
            ":11: constraints.tpot.source: unknown key",
        ),
        (
            BASE + "objectives:\n  throughput: {direction: minimize}\n  energy: {}\n",
            ":11: objectives.throughput.direction: must be maximize (more tokens per second "
            "per GPU is better), got 'minimize'",
        ),
        (
            BASE + "objectives:\n  latency: {direction: maximise}\n  energy: {}\n",
            ":11: objectives.latency.direction: must be one of minimize, maximize (did you "
            "mean 'maximize'?), got 'maximise'",
        ),
        (
            BASE + "objectives:\n  throughput: {metric: per_node}\n  energy: {}\n",
            ":11: objectives.throughput.metric: must be one of per_gpu, got 'per_node'",
        ),
        (
            BASE + "objectives:\n  throughput: {}\n",
            ":10: objectives: a front needs at least two objectives (e.g. loss and energy), "
            "got ['throughput_per_gpu']",
        ),
        (
            BASE + "objectives:\n  user_speed: fast\n  energy: {}\n",
            ":11: objectives.user_speed: must be a mapping, got str 'fast'",
        ),
        (
            BASE + "  training_tokens: -1.0e+12\n",
            # (the rule itself is dse.spec.fields' shared limit on the field)
            ":10: space.training_tokens: must be ",
        ),
        (
            BASE + "  training_tokens: many\n",
            ":10: space.training_tokens: must be ",
        ),
        (
            BASE + "  training_token: 1.0e+12\n",
            ":10: space.training_token: unknown key (did you mean 'training_tokens'?)",
        ),
    ],
)
def test_bad_input_gets_one_located_message(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert str(exc.value).startswith(str(path) + ":"), str(exc.value)
    assert expected in str(exc.value), str(exc.value)


# ------------------------------------------------------------------ pareto with directions
def test_a_maximised_column_is_the_negated_minimisation() -> None:
    rng = np.random.default_rng(3)
    p = rng.integers(0, 8, size=(400, 3)).astype(float)
    directions = ("minimize", "maximize", "minimize")
    flipped = p * np.array([1.0, -1.0, 1.0])
    got = pareto.nondominated(p, directions=directions)
    assert np.array_equal(got, pareto.nondominated(flipped))
    # Not the all-minimised answer: the direction matters.
    assert not np.array_equal(got, pareto.nondominated(p))
    # Brute force in the user's values: no other row is at least as good everywhere and better
    # somewhere (higher is better in column 1).
    better = np.array([1.0, -1.0, 1.0])
    for i in np.nonzero(got)[0]:
        q = p * better
        dom = (q <= q[i]).all(axis=1) & (q < q[i]).any(axis=1)
        assert not dom.any()
    feasible = rng.random(400) < 0.7
    idx = pareto.front_indices(p, feasible, directions)
    assert np.array_equal(np.sort(idx), np.sort(pareto.front_indices(flipped, feasible)))
    assert feasible[idx].all()
    # Best first in the first objective (minimised here).
    assert (np.diff(p[idx, 0]) >= 0).all()
    # The front in the user's values: merging keeps them unflipped.
    merged = pareto.merge_front(p[:200], p[200:], directions)
    assert np.array_equal(
        np.unique(merged, axis=0),
        np.unique(p[pareto.nondominated(p, directions=directions)], axis=0),
    )


def test_normalisation_and_hypervolume_follow_the_directions() -> None:
    front = np.array([[1.0, 10.0], [2.0, 30.0], [4.0, 40.0]])  # column 1 is throughput
    directions = ["minimize", "maximize"]
    norm = pareto.normalisation(front, directions)
    assert norm is not None
    assert norm.ideal.tolist() == [1.0, 40.0] and norm.nadir.tolist() == [4.0, 10.0]
    z = norm.apply(front)
    assert np.allclose(z, [[0.0, 1.0], [1 / 3, 1 / 3], [1.0, 0.0]])
    flipped = front * [1.0, -1.0]
    hv = pareto.hypervolume(front, norm)
    assert hv == pytest.approx(pareto.hypervolume(flipped, pareto.normalisation(flipped)))
    assert pareto.knee_index(front, directions) == pareto.knee_index(flipped)
    hist = pareto.hypervolume_history(front, np.ones(3, bool), norm, [1, 2, 3], directions)
    assert hist[-1][1] == pytest.approx(hv)
    # Sorted best first when the first objective is maximised.
    assert pareto.front_indices(front[:, ::-1], None, directions[::-1]).tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="'maximise'"):
        pareto.nondominated(front, directions=["minimize", "maximise"])


# ------------------------------------------------------------------ real sweeps
def _sweep(path: Path, out: Path, sampler: str, trials: int = 48) -> pd.DataFrame:
    outcome = run_sweep(
        SweepOptions(
            space_file=path, out=out, quiet=True, sampler=sampler, trials=trials, batch_size=16
        )
    )
    assert not outcome.interrupted
    return pd.read_parquet(out / "trials.parquet")


@pytest.fixture(scope="module")
def brute() -> dict[str, np.ndarray]:
    """Every configuration of BASE evaluated at once (the reference)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        space = load_space(write(Path(d), BASE))
        cols = space.enumerate()
        ev = evaluate(space, cols)
    return {**cols, **{f"m.{k}": v for k, v in ev.metrics.items()}}


@pytest.mark.parametrize(
    "sampler", ["screened", "tpe", "nsga2", "nsga3", "random", "gp", "exhaustive"]
)
@pytest.mark.slow
def test_a_tpot_limit_is_seen_by_every_sampler_and_no_front_row_breaks_it(
    tmp_path: Path, sampler: str, brute: dict[str, np.ndarray]
) -> None:
    tpot = brute["m.tpot"]
    assert np.isfinite(tpot).all()
    limit = float(np.quantile(tpot, 0.5))  # half the space is too slow
    text = (
        BASE
        + f"constraints:\n  tpot: {{max: {limit!r}}}\n"
        + "objectives:\n  energy: {metric: per_output_token}\n  throughput: {}\n"
    )
    if sampler == "gp":
        pytest.importorskip("torch")
    path = write(tmp_path, text)
    # GP refits per trial (seconds each at a few dozen): a short budget still sees the limit.
    t = _sweep(path, tmp_path / "out", sampler, trials=24 if sampler == "gp" else 48)
    assert (t["state"] == "COMPLETE").all()
    # The stored constraint is the relative form of the predicted TPOT.
    assert np.allclose(t["constraint.tpot_max"], t["pred.tpot_s"] / limit - 1.0)
    slow = t["pred.tpot_s"] > limit
    assert slow.any() and (~slow).any()  # the limit excludes some configurations, not all
    if sampler == "screened":  # it priced the limit before proposing: every fast one first
        assert t.loc[slow, "number"].min() > t.loc[~slow, "number"].max()
    assert not t.loc[slow, "feasible"].any()
    assert t.loc[~slow, "feasible"].all()
    front = t[t["on_front"]]
    assert len(front) and (front["pred.tpot_s"] <= limit).all()
    # What the samplers read: Optuna's own constraints of each stored trial.
    study = optuna.load_study(
        study_name="metrics",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(tmp_path / "out" / "journal.log"))
        ),
    )
    told = {tr.number: tr.constraints["tpot_max"] for tr in study.get_trials()}
    assert np.allclose([told[n] for n in t["number"]], t["constraint.tpot_max"])
    assert optuna.study._constrained_optimization._is_constrained_optimization(study.get_trials())


def test_throughput_is_maximised_front_best_equals_brute_force(
    tmp_path: Path, brute: dict[str, np.ndarray]
) -> None:
    limit = float(np.quantile(brute["m.tpot"], 0.6))
    text = (
        BASE
        + f"constraints:\n  tpot: {{max: {limit!r}}}\n"
        + "objectives:\n  throughput: {metric: per_gpu}\n  latency: {metric: tpot}\n"
    )
    path = write(tmp_path, text)
    t = _sweep(path, tmp_path / "out", "exhaustive")
    ok = brute["m.tpot"] <= limit
    thr = brute["batch_size"] * brute["output_tokens"] / brute["m.latency"]
    assert np.allclose(brute["m.throughput"], thr)  # tensor_parallel is 1 here
    best = thr[ok].max()
    front = t[t["on_front"]]
    assert front["obj.throughput_per_gpu"].max() == pytest.approx(best, rel=1e-6)
    # ... and the fastest TPOT among the feasible is the other end of the front.
    assert front["obj.latency_tpot"].min() == pytest.approx(brute["m.tpot"][ok].min(), rel=1e-6)
    # The front is the brute-force front of (-throughput, tpot) over the feasible set.
    pts = np.column_stack([thr, brute["m.tpot"]])
    expect = pareto.front_indices(pts, ok, ["maximize", "minimize"])
    got = np.column_stack([front["obj.throughput_per_gpu"], front["obj.latency_tpot"]])
    assert len(got) == len(expect) >= 2
    assert np.allclose(np.sort(got[:, 0]), np.sort(pts[expect, 0]), rtol=1e-6)
    # The study itself maximises it.
    study = optuna.load_study(
        study_name="metrics",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(tmp_path / "out" / "journal.log"))
        ),
    )
    assert study.directions == [
        optuna.study.StudyDirection.MAXIMIZE,
        optuna.study.StudyDirection.MINIMIZE,
    ]


def test_user_speed_is_one_over_tpot(brute: dict[str, np.ndarray]) -> None:
    assert np.allclose(brute["m.user_speed"] * brute["m.tpot"], 1.0)


@needs_quality
def test_loss_objective_rows_equal_predict_loss_on_the_same_columns(tmp_path: Path) -> None:
    from dse.estimators.quality import predict_loss

    text = (
        BASE
        + "  training_tokens: {values: [1.0e+11, 1.0e+12]}\n"
        + "constraints: {tpot: {max: 1.0}}\n"
        + "objectives:\n  loss: {source: chinchilla}\n  energy: {metric: per_output_token}\n"
    )
    path = write(tmp_path, text)
    t = _sweep(path, tmp_path / "out", "exhaustive")
    assert len(t) == 96 and (t["state"] == "COMPLETE").all()
    space = load_space(path)
    cols = space.columns_from(
        [{p.name: r[p.name] for p in space.searched} for _, r in t.iterrows()]
    )
    assert np.array_equal(cols["training_tokens"], t["training_tokens"].to_numpy(np.int64))
    want = predict_loss(cols, cols["training_tokens"].astype(float), "chinchilla")
    assert np.allclose(t["obj.loss_chinchilla"], want["loss"])
    assert np.allclose(t["loss"], want["loss"])
    assert np.array_equal(t["loss_out_of_range"].to_numpy(bool), np.asarray(want["out_of_range"]))
    assert t["loss_out_of_range_inputs"].tolist() == [
        str(v) for v in np.asarray(want["out_of_range_inputs"])
    ]
    assert set(t["loss_law"]) == {"chinchilla"}
    # More training tokens never raise the loss of the same architecture.
    key = ["gpu", "batch_size", "d_model", "n_layers", "n_kv_heads"]
    for _, g in t.groupby(key):
        g = g.sort_values("training_tokens")
        assert (np.diff(g["loss"].to_numpy()) <= 0).all()


@needs_quality
def test_a_loss_constraint_excludes_the_worse_models(tmp_path: Path) -> None:
    from dse.estimators.quality import predict_loss

    space = load_space(write(tmp_path, BASE + TOKENS + OBJ))
    cols = space.enumerate()
    loss = np.asarray(
        predict_loss(cols, cols["training_tokens"].astype(float), "besiroglu")["loss"]
    )
    limit = float(np.quantile(loss, 0.5))
    text = BASE + TOKENS + f"constraints: {{loss: {{max: {limit!r}, source: besiroglu}}}}\n" + OBJ
    t = _sweep(write(tmp_path, text, "c.yaml"), tmp_path / "out", "random")
    assert np.allclose(t["constraint.loss_max"], t["loss"] / limit - 1.0)
    assert (t.loc[t["feasible"], "loss"] <= limit).all()
    assert not t.loc[t["loss"] > limit, "feasible"].any()
    assert (t.loc[t["on_front"], "loss"] <= limit).all()


def test_constraints_of_invalid_rows_are_positive(tmp_path: Path) -> None:
    # n_heads 24 does not divide d_model 2048 or 4096: those rows never reach the predictor.
    text = BASE.replace("n_heads: 32", "n_heads: {values: [24, 32]}").replace(
        "n_kv_heads: {values: [8, 32]}", "n_kv_heads: 8"
    )
    text += "constraints: {ttft: {max: 5.0}, throughput: {min: 1.0}}\n"
    space = load_space(write(tmp_path, text))
    cols = space.enumerate()
    ev = evaluate(space, cols)
    assert (~ev.valid).any() and ev.valid.any()
    for name in ("valid", "ttft_max", "throughput_min"):
        assert (ev.constraints[name][~ev.valid] > 0).all(), name
        assert np.isfinite(ev.constraints[name]).all()
    assert not ev.feasible[~ev.valid].any()
    assert list(itertools.islice(ev.constraints, 3)) == ["valid", "ttft_max", "throughput_min"]


@needs_quality
def test_auto_loss_records_which_law_priced_each_row(tmp_path: Path) -> None:
    """`loss: {source: auto}` on a space that searches MoE: every row by joint_moe (dense rows
    too, so the loss column is one law); on a dense space: besiroglu_heads. Each row's law in
    `loss_law`, each loss the one that law gives alone."""
    from dse.estimators.quality import predict_loss

    text = (
        "name: auto\nhardware: h100_sxm\n"
        "workload: {batch_size: 8, prompt_tokens: 512, output_tokens: 128}\n"
        "space:\n  d_model: 2048\n  n_layers: {values: [16, 24]}\n  n_heads: 16\n"
        "  n_kv_heads: {values: [2, 16]}\n  d_ff: 5632\n  n_experts: {values: [1, 8]}\n"
        "  top_k: 1\n  training_tokens: 2.0e+10\n"
        "objectives:\n  loss: {source: auto}\n  energy: {}\n"
    )
    path = write(tmp_path, text)
    t = _sweep(path, tmp_path / "out", "exhaustive", trials=8)
    assert len(t) == 8 and (t["state"] == "COMPLETE").all()
    assert set(t["loss_law"]) == {"joint_moe"}
    space = load_space(path)
    cols = space.columns_from(
        [{p.name: r[p.name] for p in space.searched} for _, r in t.iterrows()]
    )
    want = predict_loss(cols, cols["training_tokens"].astype(float), "joint_moe")["loss"]
    assert np.allclose(t["obj.loss_auto"], want)
    dense = write(tmp_path, text.replace("{values: [1, 8]}", "1"), "dense.yaml")
    t = _sweep(dense, tmp_path / "dense", "exhaustive", trials=4)
    assert set(t["loss_law"]) == {"besiroglu_heads"}
    space = load_space(dense)
    cols = space.columns_from(
        [{p.name: r[p.name] for p in space.searched} for _, r in t.iterrows()]
    )
    want = predict_loss(cols, cols["training_tokens"].astype(float), "besiroglu_heads")["loss"]
    assert np.allclose(t["obj.loss_auto"], want)
    # A space that routes a token to several experts: krajewski2024 (it sees the granularity).
    fine = write(tmp_path, text.replace("  top_k: 1\n", "  top_k: {values: [1, 2]}\n"), "f.yaml")
    t = _sweep(fine, tmp_path / "fine", "exhaustive", trials=16)
    valid = t["invalid_reason"].fillna("") == ""
    assert valid.sum() == 12 and set(t.loc[valid, "loss_law"]) == {"krajewski2024"}


# ------------------------------------------------------------------ lifetime energy
LIFE = BASE.replace("output_tokens: 128}", "output_tokens: 128, lifetime_tokens: 1.0e+12}")
TRAIN = "  training_energy: {achieved_flops_per_s: 4.0e+14, power_w: 700}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            BASE + TOKENS + "objectives:\n  lifetime_energy: {j_per_flop: 1.0e-12}\n  loss: "
            "{source: auto}\n",
            "objectives.lifetime_energy: needs workload.lifetime_tokens (the output tokens "
            "served over the model's life), got none",
        ),
        (
            BASE.replace("output_tokens: 128}", "output_tokens: 128, lifetime_tokens: -5}")
            + TOKENS
            + "objectives:\n  lifetime_energy: {j_per_flop: 1.0e-12}\n  energy: {}\n",
            "workload.lifetime_tokens: must be an integer in [0, ",
        ),
        (
            LIFE + "objectives:\n  lifetime_energy: {j_per_flop: 1.0e-12}\n  energy: {}\n",
            "objectives.lifetime_energy: needs space.training_tokens (the training token "
            "budget), got none",
        ),
        (
            LIFE + TOKENS + "objectives:\n  lifetime_energy: {j_per_flop: 1.0e-12, power_w: 700}"
            "\n  energy: {}\n",
            "objectives.lifetime_energy: takes j_per_flop or achieved_flops_per_s with power_w, "
            "not both, got j_per_flop, power_w",
        ),
        (
            LIFE + TOKENS + "objectives:\n  training_energy: {power_w: 700}\n  energy: {}\n",
            "objectives.training_energy.achieved_flops_per_s: is required (or j_per_flop): the "
            "training GPU's achieved FLOP/s and its power in W, got power_w",
        ),
        (
            LIFE + TOKENS + "objectives:\n  training_energy: {j_per_flop: 0}\n  energy: {}\n",
            "objectives.training_energy.j_per_flop: must be > 0, got 0",
        ),
    ],
)
def test_lifetime_objectives_bad_input(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert str(exc.value).startswith(str(path) + ":"), str(exc.value)
    assert expected in str(exc.value), str(exc.value)


def test_lifetime_energy_is_training_plus_served_tokens(tmp_path: Path) -> None:
    """Hand-worked: training energy = 6 N D x (700 W / 4e14 FLOP/s) with N the active
    parameters and D the training tokens; lifetime energy adds HYMELL's energy per output token
    x workload.lifetime_tokens (1e12)."""
    text = (
        LIFE.replace("d_model: {values: [2048, 4096]}", "d_model: 2048")
        .replace("batch_size: {values: [1, 8, 32]}", "batch_size: 8")
        .replace("hardware: {values: [h100_sxm, h200_sxm]}", "hardware: h100_sxm")
        + "  training_tokens: {values: [1.0e+11, 1.0e+12]}\n"
        + "objectives:\n"
        + "  lifetime_energy: {achieved_flops_per_s: 4.0e+14, power_w: 700}\n"
        + TRAIN
        + "  energy: {metric: per_output_token}\n"
    )
    t = _sweep(write(tmp_path, text), tmp_path / "out", "exhaustive", trials=8)
    assert len(t) == 8 and (t["state"] == "COMPLETE").all()
    train = 6 * t["active_params"] * t["training_tokens"].astype(float) * (700 / 4.0e14)
    np.testing.assert_allclose(t["obj.training_energy"], train, rtol=1e-12)
    served = t["pred.energy_per_output_token_j"] * 1e12
    np.testing.assert_allclose(t["obj.lifetime_energy"], train + served, rtol=1e-12)
    # Ten times the tokens: ten times the training energy, the same serving energy.
    for _, g in t.groupby(["n_layers", "n_kv_heads"]):
        g = g.sort_values("training_tokens")
        assert g["obj.training_energy"].iloc[1] == pytest.approx(
            10 * g["obj.training_energy"].iloc[0], rel=1e-12
        )

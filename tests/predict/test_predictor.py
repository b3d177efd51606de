"""The frozen end-to-end predictor: quadrature, Level 3, artifacts, provenance, bands, imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dse.models.artifact import Artifact, FittedModel
from dse.models.level3 import TERMS, Level3
from dse.models.level3_power import Power3
from dse.predict import load_artifact, predict
from dse.predict.ops import forward_ops
from dse.predict.pricing import Pricer
from dse.predict.request import BAND_KEYS, OUTPUT_KEYS, base_costs, decode_nodes, global_inputs
from dse.resources import surrogates_dir
from dse.spec import columns as C
from dse.spec.hardware import get_gpu

REPO = Path(__file__).resolve().parents[2]
LLAMA3_8B = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256)
LLAMA2_7B = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11008)
MIXTRAL = dict(LLAMA3_8B, vocab_size=32000, n_experts=8, top_k=2)
SMALL = dict(d_model=2048, n_layers=16, n_heads=16, n_kv_heads=4, d_ff=8192)


def frame(*rows: dict) -> pd.DataFrame:
    """Rows as a DataFrame, every column a row leaves out taking its default."""
    keys = {k for r in rows for k in r}
    full = [{k: r.get(k, C.DEFAULTS.get(k)) for k in keys} for r in rows]
    return pd.DataFrame(full)


# ---------------------------------------------------------------------------- quadrature
def test_quadrature_is_exact_for_linear_step_costs() -> None:
    # f(L) = a + b L summed over L = start .. start + steps - 1, for several (start, steps).
    start = np.array([1.0, 129.0, 1025.0, 4000.0])
    steps = np.array([1.0, 127.0, 1023.0, 31.0])
    nodes, w = decode_nodes(start, steps)
    a, b = 3e-3, 2e-7
    exact = np.array(
        [sum(a + b * (s + j) for j in range(int(n))) for s, n in zip(start, steps, strict=True)]
    )
    np.testing.assert_allclose((w * (a + b * nodes)).sum(axis=0), exact, rtol=1e-12)
    # Weights sum to the number of steps (a constant cost is counted once per step).
    np.testing.assert_allclose(w.sum(axis=0), steps, rtol=1e-12)


def test_quadrature_error_at_a_kink_is_small() -> None:
    # A regime change (launch floor -> memory-bound) in the middle of the decode range.
    start, steps = np.array([100.0]), np.array([2000.0])
    f = lambda x: np.maximum(1e-3, 1e-6 * x)  # noqa: E731  kink at L = 1000
    nodes, w = decode_nodes(start, steps)
    exact = f(start[0] + np.arange(steps[0])).sum()
    assert abs((w * f(nodes)).sum() / exact - 1) < 0.01


@pytest.mark.parametrize("segments", [1, 2, 4])
def test_node_strata_split_the_simpson_weights_in_thirds(segments: int) -> None:
    from dse.predict.request import node_strata

    start = np.array([10.0, 300.0])
    steps = np.array([4.0 * segments, 1000.0])
    nodes, w = decode_nodes(start, steps)  # the module's segment count
    st = node_strata(len(nodes))
    assert st.shape == (len(nodes), 1)
    shares = np.array([w[st[:, 0] == s].sum(axis=0) for s in range(3)])
    np.testing.assert_allclose(shares, np.broadcast_to(w.sum(axis=0) / 3, shares.shape))
    # any 4 j + 1 nodes split in thirds of the composite Simpson weights (1, 4, 2, ..., 4, 1)
    k = 4 * segments + 1
    c = np.where(np.arange(k) % 2 == 1, 4.0, 2.0)
    c[[0, -1]] = 1.0
    s = node_strata(k)[:, 0]
    np.testing.assert_allclose([c[s == j].sum() for j in range(3)], c.sum() / 3)
    with pytest.raises(ValueError, match="4 j \\+ 1"):
        node_strata(k + 2)


def _decode_integral_and_steps(row: dict, art: Artifact | None) -> tuple[dict, Any, Any]:
    """(columns, decode integrated by the quadrature, every decode step priced on its own) of
    one configuration on h100_sxm, with `art` (None: the roofline pricer)."""
    cols, n = C.as_columns({k: [v] for k, v in row.items()})
    gpu = get_gpu("h100_sxm")
    integrated = base_costs(cols, n, gpu, art).decode
    steps = row["output_tokens"] - 1
    rep = {k: np.repeat(v, steps) for k, v in cols.items()}
    kv = row["prompt_tokens"] + 1 + np.arange(steps, dtype=float)
    each = Pricer(gpu, art, None, rep).price(forward_ops(rep, "decode", kv_len=kv), "decode")
    return cols, integrated, each


@pytest.mark.parametrize(
    "model, batch, prompt, output, tp",
    [
        (LLAMA3_8B, 8, 1000, 400, 1),
        (LLAMA2_7B, 32, 128, 900, 2),
        (MIXTRAL, 4, 2048, 300, 4),
        (SMALL, 1, 16, 700, 1),
    ],
)
def test_decode_integral_matches_the_step_by_step_sum(
    model: dict, batch: int, prompt: int, output: int, tp: int
) -> None:
    """The quadrature over the KV length against pricing every decode step (roofline pricer,
    which has launch-floor kinks)."""
    row = dict(
        model, batch_size=batch, prompt_tokens=prompt, output_tokens=output, tensor_parallel=tp
    )
    _, integrated, each = _decode_integral_and_steps(row, None)
    assert integrated.time_s[0] == pytest.approx(each.time_s.sum(), rel=2e-3)
    assert integrated.energy_j[0] == pytest.approx(each.energy_j.sum(), rel=2e-3)


@pytest.mark.parametrize(
    "model, batch, prompt, output, tp, engine",
    [
        (LLAMA3_8B, 8, 1000, 400, 1, "vllm"),
        (LLAMA2_7B, 32, 128, 900, 2, "trtllm"),
        (dict(SMALL, n_heads=24, n_kv_heads=8, head_dim=96), 3, 50, 1500, 1, "vllm"),
    ],
)
def test_stratified_decode_attention_matches_the_full_ensemble_step_sum(
    model: dict, batch: int, prompt: int, output: int, tp: int, engine: str
) -> None:
    """The shipped decode-attention residuals are means of 3 MLPs; the quadrature runs one
    member per node (`node_strata`). Against every decode step priced with all 3 members
    averaged: the decode-attention time and the whole decode time agree within the measured
    spread (docs/accuracy.md: mean 0.06-0.09%, 99th percentile ~1% over random batches)."""
    from dse.models._nn import MeanMLP

    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("no shipped h100_sxm artifact")
    mlp = art.model(f"generation_attention.{engine}").mlp_
    assert isinstance(mlp, MeanMLP) and len(mlp.members) == 3
    row = dict(
        model,
        batch_size=batch,
        prompt_tokens=prompt,
        output_tokens=output,
        tensor_parallel=tp,
        engine=engine,
    )
    cols, integrated, each = _decode_integral_and_steps(row, art)
    attn_q = integrated.part_s("attention_decode")[0]
    attn_s = each.part_s("attention_decode").sum()
    assert attn_q == pytest.approx(attn_s, rel=1e-2)
    assert integrated.time_s[0] == pytest.approx(each.time_s.sum(), rel=3e-3)
    # and the strata do pick single members: all three averaged at every node differs
    from dse.models import _hybrid

    try:
        _hybrid.STRATA = 0
        full = base_costs(cols, 1, get_gpu("h100_sxm"), art).decode.part_s("attention_decode")[0]
    finally:
        _hybrid.STRATA = 3
    assert full != attn_q
    assert full == pytest.approx(attn_s, rel=1e-2)


# ---------------------------------------------------------------------------- a small artifact
def _training_configs() -> tuple[pd.DataFrame, np.ndarray]:
    rows, groups = [], []
    # Three layer counts, so that every two-model training fold separates c0 from c_layer.
    # Three GQA ratios (4, 1, 2), so that every fold separates a_attn from a_attn_gqa.
    for name, model in (
        ("a", LLAMA3_8B),
        ("b", dict(LLAMA2_7B, n_layers=24)),
        ("c", dict(SMALL, n_kv_heads=8)),
    ):
        for b in (1, 8, 64):
            for s in (128, 512, 2048):
                for tp in (1, 2):
                    for engine in ("vllm", "trtllm"):
                        rows.append(
                            dict(
                                model,
                                batch_size=b,
                                prompt_tokens=s,
                                output_tokens=s,
                                tensor_parallel=tp,
                                engine=engine,
                                gpu="h100_sxm",
                            )
                        )
                        groups.append(name)
    return frame(*rows), np.array(groups)


TRUE = {
    "a_pre": 1.3,
    "a_pre_roof": 0.0,
    "a_dec": 1.1,
    "a_dec_roof": 0.0,
    "a_attn": 1.2,
    "a_attn_roof": 0.0,
    "a_comm": 1.5,
    "a_comm_roof": 0.0,
    "c0_s": 2e-3,
    "c_batch_s": 4e-5,
    "c_layer_s": 1e-5,
    "c_tp_s": 2e-5,
    "a_kv_overflow": 0.2,
    "a_attn_gqa": 0.15,
}
TRUE_THETA = np.array([TRUE[t] for t in TERMS])


def _synthetic(use_mlp: bool, noise: float = 0.0):  # type: ignore[no-untyped-def]
    cfg, groups = _training_configs()
    cols, n = C.as_columns(cfg)
    gpu = get_gpu("h100_sxm")
    g = global_inputs(cols, base_costs(cols, n, gpu, None))
    from dse.models.level3 import design

    x_t, x_d = design(g)
    y = (x_t + x_d) @ TRUE_THETA
    y = y * (1 + noise * np.sin(np.arange(n)))
    model = Level3(n_ensemble=2, use_mlp=use_mlp, prior_weight=0.0).fit(g, y, groups)
    return model, g, y


@pytest.fixture(scope="module")
def tiny_artifact() -> Artifact:
    model, _, _ = _synthetic(use_mlp=True, noise=0.02)
    rng = np.random.default_rng(0)
    u = rng.uniform(0.1, 0.7, 30)
    batch = rng.choice([1.0, 16.0, 64.0], 30)
    power = Power3().fit(u, batch, 0.05 + 0.9 * u, rng.integers(0, 3, 30))
    power.band_log_ = np.array([-0.05, 0.05])
    fitted = [FittedModel("level3.e2e", model), FittedModel("level3.power", power)]
    return Artifact.from_fitted("h100_sxm", fitted)


def test_level3_recovers_known_overheads() -> None:
    model, g, y = _synthetic(use_mlp=False)
    for engine in ("vllm", "trtllm"):
        theta = model.engines_[engine].theta
        # Without kernel models, each group's model and roofline times are the same column:
        # only their sums are identified.
        from dse.models.level3 import PAIRS

        paired = {TERMS.index(t) for pair in PAIRS for t in pair}
        rest = [k for k in range(len(TERMS)) if k not in paired]
        np.testing.assert_allclose(theta[rest], TRUE_THETA[rest], rtol=0.02)
        for a, b in PAIRS:
            total = theta[TERMS.index(a)] + theta[TERMS.index(b)]
            assert total == pytest.approx(TRUE[a], rel=0.02), a
        assert model.cv_[engine]["latency_mape_pct"] < 1.0
    out = model.correct(g)
    np.testing.assert_allclose(out["ttft_s"] + out["decode_s"], y, rtol=0.01)
    assert len(TERMS) == len(TRUE_THETA)


QUERY = frame(
    dict(LLAMA3_8B, batch_size=16, prompt_tokens=1024, output_tokens=1024, gpu="h100_sxm"),
    dict(LLAMA2_7B, batch_size=64, prompt_tokens=2048, output_tokens=2048, gpu="h100_sxm"),
    dict(
        MIXTRAL,
        batch_size=4,
        prompt_tokens=512,
        output_tokens=128,
        tensor_parallel=4,
        gpu="h100_sxm",
        engine="trtllm",
    ),
    dict(SMALL, batch_size=2, prompt_tokens=300, output_tokens=1, gpu="h100_sxm"),
    dict(SMALL, batch_size=2, prompt_tokens=300, output_tokens=40, gpu="a100_sxm"),
)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if a[k].dtype == object:
            assert list(a[k]) == list(b[k]), k
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_save_load_round_trip_gives_identical_predictions(
    tiny_artifact: Artifact, tmp_path: Path
) -> None:
    before = predict(QUERY, artifacts={"h100_sxm": tiny_artifact})
    tiny_artifact.save(tmp_path / "h100_sxm")
    loaded = Artifact.load(tmp_path / "h100_sxm")
    assert loaded.artifact_id == tiny_artifact.artifact_id
    _same(before, predict(QUERY, artifacts={"h100_sxm": loaded}))


def test_outputs_are_consistent(tiny_artifact: Artifact) -> None:
    p = predict(QUERY, artifacts={"h100_sxm": tiny_artifact})
    for k in (*OUTPUT_KEYS, *BAND_KEYS):
        assert np.all(np.isfinite(p[k])) and np.all(p[k] >= 0), k
    steps = QUERY["output_tokens"].to_numpy() - 1
    np.testing.assert_allclose(p["latency_s"], p["ttft_s"] + p["tpot_s"] * steps, rtol=1e-12)
    np.testing.assert_allclose(p["energy_j"], p["prefill_energy_j"] + p["decode_energy_j"])
    tokens = QUERY["output_tokens"] * QUERY["batch_size"]
    np.testing.assert_allclose(p["energy_per_output_token_j"], p["energy_j"] / tokens)
    # The itemised breakdown (operators + system overhead) sums to each phase's time.
    for phase, total in (("prefill", p["ttft_s"]), ("decode", p["latency_s"] - p["ttft_s"])):
        items = sum(v for k, v in p.items() if k.startswith(f"breakdown.{phase}."))
        np.testing.assert_allclose(items, total, rtol=1e-9, atol=1e-12)
        blocks = sum(v for k, v in p.items() if k.startswith(f"blocks.{phase}."))
        np.testing.assert_allclose(blocks, total, rtol=1e-9, atol=1e-12)
    for key in ("ttft", "tpot", "latency"):
        assert np.all(p[f"{key}_lo_s"] <= p[f"{key}_s"]) and np.all(
            p[f"{key}_s"] <= p[f"{key}_hi_s"]
        )
    assert np.all(p["energy_lo_j"] <= p["energy_j"]) and np.all(p["energy_j"] <= p["energy_hi_j"])
    # TP group energy: average power is per GPU.
    np.testing.assert_allclose(
        p["avg_power_w"], p["energy_j"] / QUERY["tensor_parallel"] / p["latency_s"]
    )
    assert list(p["source"][:4]) == ["hymell"] * 4
    assert p["artifact_id"][0] == tiny_artifact.artifact_id


def test_a_batch_predicts_like_its_rows_one_by_one(tiny_artifact: Artifact) -> None:
    arts = {"h100_sxm": tiny_artifact, "a100_sxm": None}
    batch = predict(QUERY, artifacts=arts)
    for i in range(len(QUERY)):
        one = predict(QUERY.iloc[[i]], artifacts=arts)
        for k in OUTPUT_KEYS:
            # float32 MLP passes: BLAS may sum in another order for another batch size.
            assert one[k][0] == pytest.approx(batch[k][i], rel=1e-6), (i, k)


def test_roofline_fallback_is_named_in_the_provenance() -> None:
    p = predict(QUERY.iloc[:1], artifacts={"h100_sxm": None})
    assert p["source"][0] == "roofline"
    assert "attention/qkv" in p["roofline_ops"][0]
    assert "ffn/moe" not in p["roofline_ops"][0]  # a dense model runs no MoE operator
    assert "uncalibrated" in p["energy_source"][0]
    assert p["latency_hi_s"][0] == pytest.approx(4 * p["latency_lo_s"][0])


def test_out_of_range_is_flagged_and_widens_the_band(tiny_artifact: Artifact) -> None:
    inside = dict(LLAMA3_8B, batch_size=8, prompt_tokens=512, output_tokens=512)
    outside = dict(inside, d_model=16384, n_heads=128, n_kv_heads=8, n_layers=120, batch_size=512)
    p = predict(frame(inside, outside), artifacts={"h100_sxm": tiny_artifact})
    assert list(p["out_of_range"]) == [False, True]
    assert p["out_of_range_inputs"][0] == ""
    assert "level3: d_model 16384 > " in p["out_of_range_inputs"][1]
    width = np.log(p["latency_hi_s"] / p["latency_lo_s"])
    assert width[1] > 1.5 * width[0]


def test_kv_overflow_runs_in_waves() -> None:
    """A batch whose KV cache cannot fit runs sequentially: much slower than linear."""
    a100 = dict(LLAMA2_7B, prompt_tokens=2048, output_tokens=2048, gpu="a100_sxm_40gb")
    p = predict(
        frame(dict(a100, batch_size=4), dict(a100, batch_size=64)),
        artifacts={"a100_sxm_40gb": None, "a100_sxm": None},
    )
    cols, n = C.as_columns(frame(dict(a100, batch_size=64)))
    assert base_costs(cols, n, get_gpu("a100_sxm_40gb"), None).waves[0] > 1
    # 16x the sequences, without room to batch them, costs more than 8x the time.
    assert p["latency_s"][1] > 8 * p["latency_s"][0]


def test_predict_imports_no_optimiser_plotting_or_fitting_library() -> None:
    code = (
        "import sys\n"
        "from dse.predict import predict\n"
        "p = predict({'d_model': 4096, 'n_layers': 32, 'n_heads': 32, 'd_ff': 14336})\n"
        "assert p['latency_s'][0] > 0\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'optuna', 'plotly', 'sklearn', 'scipy', 'torch'})\n"
        "print(','.join(heavy))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


# ---------------------------------------------------------------------------- shipped artifacts
SHIPPED = [
    g
    for g in ("h100_sxm", "h200_sxm", "a100_sxm")
    if (surrogates_dir() / g / "manifest.json").is_file()
]


@pytest.mark.slow
@pytest.mark.parametrize("gpu", SHIPPED)
def test_shipped_artifact_round_trips_and_carries_level3(gpu: str, tmp_path: Path) -> None:
    art, fitted_for = load_artifact(gpu)
    assert art is not None and fitted_for == gpu
    assert art.has("level3.e2e")
    entry = art.manifest["models"]["level3.e2e"]
    assert entry["fitted_range"] and entry["cv"]
    q = QUERY.assign(gpu=gpu)
    before = predict(q, artifacts={gpu: art})
    art.save(tmp_path / gpu)
    _same(before, predict(q, artifacts={gpu: Artifact.load(tmp_path / gpu)}))
    assert set(before["source"]) == {"hymell"}


def test_a100_40gb_borrows_the_a100_artifact() -> None:
    art, fitted_for = load_artifact("a100_sxm_40gb")
    if art is None:
        pytest.skip("no a100_sxm artifact shipped")
    assert fitted_for == "a100_sxm"
    p = predict(QUERY.iloc[[0]].assign(gpu="a100_sxm_40gb"))
    assert p["artifact_gpu"][0] == "a100_sxm"


# ---------------------------------------------------------------------------- measured data
def test_level3_structured_stage_on_argonne_h100(data_dir: Path) -> None:
    """Leave-one-model-out error of the structured overhead stage alone (no MLP) on the argonne
    H100 rows, priced by the roofline: a floor that the full artifact must beat."""
    from dse.data import load
    from dse.fitting.level3 import fit_level3

    e2e = load(data_dir, ["e2e"])["e2e"]
    model, info = fit_level3("h100_sxm", e2e, None, use_mlp=False)
    assert info["rows_used"] > 300
    assert model.cv_["vllm"]["groups"] >= 5
    assert model.cv_["vllm"]["latency_mape_pct"] < 12.0
    assert model.cv_["trtllm"]["latency_mape_pct"] < 25.0

"""Graded out-of-range provenance and the pricing of shapes beyond a table in blocks inside it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.models.artifact import Artifact
from dse.models.base import RANGE_TOL, range_miss
from dse.models.level3 import OOR_BAND_WIDEN
from dse.predict import _rows, load_artifact, predict
from dse.predict import adapters as L
from dse.predict.ops import _gemm
from dse.predict.request import base_costs
from dse.spec import columns as C
from dse.spec.hardware import get_gpu

LLAMA3_8B = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256)
WORKLOAD = dict(batch_size=8, prompt_tokens=512, output_tokens=256, tensor_parallel=1)


def frame(*rows: dict) -> pd.DataFrame:
    keys = {k for r in rows for k in r}
    return pd.DataFrame([{k: r.get(k, C.DEFAULTS.get(k)) for k in keys} for r in rows])


@pytest.fixture(scope="module")
def h100() -> Artifact:
    art, name = load_artifact("h100_sxm")
    if art is None or name != "h100_sxm":
        pytest.skip("no shipped h100_sxm artifact")
    return art


def without_blocks(mp: pytest.MonkeyPatch) -> None:
    """Pricing as before block pricing: every GEMM, layer operator and MoE block in one call."""
    mp.setattr(L, "column_blocks", lambda n, n_max: (np.ones_like(n), n))
    mp.setattr(L, "row_blocks", lambda size, size_max: np.ones_like(np.asarray(size, float)))
    mp.setattr(L, "_layer_row_blocks", lambda *a: None)


# ---------------------------------------------------------------------------- the grade
def test_range_miss_is_zero_inside_and_grows_with_the_distance() -> None:
    v = np.array([100.0, 4096.0, 4096 * (1 + RANGE_TOL / 2), 5120.0, 8192.0, 65536.0, 50.0, 10.0])
    m = range_miss(v, 128.0, 4096.0)
    # inside, at a bound, within rounding of a bound: 0
    assert m.degree[1] == 0.0 and m.degree[2] == 0.0
    np.testing.assert_allclose(m.excess[3:6], np.log(v[3:6] / 4096.0), rtol=1e-12)
    np.testing.assert_allclose(m.excess[6:], np.log(v[6:] / 128.0), rtol=1e-12)
    assert np.all(np.diff(m.degree[3:6]) > 0) and m.degree[7] > m.degree[6] > 0
    np.testing.assert_array_equal(m.bound[3:6], 4096.0)
    np.testing.assert_array_equal(m.bound[6:], 128.0)
    assert m.excess[0] == pytest.approx(np.log(100.0 / 128.0))  # below: negative
    # a linear input (Level 3's KV fill): a nearly empty cache below the fitted minimum is inside
    lin = range_miss(np.array([1e-6, 3.0]), 1e-4, 2.0, linear=True)
    assert lin.degree[0] == 0.0 and lin.excess[1] == pytest.approx((3.0 - 2.0) / (2.0 - 1e-4))


def test_llama3_8b_is_inside_and_its_lm_head_is_never_flagged(h100: Artifact) -> None:
    rows = [
        dict(LLAMA3_8B, **WORKLOAD),
        dict(LLAMA3_8B, batch_size=16, prompt_tokens=1024, output_tokens=256, tensor_parallel=1),
        dict(LLAMA3_8B, batch_size=16, prompt_tokens=2048, output_tokens=512, tensor_parallel=2),
    ]
    p = predict(frame(*rows), artifacts={"h100_sxm": h100})
    assert not any("lm_head" in t for t in p["out_of_range_inputs"])
    assert not p["out_of_range"].any()
    np.testing.assert_array_equal(p["out_of_range_degree"], 0.0)
    assert list(p["out_of_range_inputs"]) == ["", "", ""]


def test_a_far_d_model_is_flagged_by_name_and_graded(h100: Artifact) -> None:
    hi = h100.model("level3.e2e").fitted_range()["d_model"][1]
    widths = [hi, hi * 1.25, hi * 1.5, hi * 2]
    # tensor parallel 4: the wide models fit in memory, so d_model is what is outside
    base = dict(LLAMA3_8B, **WORKLOAD) | {"tensor_parallel": 4}
    rows = [dict(base, d_model=int(d), n_heads=int(d) // 128) for d in widths]
    p = predict(frame(*rows), artifacts={"h100_sxm": h100})
    text = p["out_of_range_inputs"]
    assert text[0] == "" and not p["out_of_range"][0]
    for t, d in zip(text[1:], widths[1:], strict=True):
        assert f"level3: d_model {int(d)} > {int(hi)} (x{d / hi:.3g})" in t
    deg = p["out_of_range_degree"]
    assert deg[0] == 0.0 and p["out_of_range"][1:].all()
    np.testing.assert_allclose(deg[1:], np.log(np.array(widths[1:]) / hi), rtol=1e-9)
    assert np.all(np.diff(deg) > 0)
    # the band widens with the distance outside (fully from a factor 2 on)
    width = np.log(p["latency_hi_s"] / p["latency_lo_s"])
    assert np.all(np.diff(width) > 0)
    assert width[3] == pytest.approx(OOR_BAND_WIDEN * width[0], rel=1e-9)


def test_a_tiny_excursion_past_a_bound_is_inside(h100: Artifact) -> None:
    hi = h100.model("level3.e2e").fitted_range()["n_layers"][1]
    p = predict(frame(dict(LLAMA3_8B, **WORKLOAD, n_layers=int(hi) + 0)), {"h100_sxm": h100})
    q = predict(frame(dict(LLAMA3_8B, **WORKLOAD, n_layers=int(hi) * 2)), {"h100_sxm": h100})
    assert "n_layers" not in p["out_of_range_inputs"][0]
    assert f"level3: n_layers {int(hi) * 2} > {int(hi)} (x2)" in q["out_of_range_inputs"][0]
    assert q["out_of_range_degree"][0] == pytest.approx(np.log(2.0), rel=1e-9)


# ---------------------------------------------------------------------------- block pricing
def test_column_blocks_stay_inside_the_table() -> None:
    blocks, cols = _rows.column_blocks(np.array([4096.0, 65536.0, 128256.0, 150000.0]), 65536.0)
    np.testing.assert_array_equal(blocks, [1, 1, 2, 3])
    np.testing.assert_array_equal(cols, [4096, 65536, 64128, 50048])
    assert (
        np.all(cols % 128 == 0)
        and np.all(cols <= 65536)
        and np.all(blocks * cols >= [0, 0, 128256, 150000])
    )


def test_a_wide_gemm_costs_the_sum_of_its_column_blocks(h100: Artifact) -> None:
    gpu = get_gpu("h100_sxm")
    m = np.array([1.0, 8.0, 512.0, 4096.0])
    wide = _gemm("lm_head", "lm_head", 1.0, m, np.full(4, 128256.0), 4096.0, 2.0, "bfloat16")
    half = _gemm("lm_head", "lm_head", 1.0, m, np.full(4, 64128.0), 4096.0, 2.0, "bfloat16")
    pw, ph = L.price_gemm(h100, wide, gpu), L.price_gemm(h100, half, gpu)
    np.testing.assert_allclose(pw.latency_s, 2.0 * ph.latency_s, rtol=1e-12)
    np.testing.assert_allclose(pw.power_w, ph.power_w, rtol=1e-12)
    assert not pw.out_of_range.any() and not pw.misses


def test_shapes_inside_every_table_are_priced_as_before(h100: Artifact) -> None:
    # vocabulary <= the GEMM tables' n, prefill tokens inside every table: no block at all
    rows = [
        dict(LLAMA3_8B, **WORKLOAD, vocab_size=32000),
        dict(LLAMA3_8B, batch_size=1, prompt_tokens=2048, output_tokens=128, vocab_size=65536),
        dict(LLAMA3_8B, batch_size=4, prompt_tokens=128, output_tokens=512, tensor_parallel=2),
    ]
    df = frame(*rows)
    after = predict(df, artifacts={"h100_sxm": h100})
    with pytest.MonkeyPatch.context() as mp:
        without_blocks(mp)
        before = predict(df, artifacts={"h100_sxm": h100})
    for k in ("ttft_s", "tpot_s", "latency_s", "energy_j", "breakdown.prefill.lm_head_s"):
        np.testing.assert_allclose(after[k], before[k], rtol=1e-9, err_msg=k)


def test_llama3_lm_head_moves_by_its_blocks_only(h100: Artifact) -> None:
    # Levels 1-2 of Llama-3-8B at a workload inside every other table: only its LM head moves
    cols, n = C.as_columns(frame(dict(LLAMA3_8B, **WORKLOAD)))
    gpu = get_gpu("h100_sxm")
    after = base_costs(cols, n, gpu, h100)
    with pytest.MonkeyPatch.context() as mp:
        without_blocks(mp)
        before = base_costs(cols, n, gpu, h100)
    assert before.prefill.misses["lm_head: n"].value[0] == 128256
    assert not after.prefill.misses and not after.decode.misses
    for a, b in ((after.prefill, before.prefill), (after.decode, before.decode)):
        for k, v in a.items_s.items():
            if k != "lm_head":
                np.testing.assert_allclose(v, b.items_s[k], rtol=1e-9, err_msg=k)
        ratio = a.items_s["lm_head"][0] / b.items_s["lm_head"][0]
        assert 0.9 < ratio < 1.1 and abs(ratio - 1.0) > 1e-6


def test_a_long_prefill_is_priced_in_row_blocks_inside_the_tables(h100: Artifact) -> None:
    # 16 x 1024 prefill tokens: beyond the layer-op and Level-2 measurements (4096 tokens),
    # priced as row blocks inside them, so the configuration is inside
    df = frame(dict(LLAMA3_8B, batch_size=16, prompt_tokens=1024, output_tokens=256))
    p = predict(df, artifacts={"h100_sxm": h100})
    assert p["out_of_range_inputs"][0] == "" and p["out_of_range_degree"][0] == 0.0
    with pytest.MonkeyPatch.context() as mp:
        without_blocks(mp)
        q = predict(df, artifacts={"h100_sxm": h100})
    assert "prefill ffn/act: elements" in q["out_of_range_inputs"][0]


def test_few_row_texts_equal_the_grouped_batch_texts() -> None:
    """A batch of a few configurations writes its out-of-range texts row by row in plain
    Python (dse.predict.flags.FEW_ROWS); they must be the grouped path's texts, digit for
    digit: integers, 4 significant digits, ratios to 3, both directions, a zero bound."""
    from dse.models.base import RangeMiss
    from dse.predict import flags as F

    rng = np.random.default_rng(7)
    for n in range(1, F.FEW_ROWS + 1):
        merged = {}
        for i, label in enumerate(
            ("prefill gemm: n", "decode norm/input: width", "level3: prompt")
        ):
            value = rng.choice([4096.0, 1024.5, 3.0e7, 0.001234567, 131072.0, 7.0], n)
            bound = rng.choice([8192.0, 2560.0, 0.0, 1.5, 999999.5], n)
            excess = np.where(rng.random(n) < 0.6, np.log(np.maximum(value, 1e-9) / 3.0), 0.0)
            merged[label] = RangeMiss(excess, value, bound if i else bound[0])
        flags = {"level3: engine": rng.random(n) < 0.5}
        got = F._miss_text_rows(merged, flags, n)
        want = F._miss_text_grouped(merged, flags, n)
        assert got.tolist() == want.tolist()
        assert any(got.tolist()) or n < 3

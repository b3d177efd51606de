"""The fused-MoE physics of the issue-19 candidate (dse.models.moe_physics): routing statistics against independent closed forms and a
brute-force replica of aiconfigurator's balanced routing, gating from metadata, a residual
without raw layout coordinates, power under the board limit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dse.data._aiconfigurator import NON_GATED_MOE_LAYOUTS, moe_gated
from dse.errors import DataError
from dse.models import _moe_routing as R
from dse.models import moe_physics as M

# Equal predictions across batch layouts hold to float32 round-off of the residual MLP, not to
# the bit: which GEMM kernel OpenBLAS gives a block of rows depends on the CPU (issue 18).
ROW_RTOL = 1e-6


def _balanced_brute(T: int, k: int, E: int, ep: int) -> tuple[int, int]:
    """(slots, experts touched) on rank 0 of `collector/helper.py::balanced_logits`
    (aiconfigurator 095f58a), written out token by token."""
    s = math.ceil(E / k)
    hit: dict[int, int] = {}
    for t in range(T):
        for j in range(k):
            e = (t + j * s) % E if s <= T else math.floor((t * s / T + j * s) % E)
            if e < E // ep:
                hit[e] = hit.get(e, 0) + 1
    return sum(hit.values()), len(hit)


CASES = [(1, 8, 256, 1), (1, 8, 256, 64), (16, 8, 128, 1), (128, 1, 128, 1), (128, 1, 128, 4),
         (100, 8, 128, 8), (33, 22, 512, 4), (4096, 22, 512, 8), (3000, 8, 160, 32),
         (65536, 2, 8, 1)]  # fmt: skip


def test_round_robin_matches_the_collector_token_by_token():
    T, k, E, ep = (np.array(c, dtype=float) for c in zip(*CASES, strict=True))
    got = R.round_robin_stats(T, k, E, ep)
    for i, case in enumerate(CASES):
        slots, touched = _balanced_brute(*case)
        assert got["slots"][i] == slots, case
        assert got["touched"][i] == touched, case


def test_round_robin_touches_min_experts_and_token_slots():
    # one rank: min(E, T k) experts, the closed form of deterministic round robin
    T = np.array([1.0, 4.0, 16.0, 128.0, 1000.0])
    k, E, ep = np.full(5, 8.0), np.full(5, 128.0), np.ones(5)
    got = R.round_robin_stats(T, k, E, ep)
    np.testing.assert_array_equal(got["touched"], np.minimum(E, T * k))
    np.testing.assert_array_equal(got["slots"], T * k)
    # issue 19's example: 128 experts, top-1, 128 tokens: 128 touched, uniform expects ~81
    rr = R.round_robin_stats(*(np.array([v]) for v in (128.0, 1.0, 128.0, 1.0)))
    un = R.uniform_stats(*(np.array([v]) for v in (128.0, 1.0, 128.0, 1.0)))
    assert rr["touched"][0] == 128
    assert un["touched"][0] == pytest.approx(128 * (1 - (1 - 1 / 128) ** 128))
    assert un["touched"][0] == pytest.approx(81.1, abs=0.1)


def test_uniform_closed_form_and_tiles():
    T, k, E, ep = np.array([64.0]), np.array([2.0]), np.array([8.0]), np.array([2.0])
    got = R.uniform_stats(T, k, E, ep)
    assert got["touched"][0] == pytest.approx(4 * (1 - (1 - 2 / 8) ** 64))
    assert got["slots"][0] == 64.0
    # 16 tokens per expert pay one 64-row M tile each
    assert got["tiles"][0] == pytest.approx(4.0, rel=0.01)


def test_power_law_busiest_rank_is_measured_and_reproducible():
    T = np.array([1.0, 64.0, 4096.0, 16384.0])
    k, E, ep, a = np.full(4, 8.0), np.full(4, 256.0), np.array([1, 8, 8, 32.0]), np.full(4, 1.2)
    one = R.power_law_stats(T, k, E, ep, a)
    R._power_law_one.cache_clear()
    two = R.power_law_stats(T, k, E, ep, a)
    for key in one:
        np.testing.assert_array_equal(one[key], two[key])
    assert (one["slots"] >= T * k / ep - 1e-9).all() and (one["slots"] <= T * k).all()
    assert (one["touched"] <= E / ep).all() and (one["max_load"] <= T).all()
    # skew concentrates: the measured rank holds well above its even share at large T
    assert one["slots"][3] > 2 * T[3] * k[3] / ep[3]


def test_routing_names():
    code, alpha = R.routing_of(np.array(["balanced", "uniform", "power_law_1.2"]), 3)
    assert code.tolist() == [R.ROUND_ROBIN, R.UNIFORM, R.POWER_LAW]
    assert alpha.tolist() == [0.0, 0.0, 1.2]
    code, alpha = R.routing_of(np.array([0.0, 1.01]), 2)
    assert code.tolist() == [R.UNIFORM, R.POWER_LAW]
    with pytest.raises(DataError, match="round robin"):
        R.routing_of("zipf", 1)


def test_gating_from_layout_metadata_not_the_kernel_name():
    df = pd.DataFrame(
        {
            "hidden_size": [2048, 4096, 4096],
            "inter_size": [5120, 14336, 1536],
            "topk": [22, 2, 8],
            "num_experts": [512, 8, 128],
            # vLLM 0.24's names carry no "nongated"; TRT-LLM's does
            "kernel_source": [
                "vllm_unquantizedfusedmoe_triton_tritonexperts",
                "vllm_unquantizedfusedmoe_triton_tritonexperts",
                "moe_torch_flow_nongated",
            ],
        }
    )
    assert moe_gated(df).tolist() == [False, True, False]
    assert (2048, 5120, 22, 512) in NON_GATED_MOE_LAYOUTS
    cols = {c: df[c].to_numpy() for c in M.INPUTS if c in df}
    base = {**cols, "num_tokens": np.full(3, 64.0), "distribution": "balanced"}
    v = M.MoEModel()._inputs({**base, "gated": moe_gated(df)})
    w = M.moe_work(v, 2.0)
    v3 = M.MoEModel()._inputs({**base, "gated": True})
    w3 = M.moe_work(v3, 2.0)
    # non-gated: 2 of the 3 weight matrices
    assert w["flops"][0] == pytest.approx(w3["flops"][0] * 2 / 3)


def test_residual_inputs_carry_no_raw_layout_coordinate():
    assert not set(M.FEATURES) & set(M.LAYOUT_FEATURES)
    for f in M.FEATURES:
        assert not any(c in f for c in ("hidden", "inter", "experts_local", "topk")), f


@pytest.mark.slow
def test_moe_power_stays_under_the_board_limit(data_dir):
    from dse.data import load
    from dse.spec.hardware import get_gpu

    t = load(data_dir, ["moe"])["moe"]
    rows = t[(t["gpu"] == "h200_sxm") & (t["engine"] == "vllm") & (t["dtype"] == "bfloat16")]
    m = M.MoEModel("h200_sxm", "vllm", "bfloat16", max_rows=2000, max_iter=20).fit(rows)
    big = {
        "num_tokens": np.array([16384.0, 65536.0]),
        "hidden_size": 8192.0,
        "inter_size": 65536.0,
        "topk": 8.0,
        "num_experts": 256.0,
    }
    p = m.predict(**big)
    assert (p["power_w"] <= get_gpu("h200_sxm").board_power_w).all()
    np.testing.assert_allclose(p["energy_j"], p["power_w"] * p["latency_s"])
    assert {"experts_per_topk", "tokens_per_expert"} <= set(m.fitted_range())


def _split_rows(slow_tp: int) -> pd.DataFrame:
    """One layout over tp 1, 2, 4 (ep 1) whose time halves with tp, except split `slow_tp`,
    run 2x slower than its half-parallel twin at every token count."""
    recs = []
    for tp in (1, 2, 4):
        for T in (16, 256, 4096):
            y = 1e-3 * T / 4096 / tp + 2e-5
            if tp == slow_tp:
                y = 2.0 * (1e-3 * T / 4096 / (tp // 2) + 2e-5)
            recs.append(dict(gpu="h100_sxm", engine="trtllm", dtype="bfloat16", hidden_size=4096,
                             inter_size=1024, topk=8, num_experts=128, moe_tp_size=tp,
                             moe_ep_size=1, distribution="balanced", num_tokens=T, latency_s=y))  # fmt: skip
    return pd.DataFrame(recs)


def test_split_anomalies_flag_the_split_slower_than_its_half_parallel_twin():
    from dse.models.moe_splits import split_anomalies, twin_ratios

    bad = split_anomalies(_split_rows(slow_tp=2))
    rows = _split_rows(slow_tp=2)
    assert set(rows.loc[bad, "moe_tp_size"]) == {2} and bad.sum() == 3
    assert not split_anomalies(_split_rows(slow_tp=0)).any()  # every split halves: none flagged
    q = twin_ratios(_split_rows(slow_tp=0))
    assert np.isnan(q[:3]).all() and (q[3:] < 1.0).all()  # tp 1 has no twin; others are faster


def test_kernel_sum_base_recovers_its_constants():
    # synthetic work terms (s, bytes, FLOPs of H100-like magnitudes) timed by known constants
    rng = np.random.default_rng(0)
    n = 400
    terms = {
        "gemm_flops": 10 ** rng.uniform(8, 13, n),
        "weight_bytes": 10 ** rng.uniform(6, 10, n),
        "act_bytes": 10 ** rng.uniform(4, 9, n),
        "perm_bytes": 10 ** rng.uniform(4, 9, n),
        "logits": 10 ** rng.uniform(1, 7, n),
        "touched": rng.integers(1, 256, n).astype(float),
    }
    th = np.log([20.0, 0.6, 0.85, 0.5, 1.5, 30.0, 40.0])
    y = M._kernel_parts(th, terms, 989e12, 3.35e12)["base_s"]
    fit = M.fit_kernels(terms, y, 989e12, 3.35e12)
    np.testing.assert_allclose(fit.parts(terms)["base_s"], y, rtol=1e-3)
    np.testing.assert_allclose(np.exp(fit.theta)[:4], np.exp(th)[:4], rtol=0.05)
    # physical bounds: no efficiency above 1.5 of peak whatever the data
    fit_fast = M.fit_kernels(terms, y / 10.0, 989e12, 3.35e12)
    assert (np.exp(fit_fast.theta)[1:4] <= math.exp(0.4) + 1e-9).all()


@pytest.mark.slow
def test_physics_alone_when_the_residual_is_not_chosen(data_dir, monkeypatch):
    from dse.data import load

    t = load(data_dir, ["moe"])["moe"]
    rows = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "trtllm") & (t["dtype"] == "fp8_block")]
    monkeypatch.setattr(M, "RESIDUAL", "never")
    m = M.MoEModel("h100_sxm", "trtllm", "fp8_block", max_rows=1000, max_iter=5).fit(rows)
    p = m.predict(**M.moe_inputs(rows.iloc[:50]))
    np.testing.assert_array_equal(p["latency_s"], p["base_s"])
    assert isinstance(m.roof_, M.KernelSum) and not m.use_residual_


def _two_backends(n: int = 6) -> pd.DataFrame:
    ep = np.array([1.0, 1.0, 1.0, 2.0, 8.0, 64.0])[:n]
    src = np.where(ep == 1, "vllm_fp8moe_triton_tritonexperts", "vllm_fp8moe_flashinfer_cutlass_x")
    return pd.DataFrame({"moe_ep_size": ep, "kernel_source": src})


def test_backend_split_only_where_expert_parallelism_tells_the_backend():
    d = _two_backends()
    assert M.backend_split(d)
    assert not M.backend_split(d.assign(kernel_source="one"))  # one backend
    assert not M.backend_split(d[d["moe_ep_size"] == 1])  # no expert-parallel row
    mixed = d.copy()
    mixed.loc[0, "kernel_source"] = mixed.loc[5, "kernel_source"]  # ep 1 ran both
    assert not M.backend_split(mixed)
    assert not M.backend_split(d.drop(columns="kernel_source"))


@pytest.mark.slow
def test_each_backend_fitted_apart_and_a_row_priced_by_its_split(data_dir, monkeypatch):
    from dse.data import load

    t = load(data_dir, ["moe"])["moe"]
    rows = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "vllm") & (t["dtype"] == "fp8_block")]
    rows = rows[rows["hidden_size"] == 4096].reset_index(drop=True)  # 4 layouts, both backends
    monkeypatch.setattr(M, "RESIDUAL", "always")
    m = M.MoEModel("h100_sxm", "vllm", "fp8_block", max_rows=800, max_iter=5).fit(rows)
    assert set(m.parts_) == set(M.PARTS)
    assert m.power_mlp_ is None  # H100: no measured power (what the manifest records)
    for part in m.parts_.values():
        assert isinstance(part.roof_, M.KernelSum) and not part.parts_
    # each part saw its backend's rows only
    assert m.parts_["ep1"].fitted_range()["moe_ep_size"] == (1.0, 1.0)
    assert m.parts_["ep_many"].fitted_range()["moe_ep_size"][0] == 2.0
    assert m.fitted_range()["moe_ep_size"] == (1.0, float(rows["moe_ep_size"].max()))
    ins = M.moe_inputs(rows.iloc[::97])
    p = m.predict(**ins)
    ep1 = ins["moe_ep_size"] == 1
    assert ep1.any() and (~ep1).any()
    for name, sel in (("ep1", ep1), ("ep_many", ~ep1)):
        q = m.parts_[name].predict(**{k: v[sel] for k, v in ins.items()})
        for key in q:
            np.testing.assert_allclose(
                np.asarray(p[key])[sel], np.asarray(q[key]), rtol=ROW_RTOL, err_msg=key
            )
    # scalars broadcast (the same number up to float32 round-off: a one-row batch gets other
    # GEMM kernels than a block of rows, by CPU), and the state round trip is exact
    one = m.predict(**{k: v[0] for k, v in ins.items()})
    np.testing.assert_allclose(one["latency_s"], p["latency_s"][:1], rtol=ROW_RTOL)
    again = M.MoEModel.from_state(m.to_state())
    np.testing.assert_array_equal(again.predict(**ins)["latency_s"], p["latency_s"])
    assert again.to_state().keys() == m.to_state().keys()

"""Level 3: artifacts fitted before a structured term existed still load, as the same model."""

from __future__ import annotations

import numpy as np

from dse.models.level3 import TERMS, EngineFit, Level3, gqa_excess


def _model() -> Level3:
    m = Level3()
    theta = np.linspace(0.1, 1.3, len(TERMS))
    m.engines_ = {"vllm": EngineFit(theta, (), np.array([-0.1, 0.1]), 5.0)}
    m.range_ = {"batch": (1.0, 64.0)}
    return m


def test_state_without_a_later_term_loads_with_that_term_at_zero() -> None:
    st = _model().to_state()
    keep = [i for i, t in enumerate(TERMS) if t != "a_attn_gqa"]
    st["terms"] = np.array([TERMS[i] for i in keep])
    st["vllm.theta"] = st["vllm.theta"][keep]
    loaded = Level3.from_state(st)
    theta = loaded.engines_["vllm"].theta
    assert theta[TERMS.index("a_attn_gqa")] == 0.0
    np.testing.assert_array_equal(theta[keep], _model().engines_["vllm"].theta[keep])


def test_state_with_an_unknown_term_is_refused() -> None:
    import pytest

    from dse.errors import ArtifactError

    st = _model().to_state()
    st["terms"] = np.array([*TERMS[:-1], "a_mystery"])
    with pytest.raises(ArtifactError, match="re-fit"):
        Level3.from_state(st)


def test_gqa_excess_is_zero_for_multi_head_attention() -> None:
    from dse.models.level3 import GlobalInputs

    n = 3
    ones = np.ones(n)
    g = GlobalInputs(
        **{k: ones for k in GlobalInputs.__dataclass_fields__ if k not in ("engine", "gqa")},
        engine=np.array(["vllm"] * n),
        gqa=np.array([1.0, 4.0, 8.0]),
    )
    np.testing.assert_array_equal(gqa_excess(g), [0.0, 3.0, 7.0])


def test_ttft_rows_attach_to_their_end_to_end_run_only() -> None:
    import pandas as pd

    from dse.fitting.e2e_rows import ttft_of_runs

    run = dict(gpu="h100_sxm", engine="vllm", model="m", n_gpus=1)
    kept = pd.DataFrame(
        [
            dict(run, batch_size=16, input_tokens=1024, output_tokens=1024),  # the Fig. 22 run
            dict(run, batch_size=16, input_tokens=1024, output_tokens=1024),  # measured twice
            dict(run, batch_size=32, input_tokens=1024, output_tokens=1024),  # other batch
            dict(run, batch_size=16, input_tokens=1024, output_tokens=128),  # other run
            dict(run, engine="trtllm", batch_size=16, input_tokens=1024, output_tokens=1024),
        ]
    )
    ttft = pd.DataFrame([dict(run, batch_size=16, input_tokens=1024, latency_s=0.42)])
    got = ttft_of_runs(kept, ttft)
    np.testing.assert_array_equal(got, [0.42, 0.42, np.nan, np.nan, np.nan])
    assert np.isnan(ttft_of_runs(kept, None)).all()


def test_measured_ttft_moves_the_prefill_factor_and_is_scored_held_out() -> None:
    from dse.predict.request import base_costs, global_inputs
    from dse.spec import columns as C
    from dse.spec.hardware import get_gpu

    rows = []
    groups = []
    for name, kv in (("a", 8), ("b", 32), ("c", 16)):
        for b in (1, 16, 64):
            for s in (128, 1024):
                rows.append(
                    dict(
                        d_model=4096,
                        n_layers=32,
                        n_heads=32,
                        n_kv_heads=kv,
                        d_ff=14336,
                        batch_size=b,
                        prompt_tokens=s,
                        output_tokens=s,
                        gpu="h100_sxm",
                        engine="vllm",
                    )
                )
                groups.append(name)
    import pandas as pd

    cols, n = C.as_columns(pd.DataFrame(rows))
    g = global_inputs(cols, base_costs(cols, n, get_gpu("h100_sxm"), None))
    groups_a = np.array(groups)
    latency = g.t_pre_s + g.t_dec_s
    # Measured TTFT twice the kernel prefill, total latency as the kernels say: only the TTFT
    # rows can tell Level 3 that prefill is slow and decode correspondingly fast.
    ttft = np.where(g.value("batch") == 16, 2.0 * g.t_pre_s, np.nan)
    plain = Level3(use_mlp=False).fit(g, latency, groups_a)
    with_t = Level3(use_mlp=False, ttft_weight=3.0).fit(g, latency, groups_a, ttft)
    p0, p1 = plain.correct(g)["ttft_s"], with_t.correct(g)["ttft_s"]
    has = np.isfinite(ttft)
    assert np.mean(np.abs(p1[has] / ttft[has] - 1)) < np.mean(np.abs(p0[has] / ttft[has] - 1))
    cv = with_t.cv_["vllm"]
    assert cv["ttft_rows"] == int(has.sum())
    assert np.isfinite(cv["held_out_ttft_s"]).all() and cv["ttft_mape_pct"] >= 0


def test_validate_scores_fig22_ttft_rows(data_dir) -> None:  # type: ignore[no-untyped-def]
    from dse.data import load
    from dse.fitting.level3 import _family_predict_rows
    from dse.predict import load_artifact

    art, _ = load_artifact("h100_sxm")
    if art is None:
        import pytest

        pytest.skip("no shipped h100_sxm artifact")
    rows = load(data_dir, ["e2e_ttft"])["e2e_ttft"]
    rows = rows[rows["gpu"] == "h100_sxm"]
    got = _family_predict_rows(art, "e2e_ttft", rows)
    pred = got["latency_pred_s"].to_numpy(float)
    assert np.isfinite(pred).all()
    # A TTFT, not a whole batch: within a factor 2 of the measured first token, far below
    # the end-to-end latency of the same run.
    ratio = pred / rows["latency_s"].to_numpy()
    assert ((ratio > 0.5) & (ratio < 2.0)).all()
    assert (pred < 0.2 * rows["end_latency_s"].to_numpy()).all()


def test_trtllm_argonne_moe_decode_is_priced_as_one_sequence_per_step() -> None:
    """argonne's TensorRT-LLM batches are copies of one prompt decoded greedily: every
    sequence routes to the same experts, so a decode step reads top_k experts, not ~all."""
    import pandas as pd

    from dse.fitting.e2e_rows import e2e_configs, price_rows

    rows = pd.DataFrame(
        {
            "model": ["mistralai/Mixtral-8x7B-v0.1"] * 3 + ["meta-llama/Meta-Llama-3-8B"] * 2,
            "gpu": "h100_sxm",
            "engine": ["trtllm", "vllm", "trtllm", "trtllm", "vllm"],
            "batch_size": [32, 32, 1, 32, 32],
            "input_tokens": 256,
            "output_tokens": 256,
            "n_gpus": [4, 4, 4, 1, 1],
        }
    )
    cfg, kept = e2e_configs(rows)
    assert len(kept) == 5
    g, _ = price_rows(cfg, None, "h100_sxm")  # roofline kernels: fast, same structure
    dec = g.t_dec_s
    # The Mixtral TensorRT-LLM batch decodes far faster than the vLLM one (independent routing)
    # and not much slower than one sequence; a dense model is priced alike on both engines.
    assert dec[0] < 0.6 * dec[1]
    assert dec[0] < 1.5 * dec[2]
    np.testing.assert_allclose(dec[3], dec[4], rtol=1e-9)


def test_the_residual_mlp_leaves_kv_overflow_rows_to_the_structured_stage() -> None:
    from dse.models.level3 import GlobalInputs, _structured

    rng = np.random.default_rng(0)
    n = 40
    t_pre = rng.uniform(0.1, 1.0, n)
    t_dec = rng.uniform(1.0, 10.0, n)
    fill = np.where(np.arange(n) < 30, rng.uniform(0.1, 0.9, n), rng.uniform(1.5, 3.0, n))
    g = GlobalInputs(
        engine=np.array(["vllm"] * n),
        t_pre_s=t_pre,
        t_dec_s=t_dec,
        t_dec_attn_s=0.2 * t_dec,
        t_pre_roof_s=0.8 * t_pre,
        t_dec_roof_s=0.8 * t_dec,
        t_dec_attn_roof_s=0.15 * t_dec,
        t_dec_comm_roof_s=np.zeros(n),
        t_dec_comm_s=np.zeros(n),
        steps=np.full(n, 255.0),
        batch=rng.choice([1.0, 16.0, 64.0], n),
        prompt=np.full(n, 256.0),
        output=np.full(n, 256.0),
        n_layers=np.full(n, 32.0),
        d_model=np.full(n, 4096.0),
        tp=np.ones(n),
        n_experts=np.ones(n),
        gqa=np.ones(n),
        kv_fill=fill,
        waves=np.where(fill > 1, np.ceil(fill), 1.0),
    )
    # A residual that depends on the batch, which the structured stage cannot express.
    y = (t_pre + t_dec) * np.exp(0.2 * np.log(g.batch) / np.log(64.0))
    m = Level3(n_ensemble=2).fit(g, y, np.array(["a", "b"] * (n // 2)))
    out = m.correct(g)
    theta = m.engines_["vllm"].theta
    ttft_s, dec_s = _structured(theta, g)
    over = fill > 1
    np.testing.assert_allclose(out["ttft_s"][over] + out["decode_s"][over], (ttft_s + dec_s)[over])
    assert not np.allclose(out["decode_s"][~over], dec_s[~over])


def test_an_unphysical_power_calibration_falls_back_to_the_power_model() -> None:
    from dse.models.level3_power import IDENTITY, Power3

    u = np.array([0.30, 0.35, 0.40, 0.45, 0.50, 0.55])
    batch = np.array([1.0, 16.0, 64.0, 1.0, 16.0, 64.0])
    falling = 0.9 - u  # measured power falls as the modelled power rises: not a calibration
    pw = Power3().fit(u, batch, falling, batch)
    np.testing.assert_array_equal(pw.coef_, IDENTITY)
    assert not pw.calibrated_
    np.testing.assert_allclose(pw.held_out_, u)
    rising = 0.1 + 0.8 * u
    pw = Power3().fit(u, batch, rising, batch)
    assert pw.calibrated_ and pw.coef_[1] > 0
    np.testing.assert_allclose(pw.held_out_, rising, atol=1e-2)


def _protocol_rows(c: float) -> tuple[np.ndarray, ...]:
    """Two models x batch 1-64 x two protocols; independent sequences draw c log2(b)/6 more."""
    batch = np.tile(np.repeat([1.0, 16.0, 32.0, 64.0], 2), 2)
    identical = np.tile([True, False], 8)
    model = np.repeat(["m1", "m2"], 8)
    u = 0.3 + 0.02 * np.log2(batch) + np.where(model == "m2", 0.05, 0.0)
    y = u + c * np.log2(batch) / 6.0 * ~identical
    keys = np.char.add(model, batch.astype(int).astype(str))
    return u, batch, y, identical, model, keys


def test_independent_sequence_power_term_is_fitted_on_pairs_and_held_out() -> None:
    from dse.models.level3_power import IDENTITY, Power3, fit_protocol
    from dse.spec.hardware import get_gpu

    u, batch, y, identical, model, keys = _protocol_rows(0.2)
    assert np.isclose(fit_protocol(y - u, batch, identical, keys), 0.2)
    # No pair measured both ways: no term. Independent drawing less: clipped at 0.
    assert fit_protocol(y - u, batch, identical, np.arange(len(u))) == 0.0
    assert fit_protocol(u - y, batch, identical, keys) == 0.0
    pw = Power3().fit(u, batch, y, model, identical=identical, pair_keys=keys)
    assert np.isclose(pw.protocol_, 0.2)
    np.testing.assert_allclose(pw.coef_, IDENTITY, atol=0.1)  # ridge-shrunk identity
    # Held out by model: each model's term from the other model's pairs (both show c = 0.2).
    gap = pw.held_out_[~identical] - pw.held_out_[identical]
    np.testing.assert_allclose(gap, 0.2 * np.log2(batch[identical]) / 6.0, atol=1e-9)
    gpu = get_gpu("h100_sxm")
    p_model = np.full(4, 400.0)
    b = np.array([1.0, 16.0, 32.0, 64.0])
    ind, ide = pw.power_w(p_model, b, gpu), pw.power_w(p_model, b, gpu, identical=True)
    assert ind[0] == ide[0] and np.all(np.diff(ind - ide) > 0)
    np.testing.assert_allclose(pw.as_identical(ind, b, gpu), ide)
    # A c given from elsewhere (another GPU's rows) is used as it is.
    fixed = Power3().fit(u, batch, y, model, identical, keys, protocol=0.05)
    assert fixed.protocol_ == 0.05


def test_power_state_without_the_protocol_term_loads_as_before() -> None:
    from dse.models.level3_power import Power3
    from dse.spec.hardware import get_gpu

    u, batch, y, identical, model, keys = _protocol_rows(0.2)
    pw = Power3().fit(u, batch, y, model, identical=identical, pair_keys=keys)
    state = pw.to_state()
    again = Power3.from_state(state)
    assert again.protocol_ == pw.protocol_
    old = Power3.from_state({k: v for k, v in state.items() if k != "protocol"})
    gpu = get_gpu("a100_sxm")
    p = np.array([250.0, 300.0])
    b = np.array([1.0, 64.0])
    assert old.protocol_ == 0.0
    np.testing.assert_allclose(old.power_w(p, b, gpu), old.power_w(p, b, gpu, identical=True))


def test_as_identical_takes_the_independent_sequence_term_out_and_nothing_else() -> None:
    """dse validate prices argonne's TensorRT-LLM power rows (copies of one prompt) without the
    independent-sequence term; at batch 1 the term is zero, and a power without it is lower."""
    from dse.models.level3_power import Power3, protocol_x
    from dse.spec.hardware import get_gpu

    gpu = get_gpu("h100_sxm")
    pw = Power3()
    pw.coef_ = np.zeros(3)
    pw.protocol_ = 0.2
    batch = np.array([1.0, 16.0, 64.0])
    span = gpu.board_power_w - gpu.idle_power_w
    p = gpu.idle_power_w + 0.5 * span * np.ones(3)
    out = pw.as_identical(p, batch, gpu)
    assert out[0] == p[0]
    np.testing.assert_allclose(p - out, 0.2 * protocol_x(batch) * span)
    assert out[2] < out[1] < p[1]


def test_runs_beyond_the_model_context_are_not_priced() -> None:
    """A 2048 + 2048-token run of a 2048-context model cannot have decoded its tokens (argonne's
    end after prefill): e2e_configs drops it, and keeps the same length for a longer context."""
    import pandas as pd

    from dse.fitting.e2e_rows import beyond_context, e2e_configs
    from dse.spec.catalogue import context_tokens

    assert context_tokens("huggyllama/llama-7b") == 2048
    assert context_tokens("meta-llama/Llama-2-7b-hf") == 4096
    assert context_tokens("no-such/model") is None
    rows = pd.DataFrame(
        {
            "model": ["huggyllama/llama-7b", "huggyllama/llama-7b", "meta-llama/Llama-2-7b-hf"],
            "gpu": "h100_sxm",
            "engine": "vllm",
            "batch_size": 16,
            "input_tokens": [2048, 1024, 2048],
            "output_tokens": [2048, 1024, 2048],
            "n_gpus": 1,
        }
    )
    assert beyond_context(rows).tolist() == [True, False, False]
    cfg, kept = e2e_configs(rows)
    assert kept["input_tokens"].tolist() == [1024, 2048]
    assert len(cfg) == 2


def test_gh200_has_its_own_level3_over_h200_kernels() -> None:
    """GH200 has end-to-end rows but no kernel tables: its artifact carries H200's Level-1 and
    Level-2 models (manifest level1_gpu, times moved to GH200's bandwidth by the roofline)
    under a Level 3 fitted on GH200's own rows, and the power calibration H200 uses (H100's
    rows). Its Levels 1-2 price a configuration exactly as the h200_sxm artifact does."""
    import pytest

    from dse.predict import load_artifact
    from dse.predict.request import base_costs
    from dse.spec import columns as C
    from dse.spec.hardware import get_gpu

    art, level1 = load_artifact("gh200")
    h200, _ = load_artifact("h200_sxm")
    if art is None or h200 is None or art.gpu != "gh200":
        pytest.skip("no shipped gh200 / h200_sxm artifact")
    assert level1 == art.level1_gpu == "h200_sxm"
    assert art.manifest["models"]["level3.e2e"]["rows_from_gpus"] == ["gh200"]
    assert art.manifest["models"]["level3.power"]["rows_from_gpus"] == ["h100_sxm"]
    for name in h200.names():
        if not name.startswith("level3."):
            assert name in art.names(), name
    cfg = {"d_model": [4096], "n_layers": [32], "n_heads": [32], "n_kv_heads": [8],
           "d_ff": [14336], "batch_size": [16], "prompt_tokens": [1024],
           "output_tokens": [128], "gpu": ["gh200"]}  # fmt: skip
    cols, n = C.as_columns(cfg)
    gh = get_gpu("gh200")
    own = base_costs(cols, n, gh, art, get_gpu(level1))
    lent = base_costs(cols, n, gh, h200, get_gpu("h200_sxm"))
    for phase in ("prefill", "decode"):
        a, b = getattr(own, phase), getattr(lent, phase)
        np.testing.assert_allclose(a.time_s, b.time_s, rtol=1e-9)
    # ... and not as if H200's kernels ran at H200's bandwidth on GH200
    unmoved = base_costs(cols, n, gh, art, gh)
    assert unmoved.decode.time_s[0] < 0.95 * own.decode.time_s[0]


def test_rows_dot_gives_a_row_its_value_in_any_batch() -> None:
    """Level 3's linear stage sums each row on its own, so a row's value does not depend on how
    many rows come with it (to rounding: 1e-13 relative, where a wrong column or weight moves
    it by far more)."""
    from dse.models.level3 import _rows_dot

    rng = np.random.default_rng(0)
    X = rng.lognormal(0.0, 3.0, (1000, 13))
    w = rng.normal(0.0, 1.0, 13)
    whole = _rows_dot(X, w)
    scale = np.abs(X) @ np.abs(w)  # the size of the terms: a sum may cancel to near 0
    for i in (0, 1, 499, 999):
        assert abs(_rows_dot(X[i : i + 1], w)[0] - whole[i]) <= 1e-13 * scale[i]
    np.testing.assert_allclose(whole, X @ w, rtol=1e-9, atol=1e-12 * scale.max())

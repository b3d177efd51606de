"""The few-row paths of issue 18's small calls compute what the general paths compute: the
ensemble run as one block-diagonal network (`dse.models._nn._StackedMembers`), the roofline
of a small batch's operators in one pass (`dse.predict.pricing.roofline_times`), Level 3's
linear stage and a row's independence from its batch; the one-row rules (range misses, the
inside test, field checks) and the operators' run masks."""

from __future__ import annotations

import numpy as np
import pytest

from dse.errors import ArtifactError
from dse.models._nn import STACK_MEMBERS_ROWS, MeanMLP
from dse.models.base import range_miss, within
from dse.predict import load_artifact, predict
from dse.predict.ops import forward_ops
from dse.predict.pricing import op_runs, roofline_op, roofline_times
from dse.predict.stacking import STACK_AT_MOST
from dse.spec import columns as C
from dse.spec.hardware import get_gpu
from tests.predict.test_golden_small import golden_configs

# float32 products in another blocking: ~1e-7 of a log factor; a wrong member, weight block
# or scaler moves it by 1e-2 or more
LOG_ATOL = 2e-6


def _ensembles() -> list[tuple[str, MeanMLP]]:
    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("no shipped h100_sxm artifact")
    out = []
    for name in art.names():
        mlp = getattr(art.model(name), "mlp_", None)
        if isinstance(mlp, MeanMLP):
            out.append((name, mlp))
    assert out, "the shipped artifact has ensembles"
    return out


@pytest.mark.parametrize("n", [1, 7, 16, 17, STACK_MEMBERS_ROWS])
def test_stacked_members_give_each_members_own_prediction(n: int) -> None:
    rng = np.random.default_rng(n)
    for name, mlp in _ensembles():
        X = rng.normal(0.0, 2.0, (n, mlp.n_features))
        each = np.stack([m.predict(X) for m in mlp.members], axis=1)  # the members' own passes
        np.testing.assert_allclose(mlp.predict(X), each.mean(axis=1), atol=LOG_ATOL, err_msg=name)
        member = rng.integers(0, len(mlp.members), n)
        np.testing.assert_allclose(
            mlp.predict_member(X, member), each[np.arange(n), member], atol=LOG_ATOL, err_msg=name
        )


def test_stacked_members_give_a_row_its_value_in_any_batch() -> None:
    """A row predicted alone and among others of a small batch: the same value, to float32
    round-off (which BLAS kernel a CPU picks for the padded blocks is not ours to promise)."""
    rng = np.random.default_rng(3)
    for name, mlp in _ensembles():
        X = rng.normal(0.0, 2.0, (STACK_MEMBERS_ROWS, mlp.n_features))
        whole = mlp.predict(X)
        for i in (0, 5, STACK_MEMBERS_ROWS - 1):
            assert abs(mlp.predict(X[i : i + 1])[0] - whole[i]) <= LOG_ATOL, name


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm", "a100_sxm"])
def test_roofline_of_a_small_batch_in_one_pass_equals_each_operators(gpu: str) -> None:
    cfg = golden_configs()
    raw = {k: v[:40] for k, v in cfg.items()}
    raw["weight_dtype"] = np.where(np.arange(40) % 3 == 0, "fp8", "bfloat16")  # fp8 peaks too
    cols, _ = C.as_columns(raw)
    g = get_gpu(gpu)
    for phase in ("prefill", "decode"):
        ops = forward_ops(cols, phase)
        for t, op in zip(roofline_times(ops, g), ops, strict=True):
            np.testing.assert_array_equal(t, roofline_op(op, g)[0], err_msg=f"{phase} {op.name}")


def test_one_row_predicts_as_in_a_batch() -> None:
    """A configuration alone (the few-row paths) and in a batch of 200 (the general paths)."""
    cfg = golden_configs()
    cols = {k: v[:200] for k, v in cfg.items()}
    whole = predict(cols)
    for i in (0, 17, 123, 199):
        one = predict({k: v[i : i + 1] for k, v in cols.items()})
        for k in ("latency_s", "ttft_s", "tpot_s", "energy_j"):
            np.testing.assert_allclose(one[k][0], whole[k][i], rtol=1e-6, err_msg=f"{i} {k}")
        assert one["out_of_range"][0] == whole["out_of_range"][i]
        assert one["roofline_ops"][0] == whole["roofline_ops"][i]


def test_one_row_gives_every_output_of_a_batch() -> None:
    """Every column a prediction returns (times, energies, bands, out-of-range degree and text,
    breakdowns, provenance) equals, for one configuration alone (the few-row paths: stacked
    operators, one-row range checks, (operators, n) matrices), what the general paths of a
    batch of 200 give it; configurations of every kind in the golden set (MoE, tensor parallel,
    fp8, out of range). The out-of-range text is compared as the misses it lists: misses equal
    over a whole batch share one label there (`flags._merged`), so its grouping depends on the
    batch."""
    cfg = golden_configs()
    cols = {k: v[:200] for k, v in cfg.items()}
    whole = predict(cols)
    assert whole["out_of_range"].any() and not whole["out_of_range"].all()
    for i in range(0, 200, 9):
        one = predict({k: v[i : i + 1] for k, v in cols.items()})
        assert set(one) == set(whole)
        for k, v in whole.items():
            if k == "out_of_range_inputs":  # misses shared batch-wide are merged batch-wide
                assert _miss_facts(one[k][0]) == _miss_facts(v[i]), f"{i}: {one[k][0]!r}"
            elif v.dtype.kind == "f":
                np.testing.assert_allclose(
                    one[k][0], v[i], rtol=1e-6, atol=1e-12, err_msg=f"{i} {k}"
                )
            else:
                assert one[k][0] == v[i], f"{i} {k}: {one[k][0]!r} != {v[i]!r}"


def _miss_facts(text: str) -> set[tuple[str, str, str]]:
    """(phase, part, miss) of every miss an out_of_range_inputs text lists, labels that name
    several phases or parts ('prefill+decode a, b: width ...') expanded."""
    facts = set()
    for item in filter(None, text.split("; ")):
        head, _, miss = item.partition(": ")
        phases, _, parts = head.partition(" ")
        for phase in phases.split("+"):
            for part in parts.split(", ") if parts else [""]:
                facts.add((phase, part, miss))
    return facts


@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("lo, hi", [(1.0, 100.0), (0.0, 5.0), (-1.0, 0.0), (64.0, 64.0)])
def test_range_miss_of_one_value_equals_the_vectorised_rule(
    lo: float, hi: float, linear: bool
) -> None:
    rng = np.random.default_rng(5)
    values = np.concatenate(
        [rng.uniform(-10.0, 300.0, 100), [lo, hi, lo * 0.995, hi * 1.005, 0.0, np.nan]]
    )
    many = range_miss(values, lo, hi, linear)
    for i, x in enumerate(values):
        one = range_miss(np.array([x]), lo, hi, linear)
        got, want = (one.excess, one.value, one.bound), (many.excess, many.value, many.bound)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b[i : i + 1], rtol=1e-12, equal_nan=True, err_msg=str(x))


def test_within_is_inside_for_one_value_and_many() -> None:
    for v, expect in (
        ([3.0], True),
        ([0.5], False),
        ([np.nan], False),
        ([1.0, 10.0], True),
        ([1.0, 10.5], False),
        ([1.0, np.nan], False),
        ([], False),
    ):
        assert within(np.array(v, dtype=float), 1.0, 10.0) is expect, v


def test_op_runs_of_a_few_rows_and_of_many_agree() -> None:
    cfg = golden_configs()
    for n in (1, 40, STACK_AT_MOST + 1):
        cols, _ = C.as_columns({k: v[:n] for k, v in cfg.items()})
        ops = forward_ops(cols, "prefill")
        runs = op_runs(ops, n)
        for j, op in enumerate(ops):
            np.testing.assert_array_equal(np.broadcast_to(runs.mask[j], (n,)), op.count > 0)
            assert runs.every[j] == bool((op.count > 0).all())
            assert runs.some[j] == bool((op.count > 0).any())


@pytest.mark.parametrize(
    "name, value", [("n_layers", 32), ("n_layers", 0), ("weight_dtype", "fp3"), ("gated_mlp", 2)]
)
def test_one_value_field_check_says_what_the_array_rule_says(name: str, value: object) -> None:
    """`check` of a one-element column (its fast path) and of the same value in a longer one:
    the same typed value, or the same message (without the index a longer column adds)."""
    from dse.errors import ConfigError
    from dse.spec.fields import check

    try:
        many = check(name, np.array([value, value]), "x")
    except ConfigError as e:
        with pytest.raises(ConfigError) as one:
            check(name, np.array([value]), "x")
        assert str(one.value) == str(e).replace("x[0]", "x")
    else:
        one = check(name, np.array([value]), "x")
        assert one.dtype == many.dtype and one[0] == many[0]


def test_idle_moe_operators_of_a_dense_batch_match_the_sized_ones() -> None:
    """A batch without MoE layers gets the MoE operators with zero sizes (`_idle_moe_ops`):
    the same names, kinds, blocks and dimension names as the sized ones, which run nowhere."""
    from dse.predict import ops as O

    cfg = golden_configs()
    cols, _ = C.as_columns({k: v[:200] for k, v in cfg.items()})
    dense = {k: v[cols["n_experts"] <= 1] for k, v in cols.items()}
    assert len(dense["n_experts"]) > 0
    for phase in ("prefill", "decode"):
        sh = O.LayerShapes.of(dense, phase)
        fam = O._Families.of(dense, sh)
        c = O.OpCounts(dense, sh.L, sh.tp, sh.moe, fam)
        idle, sized = O._idle_moe_ops(sh, c), O._moe_ops_sized(sh, dense, c)
        for a, b in zip(idle, sized, strict=True):
            assert (a.name, a.kind, a.block, list(a.dims)) == (
                b.name,
                b.kind,
                b.block,
                list(b.dims),
            )
            assert not (b.count > 0).any() and not (a.count > 0).any()


def test_layer_op_family_of_a_few_rows_equals_the_vectorised_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`LayerOpModel._row_key_index` row by row (few rows) and by operator (many): the same
    coefficient row for every operator, gated or not, and -1 for one the model lacks."""
    from dse.models import layer_ops as L

    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("no shipped h100_sxm artifact")
    model = art.model(art.names("layer_op")[0])
    names = ["input_layernorm", "post_attention_layernorm", "add", "attn_rope", "mlp_act", "emb"]
    ops = np.array([*names, "no_such_op"] * 3)
    rng = np.random.default_rng(11)
    for _ in range(20):
        rows = rng.permutation(len(ops))[: rng.integers(1, len(ops))]
        gated = rng.random(len(rows)) < 0.5
        few = model._row_key_index(ops[rows], gated)
        with monkeypatch.context() as m:
            m.setattr(L, "FEW_ROWS", 0)
            many = model._row_key_index(ops[rows], gated)
        np.testing.assert_array_equal(few, many)
        assert (few[ops[rows] == "no_such_op"] == -1).all()


@pytest.mark.parametrize("wave_steps", [False, True])
def test_level2_gemm_inputs_of_a_few_rows_equal_the_vectorised_rule(
    wave_steps: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`level2.gemm_inputs` of a few rows (Python floats) against the (n, 2)-array rule: the
    same arithmetic; math's exp2 / log may differ from numpy's in the last bits only."""
    from dse.models import level2

    rng = np.random.default_rng(41)
    for n in (1, 2, level2.FEW_ROWS):
        X = np.column_stack(
            [
                rng.uniform(-14.0, -3.0, (n, 3)),  # log seconds of the three operators
                np.log2(rng.integers(1, 1 << 17, (n, 1))),  # tokens
                np.log2(rng.integers(64, 1 << 16, (n, 4))),  # the GEMMs' n, k
                np.full((n, 1), np.log(9.9e14)),
                np.full((n, 1), np.log(3.35e12)),
                np.full((n, 1), 132.0),
            ]
        )
        few = level2.gemm_inputs(X, wave_steps)
        monkeypatch.setattr(level2, "FEW_ROWS", 0)  # the vectorised rule
        every = level2.gemm_inputs(X, wave_steps)
        monkeypatch.undo()
        for a, b in zip(few, every, strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rows", [False, True])
def test_dedupe_of_a_few_rows_equals_the_general_path(
    rows: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_rows.dedupe` of a few (n,) columns (no shape broadcasting) gives what its general
    path gives: the same call, the same outputs and shapes."""
    from dse.predict import _rows

    rng = np.random.default_rng(47)
    a = rng.integers(1, 9, 5)
    b = rng.integers(1, 9, 10)[::2]  # a strided view

    def fn(*args: np.ndarray) -> dict[str, np.ndarray]:
        *idx, x, y = args
        out = {"s": x * 3.0 + y, "p": (x * y).astype(float)}
        return {**out, "i": idx[0] * 1.0} if idx else out

    few = _rows.dedupe(fn, a, b, rows=rows)
    monkeypatch.setattr(_rows, "_few_rows_of", lambda cols: None)
    general = _rows.dedupe(fn, a, b, rows=rows)
    assert few.keys() == general.keys()
    for k in few:
        assert few[k].shape == general[k].shape == (5,)
        np.testing.assert_array_equal(few[k], general[k])


def test_unique_float_rows_by_part_of_small_parts_is_none() -> None:
    """Parts too small to deduplicate (a few configurations' Level-2 rows) give None, as the
    part-by-part loop does, also when their rows repeat."""
    from dse.predict._rows import DEDUPE_MIN_ROWS, unique_float_rows, unique_float_rows_by_part

    X = np.ones((2 * (DEDUPE_MIN_ROWS - 1), 3))
    assert unique_float_rows(X[: DEDUPE_MIN_ROWS - 1]) is None
    assert unique_float_rows_by_part(X, [DEDUPE_MIN_ROWS - 1] * 2) is None
    assert unique_float_rows_by_part(X, [1, 1]) is None
    big = np.ones((DEDUPE_MIN_ROWS, 3))
    assert unique_float_rows_by_part(big, [DEDUPE_MIN_ROWS]) is not None


def test_level2_token_blocks_of_a_few_rows_equal_the_vectorised_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Level2Block.in_token_blocks` of a few rows (the Python test of tokens above the fitted
    range) against the numpy rule, for rows inside and outside the range."""
    from dse.models import level2

    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("no shipped h100_sxm artifact")
    model = next(art.model(n) for n in art.names() if isinstance(art.model(n), level2.Level2Block))
    hi = model.range_["log2_tokens"][1]
    rng = np.random.default_rng(53)
    for tokens in ([hi - 3.0], [hi - 1.0, hi + 2.5], [hi + 0.5] * level2.FEW_ROWS):
        X = rng.normal(0.0, 1.0, (len(tokens), len(level2.LEVEL2_FEATURES)))
        X[:, 3] = tokens
        few = model.in_token_blocks(X)
        monkeypatch.setattr(level2, "FEW_ROWS", 0)
        every = model.in_token_blocks(X)
        monkeypatch.undo()
        np.testing.assert_array_equal(few, every)
        assert (few is X) == (every is X)


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_gemm_latency_power_is_predicts_latency_and_power(gpu: str) -> None:
    """`GemmModel.latency_power` (what the pricer asks for) is `predict`'s latency_s and
    power_w bit for bit, for every shipped GEMM model, one row and many, in and out of range."""
    art, _ = load_artifact(gpu)
    if art is None:
        pytest.skip(f"no shipped {gpu} artifact")
    rng = np.random.default_rng(59)
    names = art.names("gemm")
    assert names
    for name in names:
        model = art.model(name)
        for n in (1, 20, 300):
            m, nn, k = (rng.integers(1, 1 << 17, n).astype(float) for _ in range(3))
            full = model.predict(m, nn, k)
            lean = model.latency_power(m, nn, k)
            assert lean.keys() == {"latency_s", "power_w"}
            for key, v in lean.items():
                assert v.shape == full[key].shape
                np.testing.assert_array_equal(v, full[key], err_msg=f"{name} {key}")
        one = model.latency_power(4096.0, 4096.0, 512.0)
        assert one["latency_s"].shape == model.predict(4096.0, 4096.0, 512.0)["latency_s"].shape


@pytest.mark.parametrize("gpu", ["h100_sxm", "a100_sxm"])
def test_allreduce_of_a_few_messages_equals_a_large_batch(gpu: str) -> None:
    """The all-reduce model's few-row paths (the neighbour pairs by a Python set, one pair or
    one regime without masks) against the same rows inside a batch of many group sizes and
    regimes (np.unique, masks); `latency` is predict's latency_s bit for bit."""
    art, _ = load_artifact(gpu)
    if art is None:
        pytest.skip(f"no shipped {gpu} artifact")
    rng = np.random.default_rng(61)
    names = art.names("allreduce")
    assert names
    n = 300
    b = np.exp2(rng.uniform(8.0, 33.0, n)).round()
    g = rng.choice([1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0], n)
    for name in names:
        model = art.model(name)
        batch = model.predict(message_bytes=b, n_gpus=g)
        np.testing.assert_array_equal(
            model.latency(message_bytes=b, n_gpus=g)["latency_s"], batch["latency_s"]
        )
        for rows in ([0], [1, 2], list(range(3, 12))):
            few = model.predict(message_bytes=b[rows], n_gpus=g[rows])
            for key, v in few.items():
                np.testing.assert_allclose(
                    v, batch[key][rows], rtol=1e-12, atol=0.0, err_msg=f"{name} {key}"
                )
            lat = model.latency(message_bytes=b[rows], n_gpus=g[rows])["latency_s"]
            np.testing.assert_array_equal(lat, few["latency_s"])


def test_shared_gemm_choice_is_a_fresh_ones_and_follows_the_model_table() -> None:
    """`Gemm.shared` (the pricer's, one per artifact, its choices kept) chooses what a fresh
    `Gemm.for_artifact` chooses, and is rebuilt when the artifact's model table changes."""
    import copy

    from dse.predict.gemm_choice import Gemm

    for gpu in ("h100_sxm", "h200_sxm"):
        art, _ = load_artifact(gpu)
        if art is None:
            pytest.skip(f"no shipped {gpu} artifact")
        shared = Gemm.shared(art)
        assert Gemm.shared(art) is shared
        fresh = Gemm.for_artifact(art)
        for dtype in ("bfloat16", "fp8", "fp8_e4m3"):
            for engine in (None, "vllm", "sglang", "trtllm"):
                try:
                    want = fresh.choose(dtype, engine)
                except ArtifactError as exc:  # the same error both ways
                    with pytest.raises(type(exc)):
                        shared.choose(dtype, engine)
                    continue
                assert shared.choose(dtype, engine) == want
                assert shared.choose(dtype, engine) == want  # kept
        other = copy.copy(art)
        other.manifest = {**art.manifest, "models": dict(art.manifest["models"])}
        assert Gemm.shared(other) is not shared
        assert Gemm.shared(other).artifact is other


@pytest.mark.parametrize(("gpu", "engine"), [("h100_sxm", None), ("h100_sxm", "sglang")])
def test_allreduce_price_of_rows_one_model_covers_equals_a_mixed_batch(
    gpu: str, engine: str | None
) -> None:
    """`price_allreduce` of a few messages that one model covers (the rows as a slice, the
    ranking kept per artifact and engine) against the same messages in a batch whose other
    messages go to other models (boolean masks): the same latency, model and range check."""
    from dse.predict.adapters import price_allreduce
    from dse.predict.ops import Op

    art, _ = load_artifact(gpu)
    if art is None:
        pytest.skip(f"no shipped {gpu} artifact")
    hw = get_gpu(gpu)
    few = np.array([8192.0 * 2, 4096.0 * 8192 * 2])  # a decode step's and a prefill's message
    many = np.concatenate([few, [1e3, 3e9, 5e5, 2.0**31]])
    tp = np.array([2.0, 4.0, 2.0, 8.0, 4.0, 2.0])

    def op(msg: np.ndarray, g: np.ndarray) -> Op:
        dims = {"message_bytes": msg, "n_gpus": g}
        return Op("allreduce", "allreduce", "allreduce", np.ones_like(msg), 0 * msg, msg, dims)

    ctx = {"engine": engine}
    alone = price_allreduce(art, op(few, tp[:2]), hw, ctx)
    mixed = price_allreduce(art, op(many, tp), hw, ctx)
    assert alone is not None and mixed is not None
    np.testing.assert_allclose(alone.latency_s, mixed.latency_s[:2], rtol=1e-12, atol=0.0)
    np.testing.assert_allclose(alone.power_w, mixed.power_w[:2], rtol=1e-6)
    np.testing.assert_array_equal(alone.out_of_range, mixed.out_of_range[:2])
    which = np.zeros(2, dtype=int) if mixed.model_rows is None else mixed.model_rows[:2]
    assert {mixed.model.split("+")[i] for i in which} == {alone.model}
    for key, m in alone.misses.items():
        np.testing.assert_array_equal(m.outside, mixed.misses[key].outside[:2])
    assert price_allreduce(art, op(few, tp[:2]), hw, ctx).latency_s.tolist() == (
        alone.latency_s.tolist()
    )

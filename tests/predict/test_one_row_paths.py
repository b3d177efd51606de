"""A configuration predicted alone (the one-row paths: operators' FLOPs and bytes, the KV waves
and the prefill attention core in Python floats, the linear layers' state skipped where there
is none, checks of one value read as Python values) gets every output the general path gives
it inside a batch of more than `STACK_AT_MOST` rows of its GPU: every catalogue model (full,
sliding, MLA, linear-attention and hybrid families, dense and MoE), every registered GPU,
static and continuous batching, vLLM, TensorRT-LLM and SGLang, fp8 where the chip has it."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict import predict
from dse.predict.stacking import STACK_AT_MOST
from dse.spec.catalogue import lookup_model, model_names
from dse.spec.hardware import gpu_names
from tests.predict.test_small_call_paths import _miss_facts

# float32 MLP GEMMs may sum in another order in another batch layout (issue 18)
RTOL = 1e-6
FP8_GPUS = ("h100_sxm", "h200_sxm", "gh200", "b200_sxm")


def _configs() -> dict[str, np.ndarray]:
    """Per GPU every catalogue model once (more than STACK_AT_MOST rows: the general path),
    and SGLang's rows (priced by their own tables, apart) on H100."""
    rng = np.random.default_rng(37)
    names = model_names()
    assert len(names) > STACK_AT_MOST
    rows = []
    for gpu, engines in [(g, ("vllm", "trtllm")) for g in sorted(gpu_names())] + [
        ("h100_sxm", ("sglang",))
    ]:
        for name in names:
            a = lookup_model(name).to_dict()
            a.update(
                batch_size=int(rng.choice([1, 3, 8, 32, 128])),
                prompt_tokens=int(rng.choice([16, 200, 1024, 4096])),
                output_tokens=int(rng.choice([1, 2, 64, 700])),
                tensor_parallel=int(rng.choice([1, 2, 4, 8])),
                engine=str(rng.choice(engines)),
                batching=str(rng.choice(["static", "continuous"])),
                gpu=gpu,
            )
            if gpu in FP8_GPUS and rng.random() < 0.3:
                a["weight_dtype"] = "fp8"
                a["kv_dtype"] = str(rng.choice(["fp8", "bfloat16"]))
            rows.append(a)
    keys = sorted({k for r in rows for k in r})
    assert all(set(r) == set(keys) for r in rows)
    return {k: np.array([r[k] for r in rows]) for k in keys}


def _same_row(one: dict[str, np.ndarray], whole: dict[str, np.ndarray], i: int) -> None:
    """Every output of `one` (a row alone) equals row i of `whole`; an operator's breakdown
    column that only other rows of the batch run (a sliding layer's) is 0 on row i."""
    assert set(one) <= set(whole), set(one) - set(whole)
    for k, v in whole.items():
        if k not in one:
            assert v.dtype.kind == "f" and v[i] == 0.0, f"{i} {k}: {v[i]!r} only in the batch"
        elif k == "out_of_range_inputs":  # misses shared batch-wide are merged batch-wide
            assert _miss_facts(one[k][0]) == _miss_facts(v[i]), f"{i}: {one[k][0]!r}"
        elif v.dtype.kind == "f":
            np.testing.assert_allclose(one[k][0], v[i], rtol=RTOL, atol=1e-15, err_msg=f"{i} {k}")
        else:
            assert one[k][0] == v[i], f"{i} {k}: {one[k][0]!r} != {v[i]!r}"


@pytest.mark.slow
def test_one_row_gives_every_output_of_the_batch_path() -> None:
    cols = _configs()
    whole = predict(cols)
    n = len(cols["gpu"])
    for i in range(0, n, 4):
        _same_row(predict({k: v[i : i + 1] for k, v in cols.items()}), whole, i)


def test_one_row_of_each_attention_family_matches_the_batch_path() -> None:
    """The fast subset: one GPU's rows (every catalogue model, so every attention family)."""
    cols = _configs()
    keep = np.flatnonzero(cols["gpu"] == "h100_sxm")[: len(model_names())]
    cols = {k: v[keep] for k, v in cols.items()}
    whole = predict(cols)
    for i in range(0, len(keep), 3):
        _same_row(predict({k: v[i : i + 1] for k, v in cols.items()}), whole, i)


def test_one_row_operators_are_the_vectorised_ones_bit_for_bit() -> None:
    """`ops._gemm` and `ops._elementwise` of one configuration (Python floats) make the FLOPs
    and bytes the numpy path makes for the same row in a batch of two, bit for bit."""
    from dse.predict.ops import forward_ops
    from dse.spec import columns as C

    cfg = _configs()
    for i in range(0, len(cfg["gpu"]), 7):
        pair, _ = C.as_columns({k: v[[i, i]] for k, v in cfg.items()})
        one, _ = C.as_columns({k: v[i : i + 1] for k, v in cfg.items()})
        for phase in ("prefill", "decode"):
            for a, b in zip(forward_ops(one, phase), forward_ops(pair, phase), strict=True):
                assert a.name == b.name
                for x, y in ((a.flops, b.flops), (a.bytes, b.bytes)):
                    np.testing.assert_array_equal(
                        np.broadcast_to(x, np.shape(y))[..., :1],
                        np.asarray(y)[..., :1],
                        err_msg=f"{i} {phase} {a.name}",
                    )


def test_kv_waves_of_one_configuration_are_the_vectorised_ones() -> None:
    """`request.kv_waves` of one row (Python floats) equals the numpy rule's row, bit for bit:
    batches that fit, that run in waves, and GPUs with no memory left for the cache."""
    from dse.predict.request import kv_waves

    rng = np.random.default_rng(3)
    batch = rng.integers(1, 512, 400)
    need = rng.uniform(1e6, 1e12, 400)
    free = rng.uniform(-1e10, 1e11, 400)
    free[::7] = 0.0
    many = kv_waves(batch, need, free)
    for i in range(len(batch)):
        one = kv_waves(batch[i : i + 1], need[i : i + 1], free[i : i + 1])
        for a, b in zip(one, many, strict=True):
            np.testing.assert_array_equal(a, b[i : i + 1], err_msg=str(i))


@pytest.mark.parametrize("size", [0, 1, 2, 14, 64, 65, 300])
def test_any_true_and_all_true_are_numpys_any_and_all(size: int) -> None:
    """The Python reads of a few values say what numpy's reductions say: bools, floats with
    zeros and NaN (truthy, as numpy counts it), 2-D arrays."""
    from dse.models.base import all_true, any_true, filled

    rng = np.random.default_rng(size)
    for _ in range(20):
        b = rng.random(size) < rng.choice([0.0, 0.02, 0.5, 1.0])
        f = np.where(rng.random(size) < 0.5, 0.0, rng.normal(size=size))
        f[rng.random(size) < 0.1] = np.nan
        for a in (b, f, b.reshape(1, -1), f.reshape(-1, 1)):
            assert any_true(a) == bool(a.any()) and all_true(a) == bool(a.all())
    assert np.array_equal(filled((2, 3), 0.25), np.full((2, 3), 0.25))
    assert filled(4, np.nan).dtype == np.full(4, np.nan).dtype


def test_state_bytes_without_linear_layers_are_the_computed_zeros() -> None:
    """`arch.state_bytes` of configurations without linear layers (its shortcut) equals, value
    and dtype, what it computes for the same rows in a batch with a linear-attention model."""
    from dse.spec import arch as A
    from dse.spec import columns as C

    cols = _configs()
    for i in range(0, len(cols["gpu"]), 5):
        one, _ = C.as_columns({k: v[i : i + 1] for k, v in cols.items()})
        got = A.state_bytes(C.architecture(one).resolved(), one["tensor_parallel"])
        linear = [j for j, p in enumerate(cols["attention_pattern"].tolist()) if "linear" in p]
        rows = [linear[0], i]
        both, _ = C.as_columns({k: v[rows] for k, v in cols.items()})
        ref = A.state_bytes(C.architecture(both).resolved(), both["tensor_parallel"])
        assert got.dtype == ref.dtype and got.shape == (1,)
        np.testing.assert_array_equal(got, ref[-1:], err_msg=str(i))


def test_at_rows_of_one_value_is_the_broadcast_copy() -> None:
    """`_rows.at_rows` of a one-value array over a larger shape (a configuration's inputs over
    its quadrature nodes) repeats it: the values and dtype of the broadcast copy."""
    from dse.models.base import as_shape
    from dse.predict._rows import at_rows

    for v in (np.array([3.5]), np.array([[2]]), np.array([True]), np.array([7], dtype=np.int8)):
        for shape in ((5, 1), (1,), (3,), (2, 4)):
            if v.ndim > len(shape):
                continue
            got, ref = at_rows(v, shape, None), as_shape(v, shape).ravel()
            assert got.dtype == ref.dtype and got.shape == ref.shape
            np.testing.assert_array_equal(got, ref)


def test_broadcast_shape_is_numpys() -> None:
    """`base.broadcast_shape` gives np.broadcast_shapes' shape, and a ValueError where numpy
    raises one."""
    from dse.models.base import broadcast_shape

    cases = [(), ((),), ((1,),), ((1,), (5, 1)), ((5, 1), (3,)), ((0,), (1,)), ((2, 1, 3), (4, 1))]
    cases += [((1,), (), (5, 1), (5, 1)), ((7,), (7,)), ((4, 3), (3,), (1, 1))]
    for shapes in cases:
        assert broadcast_shape(*shapes) == np.broadcast_shapes(*shapes), shapes
    for shapes in [((2,), (3,)), ((0,), (5,)), ((4, 3), (4,))]:
        with pytest.raises(ValueError):
            np.broadcast_shapes(*shapes)
        with pytest.raises(ValueError):
            broadcast_shape(*shapes)


def test_level3_columns_are_np_stack() -> None:
    """`level3._columns` is np.stack(cols, axis=1): values, dtype and C order."""
    from dse.models.level3 import _columns

    rng = np.random.default_rng(9)
    for n in (1, 2, 7):
        cols = [rng.normal(size=n) for _ in range(13)]
        got, ref = _columns(cols), np.stack(cols, axis=1)
        assert got.flags.c_contiguous and got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("block", ["attention_proj", "ffn_dense"])
def test_level2_features_of_one_configuration_are_the_joined_ones_bit_for_bit(block: str) -> None:
    """`level2.block_features_rows` of one configuration's phases (one row each, times as
    (1,) arrays, sizes as numbers or arrays of ints or floats) equals `block_features` of the
    phases joined (`pricing._joined_parts`), bit for bit, on every registered GPU."""
    from dse.models.level2 import LEVEL2_BLOCKS, block_features, block_features_rows
    from dse.predict.ops import Op
    from dse.predict.pricing import _joined_parts
    from dse.spec.hardware import get_gpu

    names = LEVEL2_BLOCKS[block]
    rng = np.random.default_rng(4)
    for gpu in sorted(gpu_names()):
        for _ in range(50):
            parts = []
            for _phase in range(int(rng.integers(1, 3))):
                times = {k: rng.lognormal(-10.0, 3.0, 1) for k in names}
                times[names[1]][0] = float(rng.choice([times[names[1]][0], 0.0]))
                m = float(rng.choice([1, 7, 64, 4096, 32768]))
                ops = {}
                for k in names:
                    n_, k_ = (float(x) for x in rng.choice([128, 1024, 4096, 14336, 128256], 2))
                    dims = {"m": m, "n": n_, "k": k_}
                    as_array = rng.choice(["number", "int", "float"])
                    if as_array == "int":
                        dims = {x: np.array([int(v)]) for x, v in dims.items()}
                    elif as_array == "float":
                        dims = {x: np.array([v]) for x, v in dims.items()}
                    one = np.ones(1)
                    ops[k] = Op(k, "gemm", block, one, one, one, dims)
                parts.append((None, [], ops, times))
            sizes = [1] * len(parts)
            want = block_features(*_joined_parts(parts, names, sizes), block, get_gpu(gpu))
            got = block_features_rows([(p[3], p[2]) for p in parts], block, get_gpu(gpu))
            assert got.shape == want.shape and got.flags.c_contiguous == want.flags.c_contiguous
            np.testing.assert_array_equal(got, want, err_msg=f"{gpu} {block}")

"""A batch predicts each distinct configuration once and gathers its outputs back to every row
that repeats it (issue 37, `dse.predict.request._repeated_rows`): every output key, numbers,
texts and provenance, is the row's own; rows that differ in one column are never merged; small
and mostly distinct batches skip the deduplication."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from test_golden_small import golden_configs

from dse.predict import predict
from dse.predict import request as R
from dse.spec import columns as C

# Against the same batch predicted row for row (no deduplication): the MLPs of Levels 1-3 run
# float32 GEMMs whose per-row result OpenBLAS lets depend on the block a row sits in
# (dse/models/_nn.py): up to ~1.1e-7 relative on this batch (an MoE row's prefill), as between
# any two batch layouts (tests/predict/test_shape_dedup.py's bound); a wrong gather moves a row
# by far more (another configuration's value). Bit for bit: against the distinct rows' batch.
LAYOUT_RTOL = 1e-6
ALONE_RTOL = 1e-6  # each row predicted alone (tests/predict/test_shape_dedup.py's bound)


def repeating(base_rows: int = 10, copies: int = 9, seed: int = 37) -> dict[str, np.ndarray]:
    """`base_rows` golden configurations (dense and MoE, several GPUs and both engines, one
    far outside the fitted prompt range so that its out-of-range text is not empty), each
    repeated `copies` times, shuffled."""
    base = golden_configs(base_rows, seed)
    base["prompt_tokens"][0] = 200_000  # outside the fitted range: a non-empty text
    order = np.random.default_rng(seed).permutation(np.repeat(np.arange(base_rows), copies))
    return {k: v[order] for k, v in base.items()}


def _same(a: np.ndarray, b: np.ndarray, rtol: float = 0.0) -> bool:
    """Equal texts, numbers within `rtol` (0: bit for bit; NaN equal to NaN)."""
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
        return a.shape == b.shape and bool((a.astype(str) == b.astype(str)).all())
    if rtol == 0.0:
        return np.array_equal(a, b, equal_nan=True)
    return bool(np.allclose(a, b, rtol=rtol, atol=0.0, equal_nan=True))


def _assert_outputs(
    got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], rtol: float
) -> None:
    assert set(got) == set(want)
    for k in want:
        assert _same(np.asarray(got[k]), np.asarray(want[k]), rtol), k


@pytest.mark.parametrize(("texts", "models"), [(True, True), (False, False)])
def test_a_repeating_batch_predicts_each_configuration_once(texts: bool, models: bool) -> None:
    cols, n = C.as_columns(repeating())
    groups = R._repeated_rows(cols, n)
    assert groups is not None and groups.rows is not None and groups.inverse is not None
    keys = [tuple(str(v[i]) for v in cols.values()) for i in range(n)]
    assert len(groups.rows) == len(set(keys)) == 10
    # every row's group holds its own configuration
    rep_keys = [keys[i] for i in groups.rows]
    assert all(rep_keys[g] == keys[i] for i, g in enumerate(groups.inverse))

    out = predict(cols, texts=texts, models=models)
    # the deduplicated path: the distinct rows predicted as one batch, gathered bit for bit
    distinct = R._predict_gpus(cols.take(groups.rows), len(groups.rows), None, texts, models)
    _assert_outputs(out, {k: v[groups.inverse] for k, v in distinct.items()}, 0.0)
    # what the un-deduplicated batch gives every row
    _assert_outputs(out, R._predict_gpus(cols, n, None, texts, models), LAYOUT_RTOL)
    assert (not texts) or (out["out_of_range_inputs"] != "").any()
    # and what each row gets alone
    for i in groups.rows:
        alone = predict({k: v[i : i + 1] for k, v in cols.items()}, texts=texts, models=models)
        rows = np.flatnonzero(groups.inverse == groups.inverse[i])
        for k, v in alone.items():
            assert _same(
                np.asarray(out[k])[rows], np.repeat(np.asarray(v), len(rows)), ALONE_RTOL
            ), k


# (column, change): one column of one configuration moved by one unit, or another text
VARIANTS = [
    ("prompt_tokens", lambda v: v + 1),
    ("output_tokens", lambda v: v + 1),
    ("batch_size", lambda v: v + 1),
    ("n_layers", lambda v: v + 1),
    ("gpu", lambda _: "h200_sxm"),
    ("engine", lambda _: "trtllm"),
    ("kv_dtype", lambda _: "fp8"),
]


def test_rows_that_differ_in_one_column_are_not_merged() -> None:
    one = {k: v[:1] for k, v in golden_configs(1, 5).items()}
    one.update(gpu=np.array(["h100_sxm"]), engine=np.array(["vllm"]))
    one.update(weight_dtype=np.array(["bfloat16"]), kv_dtype=np.array(["bfloat16"]))
    copies = 70  # more than REPEATS_AFTER rows of one configuration
    cols = {k: np.repeat(v, copies + len(VARIANTS)) for k, v in one.items()}
    for j, (name, change) in enumerate(VARIANTS):
        v = cols[name].tolist()
        v[copies + j] = change(v[copies + j])
        cols[name] = np.array(v)
    checked, n = C.as_columns(cols)
    groups = R._repeated_rows(checked, n)
    assert groups is not None and groups.inverse is not None
    assert len(groups.rows) == 1 + len(VARIANTS)  # every variant its own configuration
    assert len(set(groups.inverse[copies:].tolist()) | {groups.inverse[0]}) == 1 + len(VARIANTS)
    out = predict(checked)
    for j, (name, _) in enumerate(VARIANTS):
        i = copies + j
        alone = predict({k: v[i : i + 1] for k, v in checked.items()})
        assert out["latency_s"][i] != out["latency_s"][0], name  # not the base row's
        for k, v in alone.items():
            assert _same(np.asarray(out[k])[i : i + 1], np.asarray(v), ALONE_RTOL), (name, k)
    base = predict({k: v[:1] for k, v in checked.items()})
    for k, v in base.items():
        assert _same(np.asarray(out[k])[:copies], np.repeat(np.asarray(v), copies), ALONE_RTOL), k


def test_small_and_mostly_distinct_batches_skip_the_deduplication() -> None:
    one = golden_configs(1, 5)
    at_most = {k: np.repeat(v, R.REPEATS_AFTER) for k, v in one.items()}
    assert R._repeated_rows(*C.as_columns(at_most)) is None  # a few rows: never hashed
    above = {k: np.repeat(v, R.REPEATS_AFTER + 1) for k, v in one.items()}
    g = R._repeated_rows(*C.as_columns(above))
    assert g is not None and g.rows is not None and len(g.rows) == 1
    # a large batch of distinct workloads: told apart by the sample check
    n = 9000
    rng = np.random.default_rng(3)
    distinct = {k: np.repeat(v, n) for k, v in one.items()}
    distinct["batch_size"] = rng.integers(1, 257, n)
    distinct["prompt_tokens"] = rng.integers(16, 8193, n)
    distinct["output_tokens"] = rng.integers(2, 2049, n)
    assert R._repeated_rows(*C.as_columns(distinct)) is None
    # a tenth of its rows repeated (above REPEATS_BELOW of them distinct): not deduplicated
    few = {k: v.copy() for k, v in distinct.items()}
    for k in few:
        few[k][: n // 10] = few[k][0]
    assert R._repeated_rows(*C.as_columns(few)) is None


def test_spread_gathers_every_column_as_indexing_it() -> None:
    """`request._spread`: floats stacked and taken at once, a text of one string filled, other
    columns taken: bit for bit what indexing each column gives, key order kept."""
    rng = np.random.default_rng(4)
    m = 7
    out = {
        "a": rng.normal(size=m),
        "flag": rng.random(m) > 0.5,
        "text": np.array([f"t{i % 3}" for i in range(m)], dtype=object),
        "b": np.where(rng.random(m) > 0.5, -0.0, np.nan),
        "one": np.array(["same"] * m, dtype=object),
        "degree": rng.integers(0, 5, m).astype(np.int8),
        "c": rng.normal(size=m),
    }
    inverse = rng.integers(0, m, 40)
    got = R._spread(out, inverse)
    assert list(got) == list(out)
    for k, v in out.items():
        want = v[inverse]
        assert got[k].dtype == want.dtype and got[k].shape == want.shape, k
        if want.dtype.kind == "f":
            assert np.array_equal(got[k].view(np.uint64), want.view(np.uint64)), k
        else:
            assert (got[k] == want).all(), k
    assert got["a"].flags.c_contiguous


def test_configs_take_by_indices_and_by_mask_agree() -> None:
    cols, n = C.as_columns(repeating())
    idx = np.arange(0, n, 3)
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    a, b = cols.take(idx), cols.take(mask)
    assert a.n == b.n == len(idx) and list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and (a[k] == b[k]).all(), k
        assert not a[k].flags.writeable


def test_repeats_told_on_the_callers_columns_predict_as_the_checked_batch() -> None:
    # `_raw_repeats`: the distinct rows of the caller's columns checked, repeats told before
    # checking; bit for bit what the checked batch (`_repeated_rows` on every checked row) gives
    raw = repeating()
    found = R._raw_repeats(raw)
    assert found is not None and found.cols.n == 10 and len(found.inverse) == 90
    checked, _ = C.as_columns(raw)
    for texts in (True, False):
        _assert_outputs(predict(raw, texts=texts), predict(checked, texts=texts), 0.0)
    # one value for a column (a scalar) and a column as_columns does not read ride along
    with_one = {**raw, "engine": "vllm", "note": np.array([object()] * 90)}
    found = R._raw_repeats(with_one)
    assert found is not None and found.cols.n <= 10
    _assert_outputs(predict(with_one), predict(C.as_columns(with_one)[0]), 0.0)


def test_rows_that_differ_only_before_checking_are_merged_after_it() -> None:
    # 0.0 and -0.0 dense layers (other bits, one checked integer): 20 distinct rows as given,
    # 10 configurations once checked, predicted once each, as `_repeated_rows` predicts them
    raw = repeating()
    zero = np.zeros(len(raw["d_model"]))
    zero[::2] = -0.0
    raw["n_dense_layers"] = zero
    checked, n = C.as_columns(raw)
    groups = R._repeated_rows(checked, n)
    found = R._raw_repeats(raw)
    assert groups is not None and groups.rows is not None and groups.inverse is not None
    assert found is not None and found.cols.n == len(groups.rows) == 10
    assert np.array_equal(found.inverse, groups.inverse)  # the same rows, in the same order
    _assert_outputs(predict(raw), predict(checked), 0.0)
    # a missing head_dim (NaN) is its own configuration once checked (head_dim_defaulted)
    hd = (raw["d_model"] // raw["n_heads"]).astype(float)
    hd[::2] = np.nan
    raw = {**raw, "head_dim": hd}
    checked, n = C.as_columns(raw)
    groups = R._repeated_rows(checked, n)
    found = R._raw_repeats(raw)
    assert groups is not None and groups.rows is not None
    assert found is not None and found.cols.n == len(groups.rows)
    _assert_outputs(predict(raw), predict(checked), 0.0)


def test_a_batch_that_fails_its_check_fails_as_the_whole_batch_does() -> None:
    raw = repeating()
    raw["n_layers"] = raw["n_layers"].copy()
    raw["n_layers"][-1] = -3
    with pytest.raises(Exception) as whole:
        C.as_columns(raw)
    with pytest.raises(type(whole.value)) as got:
        predict(raw)
    assert str(got.value) == str(whole.value)
    assert R._raw_repeats(raw) is None


def test_columns_as_columns_reads_otherwise_skip_the_early_repeats() -> None:
    raw = repeating()
    assert R._raw_repeats({**raw, "engine": raw["engine"].astype(object)}) is None
    assert R._raw_repeats({**raw, "d_model": raw["d_model"].tolist()}) is None
    assert R._raw_repeats({k: v[: R.REPEATS_AFTER] for k, v in raw.items()}) is None


def test_a_batch_distinct_as_given_is_not_hashed_again() -> None:
    one = golden_configs(1, 5)
    n = 3000
    rng = np.random.default_rng(3)
    distinct = {k: np.repeat(v, n) for k, v in one.items()}
    distinct["batch_size"] = rng.integers(1, 257, n)
    distinct["prompt_tokens"] = rng.integers(16, 8193, n)
    assert R._raw_repeats(distinct) is R._MOSTLY_DISTINCT
    checked, _ = C.as_columns(distinct)
    assert R._repeated_rows(checked, n) is None  # what the checked batch says too
    _assert_outputs(predict(distinct), predict(checked), 0.0)

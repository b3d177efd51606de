"""A batch prices each phase once per group of configurations that make the same operator calls
(issue 37, `dse.predict.pricing.phase_groups`): the per-row outputs are those of each row
predicted alone, the grouped path is taken where rows repeat, and a hash collision never merges
two different rows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pytest
from test_golden_small import golden_configs

from dse.predict import predict
from dse.predict._rows import ColumnsRead, distinct_columns
from dse.predict.adapters import CTX_COLUMNS
from dse.predict.artifacts import load_artifact
from dse.predict.ops import LayerShapes, forward_ops
from dse.predict.pricing import Pricer, op_runs, phase_groups
from dse.predict.request import _group_key, decode_nodes, node_strata
from dse.spec import columns as C
from dse.spec.hardware import get_gpu

RTOL = 1e-6  # a row's MLP outputs may differ by ~1e-7 between batches on another BLAS
DEPTHS = (8, 16, 24, 40, 60, 80)


def duplicated(
    base_rows: int = 12,
    seed: int = 7,
    gpus: tuple[str, str] = ("h100_sxm", "h200_sxm"),
    continuous: bool = False,
) -> dict[str, np.ndarray]:
    """`base_rows` dense and MoE configurations (16-bit and, on Hopper, fp8; every workload
    its own), on two GPUs, each at 6 depths and each of those twice: every configuration
    repeats, and every operator call repeats 12 times (the depth changes only how often it
    runs). `continuous`: every other base row under continuous batching."""
    base = golden_configs(base_rows, seed)
    base["gpu"] = np.where(np.arange(base_rows) % 2 == 0, *gpus)
    ampere = np.char.startswith(base["gpu"].astype(str), "a100")
    for k in ("weight_dtype", "kv_dtype"):  # the A100 artifacts have no fp8 kernels
        base[k] = np.where(ampere, "bfloat16", base[k])
    if continuous:
        base["batching"] = np.where(np.arange(base_rows) % 4 < 2, "continuous", "static")
    rep = np.tile(np.repeat(np.arange(base_rows), len(DEPTHS)), 2)
    cols = {k: v[rep] for k, v in base.items()}
    cols["n_layers"] = np.tile(np.array(DEPTHS), 2 * base_rows)
    return cols


def _artifact(gpu: str):
    art, _ = load_artifact(gpu)
    if art is None:
        pytest.skip(f"no shipped artifact for {gpu}")
    return art


@pytest.mark.parametrize(
    ("gpus", "continuous"),
    [
        (("h100_sxm", "h200_sxm"), False),
        # A100 40GB priced with the 80GB part's kernels (moved by the roofline), queued waves
        (("a100_sxm_40gb", "gh200"), True),
    ],
)
@pytest.mark.slow
def test_a_repeating_batch_predicts_each_row_as_alone(
    gpus: tuple[str, str], continuous: bool
) -> None:
    for gpu in gpus:
        _artifact(gpu)
    cols = duplicated(gpus=gpus, continuous=continuous)
    n = len(cols["gpu"])
    batch = predict(cols)
    seen: dict[tuple, dict[str, np.ndarray]] = {}
    for i in range(n):
        key = tuple(str(v[i]) for v in cols.values())
        if key not in seen:
            seen[key] = predict({k: v[i : i + 1] for k, v in cols.items()})
        alone = seen[key]
        assert set(alone) <= set(batch)  # a mixed batch adds the host time of continuous rows
        for k, v in alone.items():
            got = np.asarray(batch[k])[i]
            if np.asarray(v).dtype.kind == "f":
                np.testing.assert_allclose(got, v[0], rtol=RTOL, atol=1e-15, err_msg=f"{k}[{i}]")
            else:
                assert got == v[0], f"{k}[{i}]: {got!r} != {v[0]!r}"


def _phases(cols: Mapping[str, np.ndarray]) -> list:
    """The prefill and decode phases as `base_costs` prices them (no queued waves here)."""
    steps = np.maximum(cols["output_tokens"].astype(float) - 1.0, 0.0)
    nodes, weights = decode_nodes(cols["prompt_tokens"].astype(float) + 1.0, steps)
    dec = forward_ops(cols, "decode", kv_len=nodes, stratum=node_strata(len(nodes)))
    return [(forward_ops(cols, "prefill"), "prefill", None), (dec, "decode", weights)]


def test_the_grouped_path_prices_each_distinct_call_once() -> None:
    art = _artifact("h100_sxm")
    raw = duplicated()
    on = raw["gpu"] == "h100_sxm"
    cols, n = C.as_columns({k: v[on] for k, v in raw.items()})
    pricer = Pricer(get_gpu("h100_sxm"), art, None, cols)
    pre, dec = pricer.price_phases(_phases(cols))
    # 6 base configurations on this GPU, each at 6 depths, twice: 72 rows, 6 distinct calls
    assert n == 72
    assert pricer.priced_rows == [6, 6]
    # the totals are each row's own: priced alone (a batch of one, no groups), the same
    for i in (0, 7, 41, 71):
        one = {k: v[i : i + 1] for k, v in cols.items()}
        solo = Pricer(get_gpu("h100_sxm"), art, None, one)
        p1, d1 = solo.price_phases(_phases(one))
        assert solo.priced_rows == [1, 1]
        for a, b in ((pre, p1), (dec, d1)):
            np.testing.assert_allclose(a.time_s[i], b.time_s[0], rtol=RTOL)
            np.testing.assert_allclose(a.energy_j[i], b.energy_j[0], rtol=RTOL)
            np.testing.assert_allclose(a.roof_time_s[i], b.roof_time_s[0], rtol=RTOL)
            for k, v in b.items_s.items():
                np.testing.assert_allclose(a.items_s[k][i], v[0], rtol=RTOL, atol=1e-15)


def test_distinct_rows_are_priced_one_by_one() -> None:
    art = _artifact("h100_sxm")
    raw = golden_configs(100, 3)
    cols, n = C.as_columns(
        {k: v for k, v in raw.items() if k != "gpu"} | {"gpu": np.full(100, "h100_sxm")}
    )
    pricer = Pricer(get_gpu("h100_sxm"), art, None, cols)
    pricer.price_phases(_phases(cols))
    assert pricer.priced_rows == [n, n]


class _Reads(Mapping[str, np.ndarray]):
    """Columns that note which keys are read."""

    def __init__(self, cols: Mapping[str, np.ndarray]) -> None:
        self.cols, self.read = cols, set()

    def __getitem__(self, key: str) -> np.ndarray:
        self.read.add(key)
        return self.cols[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.cols)

    def __len__(self) -> int:
        return len(self.cols)


@pytest.mark.parametrize("rows", [10, 150])
def test_the_adapters_read_only_the_declared_columns(rows: int) -> None:
    """The group key holds `CTX_COLUMNS` of the configuration columns: an adapter that read
    another one could see two rows of one group differ."""
    art = _artifact("h100_sxm")
    raw = golden_configs(rows, 11)
    raw["gpu"] = np.full(rows, "h100_sxm")
    raw["norm"] = np.where(np.arange(rows) % 3 == 0, "layernorm", "rmsnorm")
    cols, _ = C.as_columns(raw)
    spy = _Reads(cols)
    Pricer(get_gpu("h100_sxm"), art, None, spy).price_phases(_phases(cols))
    assert spy.read and spy.read <= set(CTX_COLUMNS), spy.read - set(CTX_COLUMNS)


def test_a_hash_collision_never_merges_two_rows() -> None:
    # the row hash is h * M + column: (0, M) and (1, 0) hash alike for the second column's M
    m1 = np.uint64(0x9E3779B97F4A7C15 + 2).astype(np.int64)
    a = np.tile(np.array([0, 1], dtype=np.int64), 40)
    b = np.tile(np.array([m1, 0], dtype=np.int64), 40)
    assert distinct_columns([a, b], 80) is None  # the check against representatives fails
    # rows that are equal do group: by numbers, by strings, over a node axis
    s = np.tile(np.array(["fp8", "bfloat16"]), 40)
    nodes = np.stack([a * 2.0, a * 3.0])
    g = distinct_columns([a, s, nodes, np.float64(7.0)], 80)
    assert g is not None and len(g.rows) == 2
    assert (a[g.rows][g.inverse] == a).all() and (s[g.rows][g.inverse] == s).all()
    # strings that differ split a group
    s2 = np.where(np.arange(80) < 40, s, "x")
    g = distinct_columns([a, s2], 80)
    assert g is not None and len(g.rows) == 4
    # values as a plain list count too
    g = distinct_columns([a, list(s2)], 80)
    assert g is not None and len(g.rows) == 4
    # most rows distinct: not worth it
    assert distinct_columns([np.arange(80)], 80) is None


def _catalogue_batch() -> dict[str, np.ndarray]:
    """Every catalogue model (dense, MoE, MLA, sliding windows, linear attention, hybrids) at two
    workloads and two depths each, every row twice: the column key must hold whatever their
    operator lists read."""
    from dse.spec.catalogue import lookup_model, model_names

    rows: list[dict] = []
    for m in model_names():
        card = lookup_model(m).to_dict()
        for depth in (card["n_layers"], 2 * card["n_layers"]):
            for batch, prompt, out in ((8, 1024, 256), (32, 4096, 17)):
                rows += 2 * [
                    card
                    | {
                        "n_layers": depth,
                        "batch_size": batch,
                        "prompt_tokens": prompt,
                        "output_tokens": out,
                        "tensor_parallel": 8 if batch == 32 else 1,
                        "gpu": "h100_sxm",
                    }
                ]
    keys = sorted({k for r in rows for k in r})
    cols, _ = C.as_columns({k: np.array([r.get(k, C.DEFAULTS.get(k)) for r in rows]) for k in keys})
    return cols


def test_the_column_key_groups_rows_whose_operators_agree() -> None:
    """`base_costs` keys a phase's groups on the columns its operator list was built from
    (`request._group_key`, n_layers left out: it sets counts only) instead of on the operators'
    own arrays: every row of such a group makes its group row's calls (every operator's FLOPs,
    bytes and dims bit for bit, whether it runs), and the groups are those of the operators'
    arrays."""
    cols = _catalogue_batch()
    n = len(cols["d_model"])
    read = [ColumnsRead(cols) for _ in range(3)]
    shapes = LayerShapes.of(read[0], "prefill")
    steps = np.maximum(cols["output_tokens"].astype(float) - 1.0, 0.0)
    nodes, weights = decode_nodes(cols["prompt_tokens"].astype(float) + 1.0, steps)
    phases = [
        (forward_ops(read[1], "prefill", like=shapes), None),
        (forward_ops(read[2], "decode", nodes, node_strata(len(nodes)), like=shapes), weights),
    ]
    keys = [_group_key(read[0], read[1]), _group_key(read[0], read[2], True)]
    for (ops, w), key in zip(phases, keys, strict=True):
        assert key is not None
        runs = op_runs(ops, n)
        g = phase_groups(ops, runs, cols, n, w, key)
        by_ops = phase_groups(ops, runs, cols, n, w)
        assert g is not None and by_ops is not None
        assert len(g.rows) == len(by_ops.rows) < n / 2  # every depth of a row in one group
        back = g.rows[g.inverse]
        for op, mask in zip(ops, runs.mask, strict=True):
            assert np.array_equal(mask[back], mask), op.name
            for a in (op.flops, op.bytes, *op.dims.values()):
                a = np.asarray(a)
                if a.ndim and a.shape[-1] == n:
                    assert np.array_equal(a[..., back], a), op.name


def test_the_column_key_leaves_out_the_depth_only() -> None:
    cols = _catalogue_batch()
    read = [ColumnsRead(cols) for _ in range(2)]
    forward_ops(read[1], "prefill", like=LayerShapes.of(read[0], "prefill"))
    assert read[0].read is not None and read[1].read is not None
    used = read[0].read | read[1].read
    assert {"n_layers", "d_model", "n_heads", "d_ff", "batch_size"} <= used
    key = _group_key(read[0], read[1])
    assert key is not None and len(key) == len(used) - 1
    assert not any(a is cols["n_layers"] for a in key)
    # columns iterated whole: not noted, the operators' arrays key the groups
    whole = ColumnsRead(cols)
    dict(whole)
    assert _group_key(whole, read[1]) is None

"""The layer-op model reads its measured curves in one pass over all of a family's curves
(`_stack_eval`, issue 37), prices the rows past the measured elements once per (width, tp)
(`_priced_once`) and computes one operator's widths alone (`op_geometry`): the same numbers, to
the bit, as the walk curve by curve (`_curve_eval` below, the model's reader before the stacked
pass), every row priced and every width computed."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest

from dse.models import layer_ops as L
from dse.predict import load_artifact


def _used(n_curves: int, *pairs: tuple[np.ndarray, np.ndarray]) -> Iterable[int]:
    """The curves to walk, in increasing order: on a few rows the sorted distinct values of
    idx[mask] over the (idx, mask) pairs (a Python set: most curves are read by no row); on
    many rows every curve (the walk skips a curve no row reads, and sorting the rows' curve
    indices would cost more than the skipped masks)."""
    if sum(i.size for i, _ in pairs) > 64:
        return range(n_curves)
    return sorted({int(v) for i, m in pairs for v in i[m]})


def _curve_eval(
    t: np.ndarray,
    width: np.ndarray,
    tp: np.ndarray,
    c_tp: np.ndarray,
    c_width: np.ndarray,
    c_tok: list[np.ndarray],
    c_val: list[np.ndarray],
    c_period: np.ndarray | None = None,
    split: float = 0.0,
    c_parts: list[tuple[np.ndarray, np.ndarray]] | None = None,
    prep: L.CurvePrep | None = None,
) -> np.ndarray:
    """The reference walk, curve by curve: how `LayerOpModel` read its curves before the stacked
    pass (`L._stack_eval`), which must give the same numbers to the bit.

    Log correction per row from the measured curves of one operator: the curves of the row's
    tp (else the nearest measured tp in log2), in tokens by `L._interp_seg` (linear between
    measured token counts of one segment), linear in log width between the two nearest measured
    widths; constant beyond either end. With `c_parts` (each curve's `_wave_split`), a row of
    another width than the curve's reads the smooth part at the matched element count and the
    wave sawtooth at its own token count. `prep`: `L._curve_prep(c_tp, c_width)`, when the
    caller keeps it between calls (the same numbers, without re-sorting the curves per call)."""
    out = np.zeros(len(t))
    if len(c_tp) == 0:
        return out
    if c_period is None:
        c_period = np.full(len(c_tp), np.inf)
    if prep is None:
        prep = L._curve_prep(c_tp, c_width)
    tps, l2t = prep.tps, prep.l2t
    if len(tps) == 1:
        near = np.zeros(len(t), dtype=np.int64)
    else:  # nearest measured tp in log2 (midpoints between neighbours)
        mid = 0.5 * (l2t[1:] + l2t[:-1])
        near = np.searchsorted(mid, np.log2(np.maximum(tp, 1.0)))
    for ip in range(len(tps)):
        if len(tps) > 1:
            rows = np.flatnonzero(near == ip)
            if rows.size == 0:
                continue
            wr, tr = width[rows], t[rows]
        else:
            rows, wr, tr = slice(None), width, t
        ent, lw = prep.ent[ip], prep.lw[ip]
        x = np.clip(np.log(np.maximum(wr, 1.0)), lw[0], lw[-1])
        j = np.clip(np.searchsorted(lw, x, side="right") - 1, 0, max(len(ent) - 2, 0))
        k = np.minimum(j + 1, len(ent) - 1)
        span = lw[k] - lw[j]
        f = np.where(span > 0, (x - lw[j]) / np.where(span > 0, span, 1.0), 0.0)
        v = np.zeros(len(tr))
        # Only the curves some row reads (in increasing order, as a loop over all of them
        # would add them): a handful of rows touch 1-2 of the operator's ~10 curves.
        for e in _used(len(ent), (j, f < 1.0), (k, (k != j) & (f > 0.0))):
            # rows whose lower / upper neighbour is this curve, with a non-zero weight
            for sel, wgt in (
                (np.flatnonzero((j == e) & (f < 1.0)), 1.0 - f),
                (np.flatnonzero((k == e) & (k != j) & (f > 0.0)), f),
            ):
                if sel.size == 0:
                    continue
                # the same element count on the neighbour curve: past a few waves these kernels
                # cost what their elements cost (Llama-2-7B at T tokens ~ 70B at T / 2)
                te = tr[sel] * (wr[sel] / c_width[ent[e]]) ** L.CURVE_E_MATCH
                if split > 0:  # ... on the row's own side of a kernel switch (a token count)
                    te = np.where(
                        tr[sel] <= split, np.minimum(te, split), np.maximum(te, split + 1e-3)
                    )
                ce = ent[e]
                val = None
                if c_parts is not None and np.isfinite(c_period[ce]):
                    own = tr[sel]
                    moved = np.flatnonzero(te != own)
                    if moved.size:  # steps at the row's own token count, regime at its elements
                        val = np.empty(len(te))
                        same = np.flatnonzero(te == own)
                        val[same] = L._interp_seg(
                            te[same], c_tok[ce], c_val[ce], c_period[ce], split
                        )
                        smooth, saw = c_parts[ce]
                        val[moved] = L._interp_seg(te[moved], c_tok[ce], smooth, np.inf, split)
                        val[moved] += L._interp_seg(own[moved], c_tok[ce], saw, c_period[ce], split)
                if val is None:
                    val = L._interp_seg(te, c_tok[ce], c_val[ce], c_period[ce], split)
                v[sel] += wgt[sel] * val
        out[rows] = v
    return out


def _model(gpu: str) -> L.LayerOpModel:
    art, _ = load_artifact(gpu)
    if art is None or not art.names("layer_op"):
        pytest.skip(f"no shipped {gpu} layer-op model")
    return art.model(art.names("layer_op")[0])


def _rows(rng: np.random.Generator, n: int, widths: np.ndarray) -> tuple[np.ndarray, ...]:
    """Token counts on and off the measured ones, the wave steps and the embedding's switch
    (whole and fractional, past the curves' ends); widths measured, between and beyond them;
    tp 0.5-16 (3 and 6 between measured ones)."""
    k = n // 3
    t = np.concatenate(
        [
            rng.integers(1, 70_000, k).astype(float),
            rng.choice([1, 2, 15, 16, 17, 24, 131, 132, 133, 264, 265, 528, 4096, 4097], k),
            rng.uniform(0.5, 50_000.0, n - 2 * k),
        ]
    ).astype(float)
    w = np.concatenate([rng.choice(widths, n // 2), rng.uniform(64.0, 80_000.0, n - n // 2)])
    rng.shuffle(w)
    w[::7] = np.rint(w[::7])
    tp = rng.choice([0.5, 1, 2, 3, 4, 6, 8, 16], n).astype(float)
    return t, w, tp


def _variants(model: L.LayerOpModel, i: int):
    """Family i's curves as shipped, and as other states read them: whole curves (no wave
    split), no periods nor kernel switch, knots off whole token counts (the searchsorted path),
    a curve of one knot."""
    _, _, _, split, c_tp, c_w, c_tok, c_val, c_per, c_parts, prep = model._curves_of(i)
    yield "shipped", (c_tp, c_w, c_tok, c_val, c_per, split, c_parts), prep
    yield "whole curves", (c_tp, c_w, c_tok, c_val, c_per, split, None), prep
    no_per = np.full(len(c_per), np.inf)
    yield "no periods", (c_tp, c_w, c_tok, c_val, no_per, 0.0, None), prep
    off = [t + 0.25 for t in c_tok]
    yield "fractional knots", (c_tp, c_w, off, c_val, c_per, split, c_parts), prep
    one_tok, one_val = list(c_tok), list(c_val)
    one_tok[0], one_val[0] = c_tok[0][:1], c_val[0][:1]
    one_per = np.array(c_per, dtype=float)
    one_per[0] = np.inf  # a one-knot curve has no period (_loo_period)
    one_parts = None
    if c_parts is not None:
        one_parts = [(c_val[0][:1], np.zeros(1)), *c_parts[1:]]
    yield "one knot", (c_tp, c_w, one_tok, one_val, one_per, split, one_parts), prep


@pytest.mark.parametrize("gpu", ["h100_sxm", "a100_sxm"])
def test_stacked_curves_read_the_walks_numbers_bit_for_bit(gpu: str) -> None:
    model = _model(gpu)
    rng = np.random.default_rng(37)
    paths = set()
    for i in range(len(model.keys_)):
        for name, (c_tp, c_w, c_tok, c_val, c_per, split, parts), prep in _variants(model, i):
            t, w, tp = _rows(rng, 3000, np.unique(c_w))
            walk = _curve_eval(t, w, tp, c_tp, c_w, c_tok, c_val, c_per, split, parts, prep)
            st = L._curve_stack(c_tp, c_w, c_tok, c_val, c_per, split, parts)
            paths.add(st.lut is not None)
            np.testing.assert_array_equal(
                L._stack_eval(st, t, w, tp), walk, err_msg=f"{gpu} {model.keys_[i]} {name}"
            )
            # a few rows (the walk's own short path): the same
            np.testing.assert_array_equal(L._stack_eval(st, t[:5], w[:5], tp[:5]), walk[:5])
            # on every knot of the curves and one ulp either side (the search's rounding)
            knots = np.unique(np.concatenate(c_tok))
            tk = np.concatenate([knots, np.nextafter(knots, 0.0), np.nextafter(knots, np.inf)])
            wk, pk = np.full(len(tk), float(c_w[0])), np.full(len(tk), float(c_tp[0]))
            walk = _curve_eval(tk, wk, pk, c_tp, c_w, c_tok, c_val, c_per, split, parts, prep)
            np.testing.assert_array_equal(L._stack_eval(st, tk, wk, pk), walk)
    assert paths == {True, False}  # the lookup table and the search both ran


def test_rows_past_the_measured_elements_priced_once_give_every_rows_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prefill batch whose rows mostly lie past the measured elements (96% of an
    all-distinct batch's norms): priced once per (width, tp), as each row priced alone."""
    model = _model("h100_sxm")
    rng = np.random.default_rng(5)
    n = 4000
    heads = rng.choice([32.0, 40.0, 64.0], n)
    arrays = {
        "num_tokens": rng.integers(20, 200_000, n).astype(float),
        "d_model": np.where(heads == 40.0, 5120.0, rng.choice([4096.0, 8192.0], n)),
        "n_heads": heads,
        "n_kv_heads": rng.choice([8.0, 32.0], n),
        "d_ff": rng.choice([11008.0, 14336.0, 13824.0], n),
        "tensor_parallel": rng.choice([1.0, 2.0, 4.0, 8.0], n),
        "gated_mlp": rng.random(n) < 0.9,
    }
    for op in L.LAYER_OPS:
        once = model.predict(op=op, **arrays)
        monkeypatch.setattr(L, "ONCE_MIN_ROWS", 10**9)
        each = model.predict(op=op, **arrays)
        monkeypatch.undo()
        assert set(once) == set(each)
        for k in once:
            np.testing.assert_array_equal(once[k], each[k], err_msg=f"{op} {k}")
    # the norms' rows were past the measured elements, and few (width, tp) pairs
    i = model._row_key_index(np.asarray(["add"]), np.ones(1, bool))[0]
    e_max = model._curves_of(int(i))[1]
    d, tp = arrays["d_model"], arrays["tensor_parallel"]
    over = arrays["num_tokens"] > np.maximum(e_max / d, 1.0)
    assert over.mean() > 0.5
    got = L._priced_once(over, d, tp)
    assert got is not None and len(got[0]) < (~over).sum() + 13
    # many pairs, or a NaN (equal to nothing): every row priced
    rows = np.ones(200, dtype=bool)
    assert L._priced_once(rows, np.arange(200.0), np.ones(200)) is None
    assert L._priced_once(rows, np.full(200, np.nan), np.ones(200)) is None


def test_one_operators_widths_are_the_mixed_batchs() -> None:
    rng = np.random.default_rng(1)
    n = 500
    heads = rng.choice([8.0, 32.0, 40.0, 64.0], n)
    arrays = {
        "num_tokens": rng.integers(1, 9000, n).astype(float),
        "d_model": rng.choice([2048.0, 2560.0, 4096.0, 5120.0, 8192.0], n),
        "n_heads": heads,
        "n_kv_heads": np.minimum(rng.choice([1.0, 4.0, 8.0, 40.0], n), heads),
        "d_ff": rng.choice([4096.0, 11008.0, 14336.0, 28672.0], n),
        "tensor_parallel": rng.choice([1.0, 2.0, 3.0, 8.0], n),
        "gated_mlp": rng.random(n) < 0.7,
    }
    for op in [*L.LAYER_OPS, "not_an_op"]:
        t1, w1 = L.op_geometry(np.asarray(op), arrays)
        t2, w2 = L.op_geometry(np.full(n, op), arrays)
        np.testing.assert_array_equal(w1, w2, err_msg=op)
        np.testing.assert_array_equal(t1, t2)
        assert w1.dtype == np.float64 and w1.shape == (n,)


def test_the_search_finds_each_knot_interval_as_searchsorted_on_its_own_curve() -> None:
    """Knots off whole token counts (no lookup table): the stacked keys' sums round, and a
    query on a knot or one ulp beside it must still land in its own curve's interval."""
    rng = np.random.default_rng(3)
    c_tok = [
        np.cumsum(rng.uniform(1.0, 40.0, 300)) * rng.uniform(1.0, 3.0) + 0.1 for _ in range(60)
    ]
    c_val = [rng.normal(size=300) for _ in range(60)]
    n_c = len(c_tok)
    st = L._curve_stack(
        np.ones(n_c), np.arange(1.0, n_c + 1), c_tok, c_val, np.full(n_c, np.inf), 0.0, None
    )
    assert st.lut is None
    ce = np.repeat(np.arange(n_c), 3 * 300 + 2)
    x = np.concatenate(
        [
            np.concatenate([t, np.nextafter(t, 0.0), np.nextafter(t, np.inf), [0.0, 1e9]])
            for t in c_tok
        ]
    )
    hi = L._stack_interval(st, ce, x)
    for c, t in enumerate(c_tok):
        sel = ce == c
        want = np.clip(np.searchsorted(t, x[sel], side="right"), 1, len(t) - 1) + st.start[c]
        np.testing.assert_array_equal(hi[sel], want, err_msg=f"curve {c}")

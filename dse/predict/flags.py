"""Range flags of a prediction: which operator inputs left their model's fitted range
(`_range_flags`), how far outside the fitted ranges a configuration lies (`_oor_degree`:
`out_of_range`, `out_of_range_degree`) and the text that names each input outside
(`_miss_text`: `out_of_range_inputs`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.models.base import RangeMiss, as_shape

if TYPE_CHECKING:
    from dse.predict.pricing import PhaseCost

# A part flagged without a distance (an engine Level 3 has no fit for) counts this far outside.
FLAG_DEGREE = 1.0


def _range_flags(
    pre: PhaseCost, dec: PhaseCost
) -> tuple[dict[str, RangeMiss], dict[str, np.ndarray]]:
    """The operators' range flags of one batch: `misses`, which input left which model's fitted
    range and how far ("<phase> <operator>: <input>"); `flags`, the operators flagged without a
    distance (a model that only says in or out: "<phase> <operator>: outside")."""
    misses = {f"prefill {k}": v for k, v in pre.misses.items()}
    misses.update({f"decode {k}": v for k, v in dec.misses.items()})
    flags = {
        f"{phase} {k}: outside": v
        for phase, cost in (("prefill", pre), ("decode", dec))
        for k, v in cost.oor_by.items()
        if not any(m.startswith(f"{k}: ") for m in cost.misses)
    }
    return misses, flags


def _oor_degree(
    misses: Mapping[str, RangeMiss], flags: Mapping[str, np.ndarray], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(out of range, degree) per configuration: degree = the largest |distance| of any input
    outside any model's fitted range (`RangeMiss.excess`, log(value / bound) for sizes), 0
    inside; out of range where it is > 0."""
    degree = np.zeros(n)
    for m in misses.values():
        np.maximum(degree, m.degree, out=degree)
    for f in flags.values():
        degree = np.where(f, np.maximum(degree, FLAG_DEGREE), degree)
    return degree > 0, degree


def _fmt(v: np.ndarray, spec: str) -> np.ndarray:
    """Object array of the values as text: integers below 10^6 as integers, others with
    `spec` (a format spec such as '.4g'). Values that print alike under a '.<P>g' spec are
    formatted once (`_printed_key`): an all-distinct batch's ~39,000 formatted values give
    ~7,500 distinct texts."""
    out = np.empty(len(v), dtype=object)
    exact = (np.abs(v) >= 1) & (np.abs(v) < 1e6) & (v == np.round(v))
    out[exact] = [str(x) for x in v[exact].astype(np.int64).tolist()]
    rest = v[~exact]
    digits = _g_digits(spec)
    if digits is None or len(rest) < DEDUPE_FORMAT_AT:
        out[~exact] = [format(x, spec) for x in rest.tolist()]
        return out
    import pandas as pd

    codes, uniq = pd.factorize(_printed_key(rest, digits), sort=False, use_na_sentinel=False)
    rep = np.empty(len(uniq), dtype=np.intp)
    rep[codes] = np.arange(len(rest))  # a row of each key (the last): its own value printed
    texts = np.array([format(x, spec) for x in rest[rep].tolist()], dtype=object)
    out[~exact] = texts[codes]
    return out


# `_fmt` formats at least this many values once per printed value; fewer one by one.
DEDUPE_FORMAT_AT = 64
# A value this close to a rounding tie (in units of its last printed digit) is its own key:
# the float product below is exact to ~1e-12 of a unit, so the key never splits on a tie.
TIE_MARGIN = 1e-6


def _g_digits(spec: str) -> int | None:
    """P of a '.<P>g' format spec (1 <= P <= 15), else None."""
    if len(spec) >= 3 and spec[0] == "." and spec[-1] == "g" and spec[1:-1].isdigit():
        p = int(spec[1:-1])
        return p if 1 <= p <= 15 else None
    return None


def _printed_key(x: np.ndarray, digits: int) -> np.ndarray:
    """Per value, a complex key equal for two values exactly when `format(_, '.<digits>g')`
    prints them alike, or finer: sign x q + 1j * k where the value rounds to q / 10^k (q of
    `digits` digits, or 10^digits on a round-up; Python prints the correctly rounded decimal,
    so values of one (sign, q, k) print the same text). Values whose rounding the float product
    cannot decide (within TIE_MARGIN of a tie, or q off its digit range after a log10 off by
    one near a power of ten), zeros, the very large and very small, inf and NaN are keyed on
    their own value (inf, NaN and the signed zeros apart: a key never merges two texts)."""
    a = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        normal = (a >= 1e-290) & (a <= 1e290)
        e = np.floor(np.log10(np.where(normal, a, 1.0)))
        k = (digits - 1) - e
        s = a * 10.0**k  # < 10^digits: an error of a few ulps is ~1e-12 of a unit
        whole = np.floor(s)
        frac = s - whole
        q = whole + (frac > 0.5)
    sure = normal & (np.abs(frac - 0.5) > TIE_MARGIN)
    sure &= (q >= 10.0 ** (digits - 1)) & (q <= 10.0**digits)
    key = np.copysign(q, x) + 1j * k
    if not sure.all():
        # keyed on the value itself: imaginary parts 10000-10005 no (q, k) key has (|k| < 330)
        own = ~sure
        finite = np.isfinite(x)
        tag = np.where(
            np.isnan(x),
            10003.0,
            np.where(
                ~finite,
                np.where(x > 0, 10001.0, 10002.0),
                np.where(x == 0, np.where(np.signbit(x), 10005.0, 10004.0), 10000.0),
            ),
        )
        real = np.where(finite & (x != 0), x, 0.0)
        key[own] = real[own] + 1j * tag[own]
    return key


def _miss_text(
    misses: Mapping[str, RangeMiss], flags: Mapping[str, np.ndarray], n: int
) -> np.ndarray:
    """Per configuration, '; '-joined '<part>: <input> <value> > <bound> (x<value / bound>)'
    for every input outside its model's range and the names of `flags` set ('' when none).
    Each part's text is formatted once per distinct (value, bound) it prints, and the texts
    are joined once per distinct combination of them over the batch (a sweep repeats them)."""
    merged = _merged(misses)
    if n <= FEW_ROWS:
        return _miss_text_rows(merged, flags, n)
    return _miss_text_grouped(merged, flags, n)


def _miss_text_grouped(
    merged: Mapping[str, RangeMiss], flags: Mapping[str, np.ndarray], n: int
) -> np.ndarray:
    """`_miss_text` of a batch: each text formatted once per distinct value (see there)."""
    codes: list[np.ndarray] = []
    tables: list[np.ndarray] = []
    for k, m in merged.items():
        rows = np.flatnonzero(m.outside)
        if not len(rows):
            continue
        # 6 significant digits: the text prints 4, rows that print alike share one text
        v = _round_sig(as_shape(m.value, m.excess.shape)[rows])
        b = _round_sig(as_shape(m.bound, m.excess.shape)[rows])
        inv, uniq = (_factorize if len(rows) < 64 else _pandas_factorize)(v + 1j * b)
        uv, ub = np.asarray(uniq).real, np.asarray(uniq).imag
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = _fmt(np.where(ub != 0, uv / ub, np.inf), ".3g")
        sym = np.where(uv > ub, " > ", " < ").tolist()
        fv, fb = _fmt(uv, ".4g").tolist(), _fmt(ub, ".4g").tolist()
        table = np.empty(len(fv), dtype=object)  # one f-string a text: 1.5x six object adds
        table[:] = [
            f"{k} {a}{s}{c} (x{r})" for a, s, c, r in zip(fv, sym, fb, ratio.tolist(), strict=True)
        ]
        tables.append(table)
        code = np.zeros(n, dtype=np.int64)
        code[rows] = np.ravel(inv) + 1
        codes.append(code)
    for k, f in flags.items():
        if np.any(f):
            tables.append(np.array([k], dtype=object))
            codes.append(np.asarray(f, dtype=np.int64))
    if not codes:
        return _const_object(n, "")
    factorize = _factorize if n < 64 else _pandas_factorize
    # each row's combination of codes as one integer, factorized only when the next code
    # would overflow it (once for a whole batch's keys, usually): the codes of a factorization
    # in first-come order do not depend on the steps before it
    group = np.zeros(n, dtype=np.int64)
    bound = 1  # group < bound
    for code, table in zip(codes, tables, strict=True):
        width = len(table) + 1
        if bound * width > GROUP_KEY_BOUND:
            group, uniq = factorize(group)
            bound = len(uniq)
        group = group * width + code
        bound *= width
    group, uniq = factorize(group)
    n_groups = len(uniq)
    rep = np.empty(n_groups, dtype=np.intp)
    rep[group] = np.arange(n)
    text = _const_object(n_groups, "")
    started = np.zeros(n_groups, dtype=bool)
    for code, table in zip(codes, tables, strict=True):
        c = code[rep]
        sel = np.flatnonzero(c)
        if not len(sel):
            continue
        part = table[c[sel] - 1]
        more = started[sel]
        if more.any():
            after = sel[more]
            if len(table) < len(after):  # "; " joined to the table's entries once, first
                part[more] = text[after] + ("; " + table)[c[after] - 1]
            else:
                part[more] = text[after] + "; " + part[more]
        text[sel] = part
        started[sel] = True
    return text[group]


# `_miss_text_grouped` packs the rows' codes into int64 keys below this bound.
GROUP_KEY_BOUND = 1 << 62

# Batches of at most this many configurations build their texts row by row: the grouping
# below pays off only when a sweep's rows repeat texts.
FEW_ROWS = 8


def _sig(x: float, digits: int = 6) -> float:
    """`_round_sig` of one number."""
    if x == 0.0 or not math.isfinite(x):
        return x
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(abs(x))))
    return round(x * scale) / scale


def _fmt_one(x: float, spec: str) -> str:
    """`_fmt` of one number."""
    if 1.0 <= abs(x) < 1e6 and x == round(x):
        return str(int(x))
    return format(x, spec)


def _miss_parts(m: RangeMiss, rows: np.ndarray) -> list[str]:
    """'<value> > <bound> (x<ratio>)' of a miss at `rows` (values to 6 significant digits),
    as `_miss_text` writes them, in plain Python: a few rows cost less than numpy's calls."""
    values = as_shape(m.value, m.excess.shape)[rows].tolist()
    bounds = as_shape(m.bound, m.excess.shape)[rows].tolist()
    out = []
    for x, y in zip(values, bounds, strict=True):
        v, b = _sig(float(x)), _sig(float(y))
        ratio = v / b if b != 0 else math.inf
        sym = " > " if v > b else " < "
        out.append(f"{_fmt_one(v, '.4g')}{sym}{_fmt_one(b, '.4g')} (x{_fmt_one(ratio, '.3g')})")
    return out


def _miss_text_rows(
    merged: Mapping[str, RangeMiss], flags: Mapping[str, np.ndarray], n: int
) -> np.ndarray:
    """`_miss_text` of a few configurations, row by row (the same texts)."""
    parts: list[list[str]] = [[] for _ in range(n)]
    for k, m in merged.items():
        rows = np.flatnonzero(m.outside)
        for r, text in zip(rows.tolist(), _miss_parts(m, rows), strict=True):
            parts[r].append(f"{k} {text}")
    for k, f in flags.items():
        for r in np.flatnonzero(as_shape(f, (n,))).tolist():
            parts[r].append(k)
    out = np.empty(n, dtype=object)
    out[:] = ["; ".join(p) for p in parts]
    return out


def _factorize(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values) by sorting: for small arrays (no pandas import)."""
    uniq, codes = np.unique(a, return_inverse=True)
    return codes.reshape(a.shape), uniq


def _pandas_factorize(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values) by hashing: O(n), where np.unique sorts."""
    import pandas as pd

    return pd.factorize(a, sort=False)


def _merged(misses: Mapping[str, RangeMiss]) -> dict[str, RangeMiss]:
    """Misses of one input that are the same on every configuration (the norms, residual adds
    and embedding of a too-wide model, prefill and decode alike) under one label:
    '<phases> <operators>: <input>', e.g. 'prefill+decode norm/input, embedding: width'."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    first: dict[tuple[Any, ...], RangeMiss] = {}
    # per input: its distinct misses so far, [miss, `_bytes_key` or None until compared]
    same_input: dict[tuple[str, bool], list[list[Any]]] = {}
    for label, m in misses.items():
        head, name = label.rsplit(": ", 1)
        o = m.outside
        if o.size <= FEW_ROWS:  # a few rows: the same key in plain Python
            out_at = o.ravel().tolist()
            v, b = (_flat(x, o.shape) for x in (m.value, m.bound))
            key = (
                name,
                " " in head,  # level3 apart
                tuple(out_at),
                tuple(x if k else 0.0 for x, k in zip(v, out_at, strict=True)),
                tuple(x if k else 0.0 for x, k in zip(b, out_at, strict=True)),
            )
        else:
            # the misses of one input compared by their bytes, those of an input no other
            # miss names never (most of a batch's: their bytes cost ~0.3 ms a miss)
            seen = same_input.setdefault((name, " " in head), [])
            mine = _bytes_key(m) if seen else None
            for i, other in enumerate(seen):
                if other[1] is None:
                    other[1] = _bytes_key(other[0])
                if other[1] == mine:
                    key = (name, " " in head, i)
                    break
            else:
                key = (name, " " in head, len(seen))
                seen.append([m, mine])
        groups.setdefault(key, []).append(head)
        first.setdefault(key, m)
    out: dict[str, RangeMiss] = {}
    for key, heads in groups.items():
        phases = list(dict.fromkeys(h.split(" ", 1)[0] for h in heads))
        ops = list(dict.fromkeys(h.split(" ", 1)[1] for h in heads if " " in h))
        where = "+".join(phases) + (" " + ", ".join(ops) if ops else "")
        out[f"{where}: {key[0]}"] = first[key]
    return out


def _bytes_key(m: RangeMiss) -> tuple[bytes, bytes, bytes]:
    """Where a miss is outside, and its value and bound there (0 elsewhere), as bytes: two
    misses of one input with equal keys print the same texts."""
    o = m.outside
    v = np.where(o, m.value, 0.0)  # of o's shape: value and bound broadcast to it
    b = np.where(o, m.bound, 0.0)
    return o.tobytes(), v.tobytes(), b.tobytes()


def _flat(x: Any, shape: tuple[int, ...]) -> list[float]:
    """x broadcast to `shape`, as a flat list."""
    return as_shape(x, shape).ravel().tolist()


def _round_sig(v: np.ndarray, digits: int = 6) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.where(v != 0, np.floor(np.log10(np.abs(v))), 0.0)
    scale = 10.0 ** (digits - 1 - mag)
    return np.round(v * scale) / scale


def _const_object(n: int, value: str) -> np.ndarray:
    """An object array of one repeated string (40x faster than np.full with dtype=object)."""
    a = np.empty(n, dtype=object)
    a.fill(value)
    return a

"""`flags._fmt` formats each printed value once (issue 37): its texts must be those of
`format` value by value, byte for byte, whatever the values (integers, ties, powers of ten,
signed zeros, inf, NaN, the very large and very small) and the spec."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict.flags import DEDUPE_FORMAT_AT, _fmt, _printed_key


def _reference(v: np.ndarray, spec: str) -> list[str]:
    """`_fmt` as it was before the deduplication, value by value."""
    out = []
    for x in v.tolist():
        if 1 <= abs(x) < 1e6 and x == round(x):
            out.append(str(int(x)))
        else:
            out.append(format(x, spec))
    return out


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Wide values: log-uniform 1e-7..1e9 and 1e-300..1e300 of either sign, integers, ratios,
    rounding ties (k / 16, k / 1024, k + 0.5), neighbours of powers of ten, specials."""
    sign = rng.choice([-1.0, 1.0], n)
    parts = [
        sign * 10.0 ** rng.uniform(-7, 9, n),
        sign[: n // 4] * 10.0 ** rng.uniform(-300, 300, n // 4),
        rng.integers(-(10**9), 10**9, n // 4).astype(float),
        rng.integers(1, 10**6, n // 4).astype(float),
        np.round(rng.uniform(1, 50, n // 4), 3),
        rng.integers(1, 100_000, n // 4) / 16.0,
        rng.integers(1, 100_000, n // 4) / 1024.0,
        rng.integers(0, 10_000, n // 4) + 0.5,
        rng.integers(1, 10**6, n // 4) * 1e4 + 5000.0,
        [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, 1.7e308, -1.7e308],
    ]
    tens = 10.0 ** np.arange(-12, 13)
    for t in (tens, tens * 9.9995, tens * 9.995, tens * 0.99995, tens * 999.95, tens * 99995):
        parts += [t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf), -t]
    v = np.concatenate([np.asarray(p, dtype=float) for p in parts])
    return np.concatenate([v, rng.choice(v, n)])  # each value repeated somewhere


@pytest.mark.parametrize("spec", [".4g", ".3g", ".1g", ".6g", ".10g"])
def test_texts_equal_format_value_by_value(spec: str) -> None:
    v = _values(np.random.default_rng(37), 20_000)
    assert len(v) >= DEDUPE_FORMAT_AT
    assert _fmt(v, spec).tolist() == _reference(v, spec)


def test_miss_texts_of_six_digit_values() -> None:
    """The values `_miss_text` prints: rounded to 6 significant digits first, and their
    ratios, as its tables format them."""
    rng = np.random.default_rng(38)
    v = np.round(10.0 ** rng.uniform(-3, 11, 30_000), 2)
    b = rng.choice([64.0, 2048.0, 1.074e9, 0.9, 3.5e-2], v.size)
    for x, spec in ((v, ".4g"), (b, ".4g"), (v / b, ".3g")):
        assert _fmt(x, spec).tolist() == _reference(x, spec)


def test_a_key_never_merges_two_texts() -> None:
    """Two values with one key print the same text (the key may split equal texts)."""
    v = _values(np.random.default_rng(39), 5_000)
    v = v[~((np.abs(v) >= 1) & (np.abs(v) < 1e6) & (v == np.round(v)))]
    for digits in (1, 3, 4, 6):
        key = _printed_key(v, digits)
        text: dict[complex, str] = {}
        for k, x in zip(key.tolist(), v.tolist(), strict=True):
            t = format(x, f".{digits}g")
            assert text.setdefault(k, t) == t, (k, x)


def test_other_specs_and_few_values_take_the_plain_path() -> None:
    v = np.array([1.5, 2.25, -3.125e9, np.inf] * 40)
    assert _fmt(v, ".2f").tolist() == _reference(v, ".2f")
    assert _fmt(v[:5], ".3g").tolist() == _reference(v[:5], ".3g")


def _large_batch(wide: bool) -> tuple[dict, dict, int]:
    """(merged misses, flags, n) of a mostly distinct 3,000-row batch: freely drawn values,
    repeated ones, tables larger and smaller than the texts they extend, flags. `wide`:
    message sizes to 1e11 (6-digit rounding by a scale below 1, where `_round_sig` and the
    row path's `_sig` can already differ by an ulp on main); else values whose 6-digit
    rounding both paths do alike."""
    from dse.models.base import RangeMiss

    rng = np.random.default_rng(40)
    n = 3_000
    labels = (
        "prefill allreduce: message_bytes",
        "decode attention/core: num_kv_heads",
        "level3: batch",
        "level3: prompt",
        "level3: kv_fill",
        "prefill gemm: n",
    )
    values = [
        np.round(10.0 ** rng.uniform(6, 11, n)) if wide else 10.0 ** rng.uniform(-3, 5.9, n),
        rng.choice([10.0, 16.0, 32.0], n),
        rng.integers(1, 129, n).astype(float),
        rng.integers(16, 8193, n).astype(float),
        10.0 ** rng.uniform(-7, 2, n) * rng.choice([-1.0, 1.0], n),
        rng.choice([1024.5, 0.001234567, 131072.0, 7.0, 1.0625], n),
    ]
    bounds = [1.07374e9 if wide else 12.5, 8.0, 64.0, 2048.0, 2.22807, 0.0, 0.5]
    merged = {}
    for i, label in enumerate(labels):
        bound = rng.choice(bounds[i : i + 2], n)
        excess = np.where(rng.random(n) < 0.5, 1.0, 0.0)
        merged[label] = RangeMiss(excess, values[i], bound)
    flags = {"level3: engine": rng.random(n) < 0.3}
    return merged, flags, n


def test_a_large_batch_writes_the_texts_of_format_value_by_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The grouped texts of a mostly distinct batch equal those it writes with every value
    formatted one by one (`_fmt` as it was)."""
    from dse.predict import flags as F

    for wide in (True, False):
        merged, flags, n = _large_batch(wide)
        got = F._miss_text_grouped(merged, flags, n)
        with monkeypatch.context() as mp:
            mp.setattr(F, "_fmt", lambda v, spec: np.array(_reference(v, spec), dtype=object))
            want = F._miss_text_grouped(merged, flags, n)
        assert got.tolist() == want.tolist()
        assert len(set(got.tolist())) > n // 2


def test_a_large_batch_writes_the_row_by_row_texts() -> None:
    """... and the plain-Python row-by-row texts ("; " joined to small tables first, or to
    each text), byte for byte."""
    from dse.predict import flags as F

    merged, flags, n = _large_batch(wide=False)
    got = F._miss_text_grouped(merged, flags, n)
    assert got.tolist() == F._miss_text_rows(merged, flags, n).tolist()


def test_merged_labels_are_those_of_keying_every_miss_on_its_bytes() -> None:
    """`_merged` compares the bytes of misses only when another miss names the same input:
    its labels and misses are those of keying every miss on its bytes (as it did)."""
    from dse.models.base import RangeMiss
    from dse.predict import flags as F

    rng = np.random.default_rng(41)
    n = 500
    wide = RangeMiss(
        np.where(rng.random(n) < 0.3, 1.0, 0.0), rng.integers(1, 9, n) * 1024.0, 9216.0
    )
    other = RangeMiss(np.where(rng.random(n) < 0.3, 1.0, 0.0), np.full(n, 640.0), 1024.0)
    misses = {
        "prefill attention/rope: width": wide,
        "prefill allreduce: message_bytes": other,
        "prefill level2.attention_proj: width": other,  # same input, other arrays
        "decode attention/rope: width": RangeMiss(wide.excess.copy(), wide.value.copy(), 9216.0),
        "decode level2.attention_proj: width": other,
        "level3: width": wide,  # level 3 apart
        "level3: prompt": RangeMiss(np.zeros(n), np.zeros(n), 2048.0),
    }

    def by_bytes() -> list[tuple[str, int]]:
        groups: dict[tuple, list[str]] = {}
        first: dict[tuple, RangeMiss] = {}
        for label, m in misses.items():
            head, name = label.rsplit(": ", 1)
            o = m.outside
            v, b = np.where(o, m.value, 0.0), np.where(o, m.bound, 0.0)
            key = (name, " " in head, o.tobytes(), v.tobytes(), b.tobytes())
            groups.setdefault(key, []).append(head)
            first.setdefault(key, m)
        out = []
        for key, heads in groups.items():
            phases = list(dict.fromkeys(h.split(" ", 1)[0] for h in heads))
            ops = list(dict.fromkeys(h.split(" ", 1)[1] for h in heads if " " in h))
            where = "+".join(phases) + (" " + ", ".join(ops) if ops else "")
            out.append((f"{where}: {key[0]}", id(first[key])))
        return out

    got = [(k, id(m)) for k, m in F._merged(misses).items()]
    assert got == by_bytes()
    assert "prefill+decode attention/rope: width" in dict(got)
    assert "prefill+decode level2.attention_proj: width" in dict(got)


def test_group_keys_factorized_before_they_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows' codes packed into one integer, factorized whenever the next code would pass
    GROUP_KEY_BOUND: the same texts with a bound that factorizes after every key."""
    from dse.predict import flags as F

    merged, flags, n = _large_batch(wide=True)
    want = F._miss_text_grouped(merged, flags, n)
    monkeypatch.setattr(F, "GROUP_KEY_BOUND", 2)
    assert F._miss_text_grouped(merged, flags, n).tolist() == want.tolist()

"""`dse.spec.columns.Configs`: the checked batch (issue 36). Made only by the checker
(`as_columns` / `Configs.check`), read-only, and its checks cannot be skipped by changing it."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.errors import ConfigError
from dse.spec import columns as C
from dse.spec.space import load_space

BASE = {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 8}


def _raw(n: int = 3) -> dict[str, np.ndarray]:
    return {k: np.full(n, v) for k, v in BASE.items()} | {"batch_size": np.arange(1, n + 1)}


def test_a_configs_is_made_by_the_checker_only() -> None:
    with pytest.raises(TypeError, match=r"made by dse\.spec\.columns\.as_columns"):
        C.Configs({}, 0)
    with pytest.raises(TypeError, match="not built directly"):
        C.Configs({"gpu": np.array(["h100_sxm"])}, 1, _key=object())
    cols, n = C.as_columns(_raw())
    assert isinstance(cols, C.Configs) and cols.n == n == 3
    assert isinstance(C.Configs.check(_raw()), C.Configs)


def test_a_checked_batch_is_not_checked_again() -> None:
    cols = C.Configs.check(_raw())
    assert C.Configs.check(cols) is cols
    assert C.as_columns(cols) == (cols, 3)


def test_it_reads_as_the_complete_columns_of_as_columns() -> None:
    cols, n = C.as_columns(_raw())
    assert set(C.CONFIG_FIELDS) <= set(cols) and "head_dim_defaulted" in cols
    assert all(len(v) == n for v in cols.values())
    assert list(cols["head_dim"]) == [16, 16, 16]  # d_model / n_heads
    assert cols.get("no such column") is None and "d_model" in cols
    assert dict(cols).keys() == cols.keys()


def test_its_arrays_reject_writes() -> None:
    cols = C.Configs.check(_raw())
    for name, v in cols.items():
        assert not v.flags.writeable, name
    with pytest.raises(ValueError, match="read-only"):
        cols["batch_size"][0] = 10**9
    with pytest.raises(TypeError):
        cols["batch_size"] = np.zeros(3)  # type: ignore[index]
    assert list(cols["batch_size"]) == [1, 2, 3]


def test_the_callers_arrays_stay_writeable() -> None:
    raw = _raw()
    C.as_columns(raw)
    for name, v in raw.items():
        assert v.flags.writeable, name
    raw["batch_size"][0] = 7  # the caller's array is not the checked column
    cols, _ = C.as_columns(_raw())
    assert cols["batch_size"][0] == 1
    frame = pd.DataFrame(_raw())
    cols, _ = C.as_columns(frame)
    frame.loc[0, "batch_size"] = 9  # the frame's columns are not frozen either
    assert cols["batch_size"][0] == 1 and not cols["batch_size"].flags.writeable


def test_a_changed_copy_is_checked_again() -> None:
    """dict(configs) is a plain mapping: changing a column there and predicting it checks it."""
    cols = C.Configs.check(_raw())
    changed = dict(cols)
    changed["batch_size"] = np.array([1, 0, 3])
    with pytest.raises(ConfigError, match=r"batch_size\[1\]: must be an integer"):
        C.as_columns(changed)


def test_take_and_with_columns_keep_it_checked() -> None:
    cols = C.Configs.check(_raw())
    part = cols.take(np.array([2, 0]))
    assert isinstance(part, C.Configs) and part.n == 2
    assert list(part["batch_size"]) == [3, 1] and not part["batch_size"].flags.writeable
    mask = cols.take(np.array([True, False, True]))
    assert list(mask["batch_size"]) == [1, 3]
    more = cols.with_columns({"training_tokens": np.full(3, 10**12)})
    assert list(more["training_tokens"]) == [10**12] * 3
    assert not more["training_tokens"].flags.writeable
    assert "training_tokens" not in cols  # a new Configs: this one is unchanged
    with pytest.raises(ValueError, match="checked columns are not replaced"):
        cols.with_columns({"batch_size": np.zeros(3)})
    with pytest.raises(ValueError, match="must hold 3 rows"):
        cols.with_columns({"training_tokens": np.zeros(2)})


def test_a_pickled_configs_comes_back_frozen() -> None:
    cols = C.Configs.check(_raw())
    back = pickle.loads(pickle.dumps(cols))
    assert isinstance(back, C.Configs) and back.n == 3
    assert list(back["batch_size"]) == [1, 2, 3] and not back["batch_size"].flags.writeable


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_size": np.array([1, 0, 3])}, r"^batch_size\[1\]: must be an integer in \[1, "),
        ({"n_heads": np.array([4, 4.5, 4])}, r"^n_heads\[1\]: must be an integer"),
        ({"d_model": None}, r"^configuration is missing required field\(s\): d_model"),
    ],
)
def test_invalid_input_raises_the_same_located_error(change: dict, message: str) -> None:
    raw = _raw() | change
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        C.as_columns(raw)
    with pytest.raises(ConfigError, match=message):
        C.Configs.check(raw)


def test_a_space_batch_is_a_configs(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: s\nhardware: h100_sxm\nspace:\n  d_model: {values: [64, 128]}\n  n_layers: 2\n"
        "  n_heads: 4\n  d_ff: 256\n  training_tokens: 1.0e+9\nobjectives:\n"
        "  latency: {metric: request}\n  energy: {source: hymell}\n"
    )
    space = load_space(p)
    cols = space.columns_from([{"d_model": 64}, {"d_model": 128}])
    assert isinstance(cols, C.Configs) and cols.n == 2
    assert list(cols["d_model"]) == [64, 128] and list(cols["training_tokens"]) == [10**9] * 2
    assert all(not v.flags.writeable for v in cols.values())
    assert isinstance(space.enumerate(), C.Configs)


def test_an_empty_column_takes_the_fields_default() -> None:
    """A column of None (a CSV's empty gpu column read into a dict) is an absent column: the
    field's default, not an AttributeError deep in the checker."""
    base = dict(d_model=[4096], n_layers=[32], n_heads=[32], n_kv_heads=[8], d_ff=[14336],
                vocab_size=[128256])  # fmt: skip
    cols, _ = C.as_columns({**base, "gpu": [None], "batch_size": [None]})
    ref, _ = C.as_columns(base)
    assert cols["gpu"][0] == ref["gpu"][0] and cols["batch_size"][0] == ref["batch_size"][0]
    cols, _ = C.as_columns({**base, "gpu": None})
    assert cols["gpu"][0] == ref["gpu"][0]

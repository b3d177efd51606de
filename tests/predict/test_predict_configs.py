"""`predict` takes a checked batch (`dse.spec.columns.Configs`) as it is and checks any other
input as before (issue 36: a sweep's batch was completed and checked twice)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dse.errors import ConfigError
from dse.predict import predict
from dse.spec import columns as C
from tests.predict.test_golden_small import golden_configs


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every call of the checker (`as_columns`), by its input."""
    calls: list[Any] = []
    real = C.as_columns

    def counted(configs: Any, **kw: Any) -> Any:
        calls.append(configs)
        return real(configs, **kw)

    monkeypatch.setattr(C, "as_columns", counted)
    yield calls


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y, err_msg=k)  # NaN == NaN here
        else:
            assert (x == y).all(), k


def test_predict_on_a_configs_equals_predict_on_the_same_dict() -> None:
    cfg = golden_configs(120)  # every registered GPU, both engines, fp8, queued batches
    assert len(np.unique(cfg["gpu"])) > 1
    _same(predict(C.Configs.check(cfg)), predict(cfg))


def test_a_configs_is_not_checked_again(checks: list[Any]) -> None:
    cfg = golden_configs(30)
    checked = C.Configs.check(cfg)
    assert len(checks) == 1
    predict(checked)
    assert len(checks) == 1  # predict took it as it is
    predict(cfg)
    assert len(checks) == 2 and checks[-1] is cfg  # a dict is checked at predict's entry


def test_a_changed_copy_of_a_configs_is_checked_again(checks: list[Any]) -> None:
    part = dict(C.Configs.check(golden_configs(4)))
    part["batch_size"] = np.array([1, 2, 0, 4])
    with pytest.raises(ConfigError, match=r"^batch_size\[2\]: must be an integer in \[1, "):
        predict(part)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_size": [1, 0]}, r"^batch_size\[1\]: must be an integer in \[1, \d+\], got 0$"),
        ({"engine": ["vllm", "nope"]}, r"^engine\[1\]: must be one of .*, got 'nope'$"),
    ],
)
def test_invalid_input_raises_the_same_located_error(change: dict, message: str) -> None:
    raw = {"d_model": [64, 64], "n_layers": [2, 2], "n_heads": [4, 4], "d_ff": [8, 8], **change}
    with pytest.raises(ConfigError, match=message) as by_predict:
        predict(raw)
    with pytest.raises(ConfigError) as by_checker:
        C.as_columns(raw)
    assert str(by_predict.value) == str(by_checker.value)

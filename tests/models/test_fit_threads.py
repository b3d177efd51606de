"""Every model's fit runs with one BLAS / OpenMP thread unless `fit_threads` widens it
(`dse.models.threads`): whoever calls it, `dse fit`, a family's CV or a test. Nothing here
sets the machine's BLAS settings; the fits set their own limit and restore the caller's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from dse.models import MODEL_CLASSES, model_class
from dse.models.threads import current, fit_threads, threaded_fit


def _blas_threads() -> list[int]:
    return [int(p["num_threads"]) for p in threadpool_info() if p["user_api"] == "blas"]


class _Probe:
    """A stand-in model whose fit records the BLAS threads it ran with, and nests a fit."""

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    @threaded_fit
    def fit(self, depth: int = 0) -> _Probe:
        self.seen.append(_blas_threads())
        if depth:
            self.fit(depth - 1)
        return self


@pytest.mark.parametrize("kind", sorted(MODEL_CLASSES))
def test_every_model_class_fits_under_the_thread_rule(kind: str) -> None:
    fit = model_class(kind).fit
    assert getattr(fit, "__wrapped__", None) is not None, f"{kind}: fit is not @threaded_fit"


def test_a_fit_runs_with_one_blas_thread_and_restores_the_callers() -> None:
    if not _blas_threads():
        pytest.skip("no BLAS library that threadpoolctl can see")
    before = _blas_threads()
    probe = _Probe().fit(depth=2)
    assert probe.seen == [[1] * len(before)] * 3  # the fit and its nested fits
    assert _blas_threads() == before  # the caller's setting is back


def test_fit_threads_widens_and_nests() -> None:
    if not _blas_threads():
        pytest.skip("no BLAS library that threadpoolctl can see")
    before = _blas_threads()
    # OpenBLAS may not go past the threads it started with (OMP_NUM_THREADS=1 in the caller's
    # environment), or may (a build that allocates more on request): either is the library's
    lo = min(2, max(before))
    assert current() == 1
    with fit_threads(2):
        assert current() == 2
        probe = _Probe().fit()
        assert len(probe.seen) == 1 and all(lo <= t <= 2 for t in probe.seen[0]), probe.seen
        with fit_threads(1):
            assert _Probe().fit().seen == [[1] * len(before)]
        assert current() == 2
    assert current() == 1 and _blas_threads() == before


def test_a_real_fit_sees_one_thread(monkeypatch: Any) -> None:
    """An actual model class: the all-reduce curve fit, its least squares watched."""
    if not _blas_threads():
        pytest.skip("no BLAS library that threadpoolctl can see")
    import pandas as pd

    from dse.models import _curves

    seen: list[list[int]] = []
    real = _curves.relative_lstsq

    def watched(*a: Any, **k: Any) -> Any:
        seen.append(_blas_threads())
        return real(*a, **k)

    monkeypatch.setattr(_curves, "relative_lstsq", watched)
    msg = np.geomspace(2**10, 2**28, 19)
    rows = pd.DataFrame(
        {
            "gpu": "h100_sxm",
            "op": "all_reduce",
            "n_gpus": 8,
            "n_nodes": 1,
            "message_bytes": msg,
            "latency_s": 8e-6 + msg / 2e11,
        }
    )
    model_class("allreduce")("h100_sxm").fit(rows)
    assert seen and all(s == [1] * len(s) for s in seen)

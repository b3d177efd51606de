"""How many BLAS / OpenMP threads a model's fit runs with (`fit_threads`, `threaded_fit`).

A fit here is thousands of small solves (least squares of a few knots, trees, MLPs on a few
thousand rows): extra BLAS or OpenMP threads add synchronisation and contend with any other
process on the machine, and save nothing. With the machine's default of one OpenBLAS thread
per core, the all-reduce family's CV (~40,000 least squares of 3-30 columns) took 360 s on the
2-core VM while two other fits ran, against 25-52 s with one thread. So every model's `fit` runs
with `current()` threads: 1 unless a caller widened it with `fit_threads` (`dse fit --threads`),
whoever calls it (`dse fit`, a family's CV, a test, a notebook), and the fitted numbers do not
depend on the cores of the machine that fitted them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_THREADS: ContextVar[int] = ContextVar("dse_fit_threads", default=1)
# The limit in force around the running code (None: none of ours): a fit inside another fit
# or inside `fit_threads` skips re-applying it (threadpoolctl rescans the loaded libraries on
# every limit, 1-5 ms, and a family's CV runs hundreds of fits).
_APPLIED: ContextVar[int | None] = ContextVar("dse_fit_threads_applied", default=None)


def current() -> int:
    """The BLAS / OpenMP threads a fit runs with now."""
    return _THREADS.get()


@contextmanager
def fit_threads(n: int) -> Iterator[None]:
    """Fits inside run with `n` BLAS / OpenMP threads (the code between them too)."""
    from threadpoolctl import threadpool_limits

    token, applied = _THREADS.set(int(n)), _APPLIED.set(int(n))
    try:
        with threadpool_limits(int(n)):
            yield
    finally:
        _APPLIED.reset(applied)
        _THREADS.reset(token)


def threaded_fit(fit: F) -> F:
    """A model's `fit` run with `current()` BLAS / OpenMP threads (see the module doc)."""

    @functools.wraps(fit)
    def run(*args: Any, **kwargs: Any) -> Any:
        n = current()
        if _APPLIED.get() == n:
            return fit(*args, **kwargs)
        from threadpoolctl import threadpool_limits

        applied = _APPLIED.set(n)
        try:
            with threadpool_limits(n):
                return fit(*args, **kwargs)
        finally:
            _APPLIED.reset(applied)

    return run  # type: ignore[return-value]

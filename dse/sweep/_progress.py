"""What a sweep shows while it runs: Ctrl-C handling (stop after the batch) and the tqdm bar with
the feasible fraction, front size and hypervolume so far."""

from __future__ import annotations

import signal
import sys
import threading
import warnings
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from dse import pareto


class StopFlag:
    """Ctrl-C (or SIGTERM) asks the loop to stop after the current batch; a second Ctrl-C
    aborts at once (the unfinished batch is then simply not recorded)."""

    def __init__(self, quiet: bool, unit: str = "batch") -> None:
        self.unit = unit  # what the loop finishes before stopping: a batch, or a chunk
        self.requested = False
        self._quiet = quiet
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            f"\ndse: stopping after the current {self.unit} (Ctrl-C again to abort it)",
            file=sys.stderr,
        )

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


class Progress:
    """tqdm on stderr: trials done of the budget, feasible fraction, front size, hypervolume."""

    def __init__(
        self,
        total: int,
        initial: int,
        quiet: bool,
        m: int,
        desc: str,
        directions: tuple[str, ...] | list[str] | None = None,
    ) -> None:
        self.quiet = quiet
        self._directions = directions  # per objective; None: all minimised
        self._front = np.empty((0, m))
        self._n = 0
        self._feasible = 0
        self._bar: Any = None
        if not quiet:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit="trial",
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=0.5,
            )

    def add(self, objectives: np.ndarray, feasible: np.ndarray) -> None:
        ok = feasible & np.isfinite(objectives).all(axis=1)
        self._n += len(feasible)
        self._feasible += int(ok.sum())
        if ok.any():
            self._front = pareto.merge_front(self._front, objectives[ok], self._directions)

    def show(self, done: int) -> None:
        if self._bar is None:
            return
        norm = pareto.normalisation(self._front, self._directions)
        hv = pareto.hypervolume(self._front, norm) if norm is not None else 0.0
        frac = self._feasible / self._n if self._n else 0.0
        self._bar.n = done
        self._bar.set_postfix_str(
            f"feasible {frac:.0%} front {len(self._front)} hv {hv:.3f}", refresh=False
        )
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")


def progress_add(progress: Progress, t: optuna.trial.FrozenTrial) -> None:
    if t.state == TrialState.COMPLETE and t.values is not None:
        ok = all(v <= 0 for v in t.constraints.values())
        progress.add(np.asarray([t.values], dtype=float), np.asarray([ok]))

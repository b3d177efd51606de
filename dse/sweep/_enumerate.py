"""Exhaustive evaluation of a discrete space in vectorised chunks, and its exact Pareto front.

`exact_front(space)` walks the space in enumeration order, chunk by chunk (columns are built
from the configuration index, so the whole space is never materialised), evaluates each chunk
in one predictor call and keeps only the running front, so memory stays bounded by the chunk.
It is the reference of `--reference exact` and of the search-quality benchmark.

The `exact` sampler runs the same enumeration resumably: `enumerate_space` evaluates the
chunks not yet done (one process, or tasks on a Dask cluster), merges each chunk's front into
the running one as it finishes, and after every chunk rewrites a small sidecar file (the done
chunks, their summed counts and the running front) atomically, so a SIGKILL loses at most the
chunk in flight and never counts one twice. `record_trials` then turns the front, plus a
seeded sample of the rest of the space (the report's clouds), into finished Optuna trials.
"""

from __future__ import annotations

import itertools
import json
import logging
import signal
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dse import pareto
from dse._heap import keep_freed
from dse.errors import ConfigError
from dse.files import atomic_path
from dse.spec.space import SearchSpace
from dse.sweep._evaluate import Evaluation, Predictor, evaluate
from dse.sweep._grid_derived import grid_derived
from dse.sweep.space_index import (
    canonical_index,
    constant_columns,
    space_columns,
    space_digits,
)

CHUNK = 131_072  # configurations per predictor call: ~1 s of work, ~100 MB of arrays
PROGRESS_FILE = "exact_progress.npz"  # the sidecar of a running `exact` enumeration
SAMPLE = 2_000  # configurations off the front recorded as trials (the report's clouds)
SYNC_S = 1.0  # seconds between fsyncs of the sidecar (it is written after every chunk)


@dataclass
class ExactFront:
    """The exact feasible front of a space and the counts behind it."""

    index: np.ndarray  # configuration indices on the front (one per distinct point), sorted
    objectives: np.ndarray  # (k, m) their objective values
    total: int  # configurations evaluated
    valid: int
    feasible: int
    elapsed_s: float = 0.0
    directions: tuple[str, ...] | None = None  # per objective; None: all minimised

    @property
    def normalisation(self) -> pareto.Normalisation | None:
        return pareto.normalisation(self.objectives, self.directions)

    def hypervolume(self) -> float | None:
        norm = self.normalisation
        return None if norm is None else pareto.hypervolume(self.objectives, norm)


def exact_front(
    space: SearchSpace,
    *,
    chunk: int = CHUNK,
    predictor: Predictor | None = None,
    progress: object | None = None,
) -> ExactFront:
    """Evaluate every configuration of `space` and return its exact feasible Pareto front.

    `progress`, if given, is a tqdm-like object whose `update(n)` is called per chunk.
    """
    import time

    t0 = time.perf_counter()
    keep_freed()  # the chunks' arrays reuse the heap, not fresh pages (`dse._heap`)
    total = space.size()
    m = len(space.objectives.names)
    front_idx = np.empty(0, dtype=np.int64)
    front_obj = np.empty((0, m))
    valid = feasible = 0
    for start in range(0, total, chunk):
        idx = np.arange(start, min(start + chunk, total), dtype=np.int64)
        ev = _evaluate_scan(space, idx, predictor)
        valid += int(ev.valid.sum())
        feasible += int(ev.feasible.sum())
        ok = _front_candidates(space, idx, ev)
        # Earlier chunks first, so among equal points the lowest index stays.
        cand_idx = np.concatenate([front_idx, idx[ok]])
        cand_obj = np.vstack([front_obj, ev.objectives[ok]])
        keep = pareto.nondominated(cand_obj, directions=space.objectives.directions)
        front_idx, front_obj = cand_idx[keep], cand_obj[keep]
        if progress is not None:
            progress.update(len(idx))  # type: ignore[attr-defined]
    sign = pareto.signs(space.objectives.directions, m)  # best first in the first objective
    order = (
        np.lexsort((front_idx, sign[0] * front_obj[:, 0])) if len(front_idx) else np.empty(0, int)
    )
    return ExactFront(
        index=front_idx[order],
        objectives=front_obj[order],
        total=total,
        valid=valid,
        feasible=feasible,
        elapsed_s=time.perf_counter() - t0,
        directions=space.objectives.directions,
    )


def _front_candidates(space: SearchSpace, idx: np.ndarray, ev: Evaluation) -> np.ndarray:
    """Rows that may be on the front: feasible, finite, and the first of the configurations
    equal to them but for fields they ignore (`dse.spec.inert`: the others are the same
    configuration again, counted in the enumeration but never on the front)."""
    ok = ev.feasible & np.isfinite(ev.objectives).all(axis=1)
    return ok & (canonical_index(space, idx) == idx)


def _evaluate_scan(space: SearchSpace, idx: np.ndarray, predictor: Predictor | None) -> Evaluation:
    """A scan's evaluation of the configurations at `idx`: only the feasible front and the
    counts are kept (no texts, feasible rows predicted), the rules and sizes read from the
    space's grid tables where it has them (`dse.sweep._grid_derived`: ~40 ms of a
    131,072-row chunk's ~55 ms of `derived` on one core), and so are the sizes the default
    predictor's Level-3 KV inputs read (`request.KV_SIZE_COLUMNS`)."""
    grid = grid_derived(space)
    digits = space_digits(space, idx) if space.searched else None
    cols = space_columns(space, idx, digits)
    derived, sizes = None, None
    if grid is not None and digits is not None:
        derived, sizes = grid.with_sizes(cols, digits)
    return evaluate(
        space,
        cols,
        predictor=predictor,
        with_tokens2wh=False,
        texts=False,
        feasible_only=True,
        derived=derived,
        constant=constant_columns(space),
        kv_sizes=sizes,
    )


def evaluate_index(
    space: SearchSpace, index: np.ndarray, predictor: Predictor | None = None
) -> tuple[dict[str, np.ndarray], Evaluation]:
    """Columns and full evaluation (tokens-to-Wh included) of chosen configurations."""
    cols = space_columns(space, index)
    return cols, evaluate(space, cols, predictor=predictor)


# ------------------------------------------------------------------ the `exact` sampler
@dataclass
class ChunkResult:
    """What one chunk contributes: its own feasible front and its counts."""

    chunk: int
    index: np.ndarray  # (k,) configuration indices of the chunk's front
    objectives: np.ndarray  # (k, m)
    total: int
    valid: int
    feasible: int


def evaluate_chunk(
    space: SearchSpace, chunk: int, chunk_size: int, predictor: Predictor | None = None
) -> ChunkResult:
    """Evaluate configurations [chunk * chunk_size, ...) and keep only their front (pure: the
    unit of work of one core or of one Dask task)."""
    keep_freed()  # the chunks' arrays reuse the heap, not fresh pages (`dse._heap`)
    size = space.size()
    start = chunk * chunk_size
    idx = np.arange(start, min(start + chunk_size, size), dtype=np.int64)
    ev = _evaluate_scan(space, idx, predictor)
    ok = _front_candidates(space, idx, ev)
    keep = pareto.nondominated(ev.objectives[ok], directions=space.objectives.directions)
    return ChunkResult(
        chunk=chunk,
        index=idx[ok][keep],
        objectives=ev.objectives[ok][keep],
        total=len(idx),
        valid=int(ev.valid.sum()),
        feasible=int(ev.feasible.sum()),
    )


@dataclass
class Enumeration:
    """The running state of an `exact` enumeration (what the sidecar file holds)."""

    key: dict[str, Any]  # study, space hash, size and chunk size it belongs to
    done: np.ndarray  # (chunks,) bool: chunk finished and merged
    index: np.ndarray  # running front: configuration indices, ascending
    objectives: np.ndarray  # (k, m)
    total: int = 0
    valid: int = 0
    feasible: int = 0
    elapsed_s: float = 0.0  # enumeration time summed over runs (resumes included)
    directions: tuple[str, ...] | None = field(default=None, repr=False)

    @classmethod
    def new(cls, key: dict[str, Any], m: int, directions: Any) -> Enumeration:
        chunks = -(-int(key["size"]) // int(key["chunk"]))
        return cls(
            key=key,
            done=np.zeros(chunks, dtype=bool),
            index=np.empty(0, dtype=np.int64),
            objectives=np.empty((0, m)),
            directions=tuple(directions) if directions else None,
        )

    @property
    def complete(self) -> bool:
        return bool(self.done.all())

    def merge(self, r: ChunkResult) -> None:
        """Merge one chunk's front and counts (a chunk already merged is ignored)."""
        if self.done[r.chunk]:
            return
        idx = np.concatenate([self.index, r.index])
        obj = np.vstack([self.objectives, r.objectives])
        # Candidates in index order, so among equal points the lowest index stays whatever
        # order the chunks finish in (one core, a resume, or a cluster).
        order = np.argsort(idx, kind="stable")
        idx, obj = idx[order], obj[order]
        keep = pareto.nondominated(obj, directions=self.directions)
        self.index, self.objectives = idx[keep], obj[keep]
        self.total += r.total
        self.valid += r.valid
        self.feasible += r.feasible
        self.done[r.chunk] = True

    def save(self, path: Path, sync: bool = True) -> None:
        """Write the state atomically (temporary file, rename): a reader or a killed run sees
        either the previous state or this one. `sync`: fsync it first (`atomic_path`), so an
        operating-system crash cannot leave a renamed file without its data; unsynced, such
        a crash may lose the latest states (the file then reads as an older one or none)."""
        with atomic_path(path, sync=sync) as tmp, open(tmp, "wb") as f:
            np.savez(
                f,
                key=np.asarray(json.dumps(self.key, sort_keys=True)),
                done=self.done,
                index=self.index,
                objectives=self.objectives,
                counts=np.asarray([self.total, self.valid, self.feasible], dtype=np.int64),
                elapsed_s=np.asarray(self.elapsed_s),
            )

    @classmethod
    def load(cls, path: Path, directions: Any) -> Enumeration | None:
        """The state saved at `path`, or None when there is none (or it cannot be read)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                counts = z["counts"]
                return cls(
                    key=json.loads(str(z["key"])),
                    done=z["done"].astype(bool),
                    index=z["index"].astype(np.int64),
                    objectives=z["objectives"].astype(float),
                    total=int(counts[0]),
                    valid=int(counts[1]),
                    feasible=int(counts[2]),
                    elapsed_s=float(z["elapsed_s"]),
                    directions=tuple(directions) if directions else None,
                )
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            return None  # EOFError: an empty file (an unsynced save cut by a crash)


Runner = Callable[[list[int]], Iterator[ChunkResult]]


def local_runner(space: SearchSpace, chunk_size: int, predictor: Predictor | None = None) -> Runner:
    """Chunks evaluated one after another in this process."""

    def run(chunks: list[int]) -> Iterator[ChunkResult]:
        for c in chunks:
            yield evaluate_chunk(space, c, chunk_size, predictor)

    return run


def enumerate_space(
    space: SearchSpace,
    state: Enumeration,
    path: Path,
    runner: Runner,
    *,
    stop: Callable[[], bool] = lambda: False,
    progress: Any = None,
) -> Enumeration:
    """Evaluate the chunks `state` has not done, merging and saving after each one, until all
    are done or `stop()` turns true (checked after each chunk)."""
    todo = [int(c) for c in np.nonzero(~state.done)[0]]
    t0 = synced = time.perf_counter()
    base = state.elapsed_s
    results: Iterator[ChunkResult] = iter(runner(todo))
    try:
        while True:
            try:
                r = next(results)
            except StopIteration:
                break
            except Exception:
                if stop():  # a Ctrl-C that also reached a local cluster's workers
                    break
                raise
            state.merge(r)
            now = time.perf_counter()
            state.elapsed_s = base + now - t0
            # saved after every chunk (a killed sweep resumes from its last chunk), fsynced at
            # most every SYNC_S and when stopping: an fsync is ~7 ms of wall time a chunk
            # (0.17 s of sweep_3m_space's 24), and only an operating-system crash needs it
            stopping = stop()
            sync = stopping or now - synced >= SYNC_S
            state.save(path, sync=sync)
            if sync:
                synced = now
            if progress is not None:
                progress.update(r.total)
                progress.set_postfix_str(
                    f"front {len(state.index)} feasible {state.feasible / state.total:.0%}",
                    refresh=False,
                )
            if stopping:
                break
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()  # a generator's pending chunks (a cluster's futures) are cancelled
    return state


def sample_rest(space: SearchSpace, front: np.ndarray, seed: int, n: int = SAMPLE) -> np.ndarray:
    """A seeded sample of `n` configuration indices off the front (ascending); the whole
    rest of the space when it has fewer."""
    size = space.size()
    rng = np.random.default_rng([int(seed), 20])
    k = min(size, n + len(front))
    # Generator.choice draws k of size without a size-long array when k << size (Floyd).
    pick = rng.choice(size, k, replace=False) if k < size else np.arange(size)
    rest = pick[~np.isin(pick, front)][:n]
    return np.sort(rest.astype(np.int64))


def record_trials(
    space: SearchSpace,
    index: np.ndarray,
    predictor: Predictor | None = None,
    chunk: int = CHUNK,
    parsed: dict[str, dict[str, Any]] | None = None,
) -> list[Any]:
    """Finished Optuna trials (fully evaluated: tokens-to-Wh included) of configurations.
    `parsed`: filled with the parse of each JSON attribute written (`_trials.created_trials`)."""
    from dse.sweep._samplers import config_params, distributions
    from dse.sweep._trials import created_trials

    dists = distributions(space)
    out: list[Any] = []
    for start in range(0, len(index), chunk):
        idx = np.asarray(index[start : start + chunk], dtype=np.int64)
        _, ev = evaluate_index(space, idx, predictor)
        out += created_trials(dists, config_params(space, idx), ev, parsed=parsed)
    return out


# ------------------------------------------------------------------ on a Dask cluster
def dask_client(address: str | None, workers: int | None) -> tuple[Any, Any]:
    """(cluster or None, client): a scheduler at `address`, or a LocalCluster of `workers`
    one-thread worker processes. Dask is the optional extra `dask`."""
    flag, got = ("--dask", address) if address else ("--workers", workers)
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError(
            f"{flag}: needs Dask (pip install 'dse[dask]', i.e. dask[distributed]), got {got}"
        ) from None
    if address:
        try:
            return None, Client(address, timeout=10)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConfigError(
                f"--dask: must name a reachable Dask scheduler ({exc}), got {address}"
            ) from None
    assert workers is not None
    if workers < 1:
        raise ConfigError(f"--workers: must be an integer >= 1, got {workers}")
    import dask

    # One BLAS/OpenMP thread per worker (the cores are the workers'), and none of Dask's
    # default MALLOC_TRIM_THRESHOLD_=65536: setting it turns off glibc's dynamic mmap
    # threshold, so every chunk's ~100 MB of arrays is mmapped and page-faulted afresh, 3x
    # slower per chunk (0.6 -> 1.9 s measured, docs/sweeps.md).
    one = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    # The workers are started with SIGINT ignored (inherited through spawn; Python then
    # installs no KeyboardInterrupt handler): a Ctrl-C in the terminal reaches the whole
    # process group, and only this process should stop (after a chunk), not its workers.
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": one}):
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,  # cancelled tasks after a stop are expected
            )
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
    return cluster, Client(cluster)


def dask_runner(
    client: Any, space: SearchSpace, chunk_size: int, predictor: Predictor | None = None
) -> Runner:
    """Chunks as Dask tasks (`evaluate_chunk` on the workers), yielded as they finish. At most
    two tasks per worker are in flight, so the client holds a bounded number of results and a
    stop is honoured within a chunk or two; pending tasks are cancelled when the caller stops."""
    from dask.distributed import as_completed

    def run(chunks: list[int]) -> Iterator[ChunkResult]:
        todo = iter(chunks)
        n_workers = max(len(client.scheduler_info().get("workers", {})), 1)
        remote = client.scatter(space, broadcast=True, hash=False)

        def submit(c: int) -> Any:
            return client.submit(
                evaluate_chunk, remote, c, chunk_size, predictor, pure=False, key=f"chunk-{c}"
            )

        pending = {submit(c) for c in itertools.islice(todo, 2 * n_workers)}
        done = as_completed(list(pending))
        try:
            for fut in done:
                pending.discard(fut)
                result = fut.result()  # a task's error is raised here, on the client
                nxt = next(todo, None)
                if nxt is not None:
                    f = submit(nxt)
                    pending.add(f)
                    done.add(f)
                yield result
        finally:
            if pending:
                client.cancel(list(pending))

    return run

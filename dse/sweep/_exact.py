"""The `exact` sampler's engine: enumerate the space chunk by chunk (`_enumerate.enumerate_space`,
resumable through a sidecar file in the results folder), then write the study once: every front
configuration plus a seeded sample of the rest, as real trials, with the enumeration's counts in
the study's user attributes.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.storages import BaseStorage

from dse.errors import ConfigError
from dse.spec.space import SearchSpace
from dse.sweep import _enumerate as E
from dse.sweep._journal import BatchedJournalBackend
from dse.sweep._local import journal_study
from dse.sweep._options import SweepOptions
from dse.sweep._progress import StopFlag
from dse.sweep._shared import shared_study
from dse.sweep._trials import Parsed
from dse.sweep.storage import StorageSpec
from dse.sweep.study_record import StudyRecord

EXACT_ATTR = "dse:exact"  # study user attr: the finished enumeration's counts (a dict)


def run_exact(
    space: SearchSpace,
    rec: StudyRecord,
    spec: StorageSpec,
    storage: BaseStorage | None,
    name: str,
    folder: Path,
    opts: SweepOptions,
    stop: StopFlag,
) -> tuple[list[optuna.trial.FrozenTrial], int, StudyRecord, dict[str, Any] | None, Parsed | None]:
    """Enumerate the space (resuming the sidecar's chunks), then record the front and a sample
    in the study, once. Returns (trials, configurations enumerated, record, the counts; None
    while the enumeration is unfinished, and the parse of the trials' JSON attributes when
    this call recorded them: `write_results` need not parse them back)."""
    backend: BatchedJournalBackend | None = None
    if spec.kind == "journal":
        storage, backend, study, rec = journal_study(space, rec, spec, name)
    else:
        assert storage is not None
        study, rec = shared_study(storage, space, rec, name, spec.display)
    sidecar = folder / E.PROGRESS_FILE
    try:
        counts = study.user_attrs.get(EXACT_ATTR)
        if counts is not None:  # finished before: the study holds the result
            with contextlib.suppress(FileNotFoundError):
                sidecar.unlink()
            return study.get_trials(deepcopy=False), rec.trials, rec, counts, None
        if study.get_trials(deepcopy=False):
            raise ConfigError(
                f"{spec.display}: study {name!r} (sampler exact) holds trials but no finished "
                "enumeration; use another --study name, or --replace"
            )
        key = {
            "study": name,
            "space_hash": rec.space_hash,
            "size": space.size(),
            "chunk": int(opts.chunk_size),
        }
        directions = space.objectives.directions
        state = E.Enumeration.load(sidecar, directions)
        if state is not None and state.key != key:
            if state.key.get("chunk") != key["chunk"] and {
                k: v for k, v in state.key.items() if k != "chunk"
            } == {k: v for k, v in key.items() if k != "chunk"}:
                raise ConfigError(
                    f"--chunk-size: {sidecar} holds an enumeration in chunks of "
                    f"{state.key.get('chunk')} configurations; resume it with that size (or "
                    f"--replace to start again), got {opts.chunk_size}"
                )
            state = None  # another study's or space's: start again
        if state is None:
            state = E.Enumeration.new(key, len(space.objectives.names), directions)
        size = space.size()
        bar: Any = None
        if not opts.quiet:
            from tqdm import tqdm

            bar = tqdm(
                total=size,
                initial=state.total,
                desc=name,
                unit="config",
                unit_scale=True,
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=0.5,
            )
        cluster = client = None
        try:
            if opts.dask or opts.workers:
                cluster, client = E.dask_client(opts.dask, opts.workers)
                runner = E.dask_runner(client, space, opts.chunk_size, opts.predictor)
            else:
                runner = E.local_runner(space, opts.chunk_size, opts.predictor)
            state = E.enumerate_space(
                space, state, sidecar, runner, stop=lambda: stop.requested, progress=bar
            )
        finally:
            if bar is not None:
                bar.close()
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
        if not state.complete:
            return [], state.total, rec, None, None
        sample = E.sample_rest(space, state.index, rec.seed)
        index = np.union1d(state.index, sample)
        parsed: Parsed = {}
        trials = E.record_trials(space, index, opts.predictor, parsed=parsed)
        counts = {
            "configurations": size,
            "enumerated": state.total,
            "valid": state.valid,
            "invalid": state.total - state.valid,
            "feasible": state.feasible,
            "front": len(state.index),
            "sample": len(sample),
            "chunks": len(state.done),
            "chunk_size": int(opts.chunk_size),
            "enumeration_s": round(state.elapsed_s, 3),
            "configurations_per_s": round(state.total / state.elapsed_s, 1)
            if state.elapsed_s > 0
            else None,
        }
        study.add_trials(trials)
        study.set_user_attr(EXACT_ATTR, counts)
        if backend is not None:
            backend.flush()  # trials and counts in one write: the study is written once
        sidecar.unlink()
        return study.get_trials(deepcopy=False), state.total, rec, counts, parsed
    finally:
        if backend is not None:
            backend.discard()

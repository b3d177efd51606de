"""`dse sweep`: check every input, settle the study's settings, hold the results folder, run the
engine the sampler and storage call for, and write the results folder.

The engines, one module each: `_local` (the default journal file: an in-memory study, one
journal write per batch), `_shared` (an RDB storage that many `dse worker`s share), `_exact`
(the `exact` sampler: enumerate the space, then write the study once). What they share:
`_config_cache` (a configuration evaluated once per study), `_progress` (Ctrl-C, the bar),
`_study_record` (what a study needs to be resumed), `_locks` (the results folder's lock and
claim); the storages: `_storage` (URLs, RDB), `_journal` (+ `_journal_commit`, `_journal_scan`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage

from dse.errors import ConfigError, DSEError
from dse.spec.space import SearchSpace, count_feasible, load_space, require_feasible
from dse.sweep import _enumerate as E
from dse.sweep import _samplers as S
from dse.sweep._enumerate import ExactFront, exact_front
from dse.sweep._evaluate import check_predictor
from dse.sweep._exact import run_exact
from dse.sweep._local import run_local
from dse.sweep._locks import FolderLock, check_writable, claim_folder, study_folder
from dse.sweep._options import SweepOptions, SweepOutcome
from dse.sweep._progress import StopFlag, quiet_optuna
from dse.sweep._shared import run_shared
from dse.sweep._trials import Parsed
from dse.sweep.results import Written, record_own_exact_front, write_results
from dse.sweep.storage import StorageSpec, open_rdb, parse_storage, study_names
from dse.sweep.study_record import (
    StudyRecord,
    check_same,
    json_safe,
    space_hash,
)

COUNT_LIMIT = 200_000  # spaces up to this size are counted for feasibility before a sweep
REFERENCE_LIMIT = 20_000_000  # `--reference exact` enumerates at most this many


def settings(space: SearchSpace, opts: SweepOptions) -> StudyRecord:
    """The study record of a new sweep: CLI options over the YAML's study section."""
    st = space.study
    trials = st.trials if opts.trials is None else opts.trials
    seed = st.seed if opts.seed is None else opts.seed
    batch = st.batch_size if opts.batch_size is None else opts.batch_size
    if trials < 1:
        raise ConfigError(f"--trials: must be an integer >= 1, got {trials}")
    if batch < 1:
        raise ConfigError(f"--batch-size: must be an integer >= 1, got {batch}")
    asked = opts.sampler or st.sampler
    sampler = S.resolve(asked, space, trials, opts.max_configs)
    if asked == "auto" and not opts.quiet:
        print(f"dse sweep: {S.explain(asked, space, trials, opts.max_configs)}", file=sys.stderr)
    warning = S.budget_warning(sampler, space, trials)
    if warning is not None:  # printed even with --quiet: the budget is partly wasted
        print(f"dse sweep: {warning}", file=sys.stderr)
    if sampler in ("exhaustive", "exact"):
        if opts.trials is not None and asked == sampler:  # even with --quiet: it did nothing
            print(
                f"dse sweep: warning: --trials {opts.trials} ignored by sampler {sampler}, which "
                f"prices every configuration of the space once ({space.size():,})",
                file=sys.stderr,
            )
        trials = space.size()  # `exact`: the budget is the configurations to enumerate
    return StudyRecord(
        space_file=space.source,
        space_raw=json_safe(space.raw),
        space_hash=space_hash(space),
        sampler=sampler,
        seed=int(seed),
        batch_size=int(batch),
        trials=int(trials),
    )


def run_sweep(opts: SweepOptions) -> SweepOutcome:
    """`dse sweep`: create or resume a study, run it to its budget, write the results folder.

    Every check that can fail on user input (YAML, sampler, storage URL, results folder,
    predictor artifact, an existing study with another space) runs before anything is
    written, and raises a DSEError with one clear message.
    """
    quiet_optuna()
    t0 = time.perf_counter()
    space = load_space(opts.space_file)
    rec = settings(space, opts)
    if space.size() <= COUNT_LIMIT:
        require_feasible(space, count_feasible(space))
    if (opts.dask or opts.workers) and rec.sampler != "exact":
        flag = "--dask" if opts.dask else "--workers"
        raise ConfigError(
            f"{flag}: only sampler exact runs on Dask (a sampler's workers share a database: "
            f"`--storage postgresql://...` and `dse worker`), got sampler {rec.sampler}"
        )
    if opts.workers is not None and opts.workers < 1:
        raise ConfigError(f"--workers: must be an integer >= 1, got {opts.workers}")
    if opts.reference not in (None, "exact"):
        raise ConfigError(f"--reference: must be exact, got {opts.reference!r}")
    if opts.reference == "exact" and space.size() > REFERENCE_LIMIT:
        raise ConfigError(
            f"--reference exact: the space has {space.size():,} configurations, more than "
            f"{REFERENCE_LIMIT:,} to enumerate"
        )
    name, folder = study_folder(opts.study, space, opts.out)
    spec = parse_storage(opts.storage, folder)
    artifacts = check_predictor(space, opts.predictor)
    storage: BaseStorage | None = None
    if spec.kind == "rdb":  # reach the database, and refuse a clashing study, before writing
        storage = open_rdb(spec, opts.heartbeat_s)
        if name in study_names(storage):
            found = optuna.load_study(study_name=name, storage=storage)
            if "dse:space_hash" in found.user_attrs:
                existing = StudyRecord.from_attrs(found.user_attrs, spec.display)
                check_same(existing, rec, name, spec.display)
    check_writable(folder)
    locks = [FolderLock(folder / ".lock")]
    if spec.path is not None and spec.path.parent.resolve() != folder.resolve():
        check_writable(spec.path.parent)
        locks.append(FolderLock(spec.path.with_name(spec.path.name + ".lock-dse")))
    for i, lock in enumerate(locks):
        try:
            lock.acquire()
        except DSEError:
            for held in locks[:i]:
                held.release()
            raise
    interrupted = False
    try:
        claim_folder(folder, name, spec, opts.replace)
        if opts.replace:  # an enumeration in progress is part of the folder's results
            with contextlib.suppress(FileNotFoundError):
                (folder / E.PROGRESS_FILE).unlink()
        counts: dict[str, Any] | None = None
        screened: int | None = None
        parsed: Parsed | None = None  # the exact sweep's trials' JSON attributes, parsed
        with StopFlag(opts.quiet, "chunk" if rec.sampler == "exact" else "batch") as stop:
            if rec.sampler == "exact":
                trials, done, rec, counts, parsed = run_exact(
                    space, rec, spec, storage, name, folder, opts, stop
                )
            elif spec.kind == "journal":
                trials, done, screened = run_local(space, rec, spec, name, opts, stop)
            else:
                assert storage is not None
                trials, done, rec = run_shared(storage, space, rec, spec, name, opts, stop)
            interrupted = stop.requested and done < rec.trials
        if rec.sampler == "exact" and counts is None:  # stopped mid-enumeration
            interrupted = True
            written = None
        else:
            written = _write(
                space,
                rec,
                opts,
                spec,
                folder,
                name,
                trials,
                done,
                interrupted,
                counts,
                artifacts,
                t0,
                screened,
                parsed,
            )
    finally:
        for lock in locks:
            lock.release()
    if interrupted and not opts.quiet:
        hint = opts.resume_command or f"dse sweep {opts.space_file}"
        what = "configurations" if rec.sampler == "exact" else "trials"
        print(
            f"dse sweep: interrupted after {done:,} of {rec.trials:,} {what}; results so far "
            f"are in {folder}/. Resume with:\n  {hint}",
            file=sys.stderr,
        )
    return SweepOutcome(written, interrupted, done, rec.trials, folder, spec.display)


def _write(
    space: SearchSpace,
    rec: StudyRecord,
    opts: SweepOptions,
    spec: StorageSpec,
    folder: Path,
    name: str,
    trials: list[optuna.trial.FrozenTrial],
    done: int,
    interrupted: bool,
    counts: dict[str, Any] | None,
    artifacts: dict[str, str],
    t0: float,
    screened: int | None = None,
    parsed: Parsed | None = None,
) -> Written:
    """The results folder of a finished (or stopped) study."""
    exact = None if rec.sampler == "exact" else _reference(space, rec, opts, done, interrupted)
    written = write_results(
        folder,
        space,
        trials,
        study_name=name,
        sampler=rec.sampler,
        seed=rec.seed,
        trials_requested=rec.trials,
        storage=spec.display,
        elapsed_s=time.perf_counter() - t0,
        exact=exact,
        exact_table=None,
        artifacts=artifacts,
        predictor=opts.predictor,
        parsed=parsed,
        extra={
            **({"exact": counts} if counts is not None else {}),
            # configurations the screened sampler priced to choose its trials
            **({"screened_configs": screened} if screened is not None else {}),
        }
        or None,
    )
    if rec.sampler in ("exhaustive", "exact") and done >= rec.trials and exact is None:
        # Both hold the whole exact front (exact: plus a sample of the rest).
        written = record_own_exact_front(written, space, folder)
    return written


def _reference(
    space: SearchSpace, rec: StudyRecord, opts: SweepOptions, done: int, interrupted: bool
) -> ExactFront | None:
    if opts.reference != "exact" or interrupted:
        return None
    return exact_front(space, predictor=opts.predictor)

"""The sweep loop: ask a batch, evaluate it in one predictor call, tell it back, persist it.

Two engines share the loop body:
- local (the default journal file): the sampler works on an in-memory copy of the study and
  every finished batch is appended to the journal in one write, so a SIGKILL at any moment
  leaves whole batches only; the same command again reloads them and continues. The sampler
  of each batch is seeded from (seed, trials done), so the resumed run draws exactly what the
  uninterrupted run would have drawn.
- shared (an RDB storage: PostgreSQL, MySQL, SQLite): workers claim trials through the
  database (a WAITING trial moves to RUNNING for exactly one of them), heartbeat them while
  they run, and fail-and-requeue the trials of workers that died. Exhaustive studies enqueue
  every configuration once, so no configuration is evaluated twice and none is lost.

The `exact` sampler takes neither loop: it enumerates the space chunk by chunk
(`_exhaustive.enumerate_space`, resumable through a sidecar file in the results folder), then
writes the study once: every front configuration plus a seeded sample of the rest, as real
trials, with the enumeration's counts in the study's user attributes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.trial import TrialState

from dse import pareto
from dse.errors import ConfigError, DSEError
from dse.spec.space import SearchSpace, count_feasible, load_space, require_feasible
from dse.sweep import _exhaustive as E
from dse.sweep import _samplers as S
from dse.sweep._columns import canonical_digits, canonical_index, param_digits, space_columns
from dse.sweep._evaluate import Evaluation, Predictor, check_predictor, evaluate
from dse.sweep._exhaustive import ExactFront, exact_front
from dse.sweep._record import created_trials, evaluated, suggest_all, tell_batch
from dse.sweep._results import Written, write_results
from dse.sweep._storage import (
    DEFAULT_HEARTBEAT_S,
    BatchedJournalBackend,
    FolderLock,
    StorageSpec,
    StudyRecord,
    check_writable,
    claim_folder,
    json_safe,
    load_study,
    open_journal,
    open_rdb,
    parse_storage,
    restore_record,
    space_hash,
    study_folder,
    study_names,
)
from dse.yamlio import Located

ENQUEUED_ATTR = "dse:enqueued"
COUNT_LIMIT = 200_000  # spaces up to this size are counted for feasibility before a sweep
REFERENCE_LIMIT = 20_000_000  # `--reference exact` enumerates at most this many
POLL_S = 0.5  # a worker with nothing to claim waits this long before looking again
# A shared worker re-reads the study's evaluated configurations at most this often (s): one
# query for all trials, so two workers can still evaluate one configuration within this window.
CACHE_REFRESH_S = 5.0


@dataclass
class SweepOptions:
    """`dse sweep` arguments; None means "from the YAML's study section"."""

    space_file: Path
    study: str | None = None
    storage: str | None = None
    out: Path | None = None
    sampler: str | None = None
    trials: int | None = None
    seed: int | None = None
    batch_size: int | None = None
    reference: str | None = None  # "exact": also enumerate the space for the exact front
    quiet: bool = False
    heartbeat_s: int = DEFAULT_HEARTBEAT_S
    resume_command: str = ""
    replace: bool = False  # --replace: overwrite a results folder holding another study
    max_configs: int = S.EXACT_MAX_CONFIGS  # --max-configs: the most `exact` enumerates
    chunk_size: int = E.CHUNK  # --chunk-size: configurations per chunk of `exact`
    dask: str | None = None  # --dask tcp://host:8786: `exact` chunks as tasks on that cluster
    workers: int | None = None  # --workers N: `exact` chunks on a local Dask cluster
    predictor: Predictor | None = field(default=None, repr=False)


@dataclass
class SweepOutcome:
    written: Written | None
    interrupted: bool
    done: int
    budget: int
    folder: Path
    storage: str


# ------------------------------------------------------------------ signals and progress
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


# ------------------------------------------------------------------ settings
def _quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")


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


def space_from_record(rec: StudyRecord) -> SearchSpace:
    """Rebuild the search space a study was created from (for workers and `dse show`)."""
    from dse.spec.space import parse_space

    return parse_space(Located(Path(rec.space_file), rec.space_raw, {}))


def _check_same(existing: StudyRecord, new: StudyRecord, name: str, where: str) -> StudyRecord:
    """A resumed study must have the same space; sampler, seed and batch size too (so it
    continues deterministically). The budget may grow or shrink."""
    if existing.space_hash != new.space_hash:
        raise ConfigError(
            f"{where}: study {name!r} exists with a different search space (space hash "
            f"{existing.space_hash}, from {existing.space_file}; this one is {new.space_hash}, "
            f"from {new.space_file}); use another --study name (or --out folder)"
        )
    for key in ("sampler", "seed", "batch_size"):
        a, b = getattr(existing, key), getattr(new, key)
        if a != b:
            raise ConfigError(
                f"{where}: study {name!r} was created with {key}={a!r}, not {b!r}; resume it "
                f"with the same {key} or use another --study name"
            )
    return replace(existing, trials=new.trials)


# ------------------------------------------------------------------ the local engine
def _journal_study(
    space: SearchSpace, rec: StudyRecord, spec: StorageSpec, name: str
) -> tuple[BaseStorage, BatchedJournalBackend, optuna.Study, StudyRecord]:
    """Open the default journal and create (or load and check) the study in it."""
    storage, backend = open_journal(spec, batched=True)
    assert isinstance(backend, BatchedJournalBackend)
    directions = list(space.objectives.directions)
    where = str(spec.path)
    if name in study_names(storage):
        pstudy = optuna.load_study(study_name=name, storage=storage)
        restore_record(pstudy, rec, where, backend.flush)  # after a damaged journal's recovery
        existing = StudyRecord.from_attrs(pstudy.user_attrs, where)
        rec = _check_same(existing, rec, name, where)
        if pstudy.user_attrs.get("dse:trials") != rec.trials:
            pstudy.set_user_attr("dse:trials", rec.trials)
            backend.flush()
    else:
        pstudy = optuna.create_study(storage=storage, study_name=name, directions=directions)
        pstudy.set_metric_names(list(space.objectives.names))
        for k, v in rec.attrs().items():
            pstudy.set_user_attr(k, v)
        backend.flush()  # study and its record in one write
    return storage, backend, pstudy, rec


# study user attr: configurations the `screened` sampler priced to choose its trials (local
# journal studies; workers on a shared database do not add theirs up)
SCREENED_ATTR = "dse:screened"


def _local(
    space: SearchSpace,
    rec: StudyRecord,
    spec: StorageSpec,
    name: str,
    opts: SweepOptions,
    stop: StopFlag,
) -> tuple[list[optuna.trial.FrozenTrial], int, int | None]:
    """Run the study on the default journal file; return (all finished trials, done, the
    configurations the `screened` sampler priced over the study's life; None for others)."""
    storage, backend, pstudy, rec = _journal_study(space, rec, spec, name)
    directions = list(space.objectives.directions)
    history, done, progress = _resume_state(pstudy, rec, opts, name, directions, str(spec.path))
    screened = int(pstudy.user_attrs.get(SCREENED_ATTR, 0))
    kept = screened if rec.sampler == "screened" else None
    if done >= rec.trials:  # nothing to run: no sampler, no in-memory copy
        progress.close()
        return history, done, kept
    if rec.sampler == "exhaustive":
        try:
            done = _local_exhaustive(space, rec, pstudy, backend, done, progress, stop, opts)
        finally:
            backend.discard()
            progress.close()
        return pstudy.get_trials(deepcopy=False), done, None
    mem, cache = _memory_copy(storage, name, directions, history)
    # Every configuration evaluated so far, resumed runs included: a repeat is not predicted.
    seen = ConfigCache(space)
    seen.add(history)
    run = _LocalRun(pstudy, backend, mem, cache, seen, persisted=len(history))
    del history  # the journal's replay keeps the one copy of each trial
    try:
        done, screened = _local_loop(run, space, rec, opts, stop, progress, done, screened)
    finally:
        backend.discard()
        progress.close()
    return pstudy.get_trials(deepcopy=False), done, (screened if kept is not None else None)


def _resume_state(
    pstudy: optuna.Study,
    rec: StudyRecord,
    opts: SweepOptions,
    name: str,
    directions: list[str],
    where: str,
) -> tuple[list[optuna.trial.FrozenTrial], int, Progress]:
    """Where a local study stands: its finished trials, how many count against the budget,
    and the progress bar started there (with the front of the trials so far)."""
    history = pstudy.get_trials(deepcopy=False)
    unfinished = [t for t in history if not t.state.is_finished()]
    if unfinished:  # only possible when a journal was written by other means
        raise ConfigError(
            f"{where}: study {name!r} has {len(unfinished)} unfinished trials; the default "
            "journal only holds finished batches"
        )
    done = sum(evaluated(t) for t in history)
    budget = rec.trials
    progress = Progress(budget, min(done, budget), opts.quiet, len(directions), name, directions)
    for t in history:
        _progress_add(progress, t)
    return history, done, progress


def _memory_copy(
    storage: BaseStorage,
    name: str,
    directions: list[str],
    history: list[optuna.trial.FrozenTrial],
) -> tuple[optuna.Study, SamplerCache]:
    """The in-memory copy of the journal's study the sampler works on (fast asks; no file I/O
    per trial), holding `history` and the samplers' cache, and what carries that cache back."""
    mem_storage = InMemoryStorage()
    mem = optuna.create_study(storage=mem_storage, study_name=name, directions=directions)
    cache = SamplerCache(
        storage,
        storage.get_study_id_from_name(name),
        mem_storage,
        mem_storage.get_study_id_from_name(name),
    )
    if history:
        mem.add_trials(history)
        cache.restore()
    return mem, cache


@dataclass
class _LocalRun:
    """A local study being run: the journal's copy (durable, one flush per batch), the
    in-memory copy the sampler asks, and the configurations evaluated so far."""

    pstudy: optuna.Study
    backend: BatchedJournalBackend
    mem: optuna.Study
    cache: SamplerCache
    seen: ConfigCache
    persisted: int  # trials in the journal's study (numbers 0 .. persisted - 1)


def _local_loop(
    run: _LocalRun,
    space: SearchSpace,
    rec: StudyRecord,
    opts: SweepOptions,
    stop: StopFlag,
    progress: Progress,
    done: int,
    screened: int,
) -> tuple[int, int]:
    """Ask, evaluate and tell batches until the budget is met or a stop was requested; each
    batch is written to the journal in one flush. Returns (done, screened)."""
    mem, pstudy = run.mem, run.pstudy
    budget = rec.trials
    dists = S.distributions(space)
    while done < budget and not stop.requested:
        n = min(rec.batch_size, budget - done)
        mem.sampler = _sampler_for(rec, space, done, opts.predictor)
        # Asked with the space's distributions: every trial shares the same objects.
        trials = [mem.ask(fixed_distributions=dists) for _ in range(n)]
        rows = [t.params for t in trials]
        told = _evaluate_batch(
            mem, trials, rows, space, run.seen, opts.predictor, progress, predictions_on_copies=True
        )
        pstudy.add_trials(told)
        if rec.sampler == "screened":  # with the batch: a resumed study keeps counting
            screened += getattr(mem.sampler, "screened", 0)
            pstudy.set_user_attr(SCREENED_ATTR, screened)
        run.cache.save()
        run.backend.flush()  # the batch becomes durable here, all or nothing
        done += sum(evaluated(t) for t in told)
        del told  # the journal's replay keeps the one copy of each trial
        # The journal's own copies (not `told`): the cache then holds no second copy of
        # each trial's predictions.
        run.seen.add(pstudy.get_trials(deepcopy=False)[run.persisted :])
        run.persisted += n
        progress.show(done)
    return done, screened


def _sampler_for(
    rec: StudyRecord, space: SearchSpace, done: int, predictor: Predictor | None, salt: int = 0
) -> optuna.samplers.BaseSampler:
    """The fresh sampler that draws the batch starting after `done` trials (`salt`: a shared
    study's worker, so workers draw different batches)."""
    return S.make(
        rec.sampler,
        space,
        S.batch_seed(rec.seed, done, salt),
        rec.batch_size,
        predictor=predictor,
    )


def _evaluate_batch(
    study: optuna.Study,
    trials: list[optuna.Trial],
    rows: list[dict[str, Any]],
    space: SearchSpace,
    seen: ConfigCache,
    predictor: Predictor | None,
    progress: Progress,
    **tell_kw: Any,
) -> list[optuna.trial.FrozenTrial]:
    """Evaluate and tell one batch (`tell_cached`), and add its new configurations to the
    progress bar's front. Returns the finished trials in trial order."""
    told, ev = tell_cached(study, trials, rows, space, seen, predictor, **tell_kw)
    if ev is not None:
        progress.add(ev.objectives, ev.feasible)
    return told


class ConfigCache:
    """The first evaluated trial of each configuration of a study, by its searched-parameter
    values (the fixed fields are the space's, so these values are the whole configuration),
    the values of fields a configuration ignores left out (`dse.spec.inert`: n_kv_heads with
    MLA, sliding_window without sliding layers, ...).

    A trial whose configuration is here is told the stored objectives, constraints and user
    attributes instead of calling the predictor again: a sampler that proposes the same point
    twice spends no prediction on it, and results show one row per configuration."""

    def __init__(self, space: SearchSpace) -> None:
        self._space = space
        self._names = [p.name for p in space.searched]
        self._seen: dict[tuple[Any, ...], optuna.trial.FrozenTrial] = {}
        self.known = 0  # evaluated trials looked at (the shared loop refreshes past it)

    def key(self, params: dict[str, Any]) -> tuple[Any, ...] | None:
        return self.keys([params])[0]

    def keys(self, rows: list[dict[str, Any]]) -> list[tuple[Any, ...] | None]:
        """The key of each row: its canonical digits (`canonical_digits`), or its values where
        they are not the space's; None for a trial killed before it drew every parameter."""
        full = [all(k in r for k in self._names) for r in rows]
        digits = param_digits(self._space, rows)
        listed = [i for i, d in enumerate(digits) if d is not None]
        out: list[tuple[Any, ...] | None] = [
            None if not ok else ("values", *(r[k] for k in self._names))
            for r, ok in zip(rows, full, strict=True)
        ]
        if listed:
            canon = canonical_digits(self._space, np.asarray([digits[i] for i in listed]))
            for i, d in zip(listed, canon.tolist(), strict=True):
                out[i] = tuple(d)
        return out

    def add(self, trials: Any) -> None:
        done = [t for t in trials if evaluated(t)]
        self.known += len(done)
        for t, k in zip(done, self.keys([t.params for t in done]), strict=True):
            if k is not None:
                self._seen.setdefault(k, t)

    def get(self, key: tuple[Any, ...] | None) -> optuna.trial.FrozenTrial | None:
        return None if key is None else self._seen.get(key)

    def __len__(self) -> int:
        return len(self._seen)


def _take(ev: Evaluation, idx: list[int]) -> Evaluation:
    """The rows `idx` of an evaluation (every array field, and every dict of arrays, indexed),
    so a configuration drawn twice in one batch is predicted once and told twice."""
    pos = np.asarray(idx, dtype=np.int64)
    out: dict[str, Any] = {}
    for f in fields(ev):
        v = getattr(ev, f.name)
        if f.name == "n":
            out[f.name] = len(pos)
        elif isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) == ev.n:
            out[f.name] = v[pos]
        elif isinstance(v, dict):
            out[f.name] = {
                k: (np.asarray(a)[pos] if np.ndim(a) >= 1 and len(a) == ev.n else a)
                for k, a in v.items()
            }
        else:
            out[f.name] = v
    return type(ev)(**out)


REPEAT_ATTR = "repeat_of"  # user attr of a repeated configuration: the trial it copies


def _tell_repeat(
    study: optuna.Study, trial: optuna.Trial, src: optuna.trial.FrozenTrial, on_copy: bool
) -> optuna.trial.FrozenTrial:
    """Tell `trial` the outcome stored on `src` (same configuration): constraints, user
    attributes and values (or FAIL, an invalid architecture), without a prediction."""
    for name, value in src.constraints.items():
        trial.set_constraint(name, value)
    big = {"pred", "t2wh"} if on_copy else set()
    for k, v in src.user_attrs.items():
        if k not in big and k not in ("worker", REPEAT_ATTR):
            trial.set_user_attr(k, v)
    trial.set_user_attr(REPEAT_ATTR, src.number)
    if src.state == TrialState.COMPLETE:
        told = study.tell(trial, src.values)
    else:
        told = study.tell(trial, state=TrialState.FAIL)
    for k in big & set(src.user_attrs):
        told.set_user_attr(k, src.user_attrs[k])
    return told


def tell_cached(
    study: optuna.Study,
    trials: list[optuna.Trial],
    rows: list[dict[str, Any]],
    space: SearchSpace,
    seen: ConfigCache,
    predictor: Predictor | None,
    *,
    skip_finished: bool = False,
    predictions_on_copies: bool = False,
) -> tuple[list[optuna.trial.FrozenTrial], Evaluation | None]:
    """Evaluate the configurations of a batch not evaluated before (each once, in one
    predictor call), tell every trial, and return (finished trials in trial order, the
    evaluation of the new configurations, None when all were repeats)."""
    keys = seen.keys(rows)
    # A trial without a full configuration (cannot happen from suggest_all) is its own key.
    ukeys = [k if k is not None else ("#", i) for i, k in enumerate(keys)]
    new = [i for i, k in enumerate(keys) if seen.get(k) is None]
    first: dict[Any, int] = {}  # new configuration -> its row in the evaluated batch
    uniq: list[int] = []  # trial positions predicted: the first of each new configuration
    for i in new:
        if ukeys[i] not in first:
            first[ukeys[i]] = len(uniq)
            uniq.append(i)
    ev = None
    told: dict[int, optuna.trial.FrozenTrial] = {}
    if new:
        ev = evaluate(space, space.columns_from([rows[i] for i in uniq]), predictor=predictor)
        pick = [first[ukeys[i]] for i in new]
        done = tell_batch(
            study,
            [trials[i] for i in new],
            _take(ev, pick) if len(pick) != len(uniq) else ev,
            skip_finished=skip_finished,
            predictions_on_copies=predictions_on_copies,
        )
        if len(done) == len(new):
            told.update(zip(new, done, strict=True))
        else:  # skipped trials (finished by another process): order is not needed then
            told.update({-1 - j: t for j, t in enumerate(done)})
    for i, k in enumerate(keys):
        src = seen.get(k)
        if src is None:
            continue
        try:
            told[i] = _tell_repeat(study, trials[i], src, predictions_on_copies)
        except UpdateFinishedTrialError:
            if not skip_finished:
                raise
    return [told[i] for i in sorted(told, key=lambda j: j if j >= 0 else len(rows) - j)], ev


class SamplerCache:
    """Carries what samplers cache in the in-memory study's system attributes (NSGA-II's parent
    population of each generation, ...) to the journal, with the batch that produced it, and
    back on resume: a recomputed cache can list the same parents in another order, and
    NSGA-II's tournament then draws different parents. Stored under a `dse:cache:` prefix so
    nothing else reads these values (they hold in-memory trial ids, equal to trial numbers)."""

    PREFIX = "dse:cache:"

    def __init__(self, pstorage: BaseStorage, psid: int, mstorage: BaseStorage, msid: int) -> None:
        self._p, self._psid, self._m, self._msid = pstorage, psid, mstorage, msid
        self._saved: dict[str, Any] = {}

    def restore(self) -> None:
        for k, v in self._p.get_study_system_attrs(self._psid).items():
            if k.startswith(self.PREFIX):
                self._m.set_study_system_attr(self._msid, k[len(self.PREFIX) :], v)
                self._saved[k[len(self.PREFIX) :]] = v

    def save(self) -> None:
        for k, v in self._m.get_study_system_attrs(self._msid).items():
            if self._saved.get(k) != v:
                self._p.set_study_system_attr(self._psid, self.PREFIX + k, v)
                self._saved[k] = v


def _local_exhaustive(
    space: SearchSpace,
    rec: StudyRecord,
    pstudy: optuna.Study,
    backend: BatchedJournalBackend,
    done: int,
    progress: Progress,
    stop: StopFlag,
    opts: SweepOptions,
) -> int:
    """Every configuration from index `done` on, in enumeration order, as finished trials
    written straight to the journal (no sampler to consult): trial k is configuration k. One
    that differs from an earlier one only in fields it ignores (`dse.spec.inert`) is that
    configuration again: it is not predicted, its trial is told the earlier one's outcome and
    carries `repeat_of` (its number), as a repeat that another sampler proposes."""
    dists = S.distributions(space)
    step = max(rec.batch_size, S.EXHAUSTIVE_BATCH)
    while done < rec.trials and not stop.requested:
        idx = np.arange(done, min(done + step, rec.trials), dtype=np.int64)
        twin = canonical_index(space, idx)  # the first configuration equal to each
        new = twin == idx
        params = S.config_params(space, idx)
        here = np.isin(twin, idx[new])  # the first one is in this batch: copy its evaluation
        made: list[optuna.trial.FrozenTrial] = []
        if new.any():
            ev = evaluate(space, space_columns(space, idx[new]), predictor=opts.predictor)
            pos = {int(k): j for j, k in enumerate(idx[new].tolist())}
            rows = np.flatnonzero(here)
            made = created_trials(
                dists,
                [params[i] for i in rows],
                _take(ev, [pos[int(twin[i])] for i in rows]),
                repeat_of=[None if new[i] else int(twin[i]) for i in rows],
            )
            progress.add(ev.objectives, ev.feasible)
        earlier = {t.number: t for t in pstudy.get_trials(deepcopy=False)} if not here.all() else {}
        copied = iter(made)
        pstudy.add_trials(
            [
                next(copied) if here[i] else _repeat_trial(earlier[int(twin[i])], params[i], dists)
                for i in range(len(idx))
            ]
        )
        backend.flush()  # the batch becomes durable here, all or nothing
        done += len(idx)
        progress.show(done)
    return done


def _repeat_trial(
    src: optuna.trial.FrozenTrial, params: dict[str, Any], dists: dict[str, Any]
) -> optuna.trial.FrozenTrial:
    """A finished trial of `params` told the outcome stored on `src` (the same configuration
    but for fields it ignores), without a prediction."""
    attrs = {k: v for k, v in src.user_attrs.items() if k not in ("worker", REPEAT_ATTR)}
    return optuna.trial.create_trial(
        state=src.state,
        values=src.values if src.state == TrialState.COMPLETE else None,
        params=params,
        distributions=dists,
        user_attrs={**attrs, REPEAT_ATTR: src.number},
        constraints=src.constraints,
    )


def _progress_add(progress: Progress, t: optuna.trial.FrozenTrial) -> None:
    if t.state == TrialState.COMPLETE and t.values is not None:
        ok = all(v <= 0 for v in t.constraints.values())
        progress.add(np.asarray([t.values], dtype=float), np.asarray([ok]))


# ------------------------------------------------------------------ the exact engine
EXACT_ATTR = "dse:exact"  # study user attr: the finished enumeration's counts (a dict)


def _exact(
    space: SearchSpace,
    rec: StudyRecord,
    spec: StorageSpec,
    storage: BaseStorage | None,
    name: str,
    folder: Path,
    opts: SweepOptions,
    stop: StopFlag,
) -> tuple[list[optuna.trial.FrozenTrial], int, StudyRecord, dict[str, Any] | None]:
    """Enumerate the space (resuming the sidecar's chunks), then record the front and a sample
    in the study, once. Returns (trials, configurations enumerated, record, the counts; None
    while the enumeration is unfinished)."""
    backend: BatchedJournalBackend | None = None
    if spec.kind == "journal":
        storage, backend, study, rec = _journal_study(space, rec, spec, name)
    else:
        assert storage is not None
        study, rec = _shared_study(storage, space, rec, name, spec.display)
    sidecar = folder / E.PROGRESS_FILE
    try:
        counts = study.user_attrs.get(EXACT_ATTR)
        if counts is not None:  # finished before: the study holds the result
            with contextlib.suppress(FileNotFoundError):
                sidecar.unlink()
            return study.get_trials(deepcopy=False), rec.trials, rec, counts
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
            return [], state.total, rec, None
        sample = E.sample_rest(space, state.index, rec.seed)
        index = np.union1d(state.index, sample)
        trials = E.record_trials(space, index, opts.predictor)
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
        return study.get_trials(deepcopy=False), state.total, rec, counts
    finally:
        if backend is not None:
            backend.discard()


# ------------------------------------------------------------------ the shared engine
class Heartbeat:
    """Records a heartbeat for every trial this process runs, every `interval_s` seconds."""

    def __init__(self, storage: BaseStorage, interval_s: float) -> None:
        self._storage = storage
        self._interval = interval_s
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                ids = list(self._ids)
            for tid in ids:
                with contextlib.suppress(Exception):  # a finished trial needs none
                    self._storage.record_heartbeat(tid)  # type: ignore[attr-defined]

    def track(self, ids: list[int]) -> None:
        with self._lock:
            self._ids.update(ids)

    def untrack(self, ids: list[int]) -> None:
        with self._lock:
            self._ids.difference_update(ids)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _counts(storage: BaseStorage, sid: int) -> tuple[int, int, list[Any]]:
    """(evaluated, running, waiting trials) of a shared study, with cheap count queries."""
    complete = storage.get_n_trials(sid, TrialState.COMPLETE)
    fails = storage.get_all_trials(sid, deepcopy=False, states=(TrialState.FAIL,))
    invalid = sum("invalid_reason" in t.user_attrs for t in fails)
    running = storage.get_n_trials(sid, TrialState.RUNNING)
    waiting = storage.get_all_trials(sid, deepcopy=False, states=(TrialState.WAITING,))
    return complete + invalid, running, waiting


def _claim(
    storage: BaseStorage,
    sid: int,
    waiting: list[Any],
    want: int,
    new_allowed: int,
    rng: np.random.Generator,
) -> list[int]:
    """Move up to `want` trials to RUNNING for this process: queued ones first (in random
    order, so workers rarely collide), then new empty ones. The heartbeat is recorded before
    the claim, so a claimed trial can always be detected as stale if this process dies."""
    got: list[int] = []
    for j in rng.permutation(len(waiting)):
        if len(got) >= want:
            break
        tid = waiting[j]._trial_id  # a FrozenTrial names its storage id only privately
        storage.record_heartbeat(tid)  # type: ignore[attr-defined]
        try:
            if storage.set_trial_state_values(tid, TrialState.RUNNING):
                got.append(tid)
        except UpdateFinishedTrialError:
            continue
    while len(got) < want and new_allowed > 0:
        template = optuna.trial.create_trial(state=TrialState.WAITING)
        tid = storage.create_new_trial(sid, template_trial=template)
        new_allowed -= 1
        storage.record_heartbeat(tid)  # type: ignore[attr-defined]
        try:
            if storage.set_trial_state_values(tid, TrialState.RUNNING):
                got.append(tid)
        except UpdateFinishedTrialError:
            continue
    return got


class _MissingTrials:
    """Watches a shared study for trials that are missing: the budget not met, and none
    queued or running. Another process may be between failing a dead worker's trial as stale
    and queueing its retry (two transactions), so a worker looks again for `grace_s` before it
    gives up."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.since: float | None = None  # when trials were first seen missing, none queued

    def given_up(self, missing: bool) -> bool:
        """Whether trials have been missing for longer than the grace period (`missing`: they
        are now)."""
        if not missing:
            self.since = None
            return False
        if self.since is None:
            self.since = time.monotonic()
            return False
        return time.monotonic() - self.since > self.grace_s


def _suggest_claimed(
    study: optuna.Study, ids: list[int], dists: dict[str, BaseDistribution], worker: str
) -> tuple[list[optuna.Trial], list[dict[str, Any]]]:
    """The claimed trials with every parameter suggested, and their parameter rows; `worker`
    is recorded on each as the process that evaluated it."""
    trials, rows = [], []
    for tid in ids:
        # A trial failed meanwhile by another worker (this one was silent past the grace
        # period) was queued again: leave it to the queue.
        with contextlib.suppress(UpdateFinishedTrialError):
            trial = optuna.trial.Trial(study, tid)
            trial.set_user_attr("worker", worker)
            rows.append(suggest_all(trial, dists))
            trials.append(trial)
    return trials, rows


def _shared_loop(
    storage: BaseStorage,
    study: optuna.Study,
    space: SearchSpace,
    rec: StudyRecord,
    *,
    stop: StopFlag,
    quiet: bool,
    heartbeat_s: int,
    salt: int,
    max_trials: int | None = None,
    predictor: Predictor | None = None,
) -> int:
    """Work on a shared study until its budget is met (or `max_trials` were done here, or a
    stop was requested). Returns the number of trials this process evaluated."""
    sid = storage.get_study_id_from_name(study.study_name)
    dists = S.distributions(space)
    exhaustive = rec.sampler == "exhaustive"
    rng = np.random.default_rng([rec.seed, salt])
    worker = f"{socket.gethostname()}:{os.getpid()}"  # user attr: who evaluated each trial
    mine = 0
    missing = _MissingTrials(2 * heartbeat_s + 2 * POLL_S)
    done, running, waiting = _counts(storage, sid)
    progress = Progress(
        rec.trials,
        min(done, rec.trials),
        quiet,
        len(space.objectives.names),
        study.study_name,
        space.objectives.directions,
    )
    # Exhaustive studies queue each configuration once: nothing to look up.
    seen = ConfigCache(space) if exhaustive else _shared_cache(storage, sid, space)
    refreshed = time.monotonic()
    try:
        with Heartbeat(storage, max(heartbeat_s / 2, 0.2)) as hb:
            while not stop.requested:
                optuna.storages.fail_stale_trials(study)
                done, running, waiting = _counts(storage, sid)
                progress.show(min(done, rec.trials))
                if done >= rec.trials or (max_trials is not None and mine >= max_trials):
                    break
                want = min(rec.batch_size, rec.trials - done)
                if max_trials is not None:
                    want = min(want, max_trials - mine)
                new_allowed = 0 if exhaustive else rec.trials - done - running - len(waiting)
                ids = _claim(storage, sid, waiting, want, new_allowed, rng)
                if not ids:
                    enqueued = study.user_attrs.get(ENQUEUED_ATTR) is not None or not exhaustive
                    if missing.given_up(running == 0 and not waiting and enqueued):
                        print(
                            f"dse: study {study.study_name!r}: {rec.trials - done} trials are "
                            "missing and none is queued or running; run `dse sweep` with the "
                            "same space and storage to queue them again",
                            file=sys.stderr,
                        )
                        break
                    time.sleep(POLL_S)
                    continue
                hb.track(ids)
                try:
                    study.sampler = _sampler_for(rec, space, done, predictor, salt)
                    trials, rows = _suggest_claimed(study, ids, dists, worker)
                    if not trials:
                        continue
                    if (
                        not exhaustive
                        and done > seen.known
                        and (time.monotonic() - refreshed > CACHE_REFRESH_S)
                    ):
                        # Other workers' trials since the last look (one query per interval).
                        seen = _shared_cache(storage, sid, space)
                        refreshed = time.monotonic()
                    told = _evaluate_batch(
                        study, trials, rows, space, seen, predictor, progress, skip_finished=True
                    )
                    seen.add(told)
                finally:
                    hb.untrack(ids)
                mine += len(told)
                progress.show(min(done + len(told), rec.trials))
    finally:
        progress.close()
    return mine


def _shared_cache(storage: BaseStorage, sid: int, space: SearchSpace) -> ConfigCache:
    """The configurations a shared study has evaluated, read from its storage."""
    seen = ConfigCache(space)
    seen.add(
        storage.get_all_trials(sid, deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
    )
    return seen


def _enqueue_missing(study: optuna.Study, space: SearchSpace) -> int:
    """Queue every configuration not yet queued or evaluated (exhaustive on a shared storage);
    returns how many were queued. Then mark the study so workers know the queue is whole."""
    if study.user_attrs.get(ENQUEUED_ATTR) is not None:
        return 0
    names = [p.name for p in space.searched]
    seen: set[tuple[Any, ...]] = set()
    for t in study.get_trials(deepcopy=False):
        fixed = t.system_attrs.get("fixed_params") or t.params
        if all(k in fixed for k in names):
            seen.add(tuple(fixed[k] for k in names))
    n = 0
    size = space.size()
    for start in range(0, size, 4096):
        for params in S.config_params(space, np.arange(start, min(start + 4096, size))):
            key = tuple(params[k] for k in names)
            if key not in seen:
                study.enqueue_trial(params)
                n += 1
    study.set_user_attr(ENQUEUED_ATTR, size)
    return n


def _shared_study(
    storage: BaseStorage, space: SearchSpace, rec: StudyRecord, name: str, where: str
) -> tuple[optuna.Study, StudyRecord]:
    directions = list(space.objectives.directions)
    if name in study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        if "dse:space_hash" not in study.user_attrs and not study.get_trials(deepcopy=False):
            study = _init_record(study, space, rec)  # created but not yet recorded: finish it
        existing = StudyRecord.from_attrs(study.user_attrs, where)
        rec = _check_same(existing, rec, name, where)
        if study.user_attrs.get("dse:trials") != rec.trials:
            study.set_user_attr("dse:trials", rec.trials)
        return study, rec
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=directions)
    except optuna.exceptions.DuplicatedStudyError:
        return _shared_study(storage, space, rec, name, where)
    return _init_record(study, space, rec), rec


def _init_record(study: optuna.Study, space: SearchSpace, rec: StudyRecord) -> optuna.Study:
    study.set_metric_names(list(space.objectives.names))
    for k, v in rec.attrs().items():
        study.set_user_attr(k, v)
    return study


# ------------------------------------------------------------------ entry points
def run_sweep(opts: SweepOptions) -> SweepOutcome:
    """`dse sweep`: create or resume a study, run it to its budget, write the results folder.

    Every check that can fail on user input (YAML, sampler, storage URL, results folder,
    predictor artifact, an existing study with another space) runs before anything is
    written, and raises a DSEError with one clear message.
    """
    _quiet_optuna()
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
                _check_same(existing, rec, name, spec.display)
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
        with StopFlag(opts.quiet, "chunk" if rec.sampler == "exact" else "batch") as stop:
            if rec.sampler == "exact":
                trials, done, rec, counts = _exact(
                    space, rec, spec, storage, name, folder, opts, stop
                )
            elif spec.kind == "journal":
                trials, done, screened = _local(space, rec, spec, name, opts, stop)
            else:
                assert storage is not None
                trials, done, rec = _run_shared_sweep(storage, space, rec, spec, name, opts, stop)
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
        extra={
            **({"exact": counts} if counts is not None else {}),
            # configurations the screened sampler priced to choose its trials
            **({"screened_configs": screened} if screened is not None else {}),
        }
        or None,
    )
    if rec.sampler in ("exhaustive", "exact") and done >= rec.trials and exact is None:
        # Both hold the whole exact front (exact: plus a sample of the rest).
        written = _exhaustive_exact(written, space, folder)
    return written


def _run_shared_sweep(
    storage: BaseStorage,
    space: SearchSpace,
    rec: StudyRecord,
    spec: StorageSpec,
    name: str,
    opts: SweepOptions,
    stop: StopFlag,
) -> tuple[list[optuna.trial.FrozenTrial], int, StudyRecord]:
    study, rec = _shared_study(storage, space, rec, name, spec.display)
    if rec.sampler == "exhaustive":
        _enqueue_missing(study, space)
    _shared_loop(
        storage,
        study,
        space,
        rec,
        stop=stop,
        quiet=opts.quiet,
        heartbeat_s=opts.heartbeat_s,
        salt=0,
        predictor=opts.predictor,
    )
    trials = study.get_trials(deepcopy=False)
    done = sum(evaluated(t) for t in trials)
    return trials, done, rec


def _reference(
    space: SearchSpace, rec: StudyRecord, opts: SweepOptions, done: int, interrupted: bool
) -> ExactFront | None:
    if opts.reference != "exact" or interrupted:
        return None
    return exact_front(space, predictor=opts.predictor)


def _exhaustive_exact(written: Written, space: SearchSpace, folder: Path) -> Written:
    """A finished exhaustive study is its own exact front: record it as such."""
    import json

    from dse.files import write_atomic
    from dse.sweep._results import write_table

    write_table(written.front, folder / "exact_front.csv")
    summary = dict(written.summary)
    summary["exact_hypervolume"] = summary["hypervolume"]
    text = json.dumps(summary, indent=2, default=str) + "\n"
    write_atomic(folder / "summary.json", text)
    return replace(written, summary=summary)


def run_worker(
    storage_url: str,
    study_name: str,
    *,
    max_trials: int | None = None,
    quiet: bool = False,
    heartbeat_s: int = DEFAULT_HEARTBEAT_S,
    predictor: Predictor | None = None,
) -> int:
    """`dse worker`: join a shared study (its space, sampler and budget come from the study)
    and evaluate batches until the budget is met. Returns how many trials this worker ran."""
    _quiet_optuna()
    spec = parse_storage(storage_url, None)
    if spec.kind == "journal":
        raise ConfigError(
            f"--storage {spec.display}: workers share a study through a database "
            "(postgresql://, mysql:// or sqlite:///); a journal file is written by one "
            "`dse sweep` at a time"
        )
    storage = open_rdb(spec, heartbeat_s)
    study = load_study(storage, study_name, spec.display)
    rec = StudyRecord.from_attrs(study.user_attrs, f"{spec.display}: study {study_name!r}")
    space = space_from_record(rec)
    check_predictor(space, predictor)
    salt = int.from_bytes(os.urandom(4), "little")
    with StopFlag(quiet) as stop:
        return _shared_loop(
            storage,
            study,
            space,
            rec,
            stop=stop,
            quiet=quiet,
            heartbeat_s=heartbeat_s,
            salt=salt,
            max_trials=max_trials,
            predictor=predictor,
        )


__all__ = [
    "DSEError",
    "Evaluation",
    "SweepOptions",
    "SweepOutcome",
    "run_sweep",
    "run_worker",
    "settings",
    "space_from_record",
]

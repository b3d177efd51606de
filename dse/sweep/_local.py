"""The local engine (the default journal file): the sampler works on an in-memory copy of the
study and every finished batch is appended to the journal in one write, so a SIGKILL at any
moment leaves whole batches only; the same command again reloads them and continues. The
sampler of each batch is seeded from (seed, trials done), so the resumed run draws exactly what
the uninterrupted run would have drawn. The `exhaustive` sampler writes configuration k as
trial k, with no sampler to consult.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.trial import TrialState

from dse.errors import ConfigError
from dse.spec.space import SearchSpace
from dse.sweep import _samplers as S
from dse.sweep._config_cache import REPEAT_ATTR, ConfigCache, evaluate_batch, take_rows
from dse.sweep._evaluate import evaluate
from dse.sweep._journal import BatchedJournalBackend, open_journal
from dse.sweep._options import SweepOptions
from dse.sweep._progress import Progress, StopFlag, progress_add
from dse.sweep._samplers import sampler_for
from dse.sweep._trials import created_trials, evaluated
from dse.sweep.space_index import canonical_index, space_columns
from dse.sweep.storage import StorageSpec, study_names
from dse.sweep.study_record import StudyRecord, check_same, restore_record


def journal_study(
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
        rec = check_same(existing, rec, name, where)
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


def run_local(
    space: SearchSpace,
    rec: StudyRecord,
    spec: StorageSpec,
    name: str,
    opts: SweepOptions,
    stop: StopFlag,
) -> tuple[list[optuna.trial.FrozenTrial], int, int | None]:
    """Run the study on the default journal file; return (all finished trials, done, the
    configurations the `screened` sampler priced over the study's life; None for others)."""
    storage, backend, pstudy, rec = journal_study(space, rec, spec, name)
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
        progress_add(progress, t)
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
        mem.sampler = sampler_for(rec, space, done, opts.predictor)
        # Asked with the space's distributions: every trial shares the same objects.
        trials = [mem.ask(fixed_distributions=dists) for _ in range(n)]
        rows = [t.params for t in trials]
        told = evaluate_batch(
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
                take_rows(ev, [pos[int(twin[i])] for i in rows]),
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

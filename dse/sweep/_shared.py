"""The shared engine (an RDB storage: PostgreSQL, MySQL, SQLite) and `dse worker`: workers claim
trials through the database (a WAITING trial moves to RUNNING for exactly one of them),
heartbeat them while they run, and fail-and-requeue the trials of workers that died. Exhaustive
studies enqueue every configuration once, so no configuration is evaluated twice and none is
lost.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from dse.errors import ConfigError
from dse.spec.space import SearchSpace
from dse.sweep import _samplers as S
from dse.sweep._config_cache import ConfigCache, evaluate_batch
from dse.sweep._evaluate import Predictor, check_predictor
from dse.sweep._options import SweepOptions
from dse.sweep._progress import Progress, StopFlag, quiet_optuna
from dse.sweep._samplers import sampler_for
from dse.sweep._trials import evaluated, suggest_all
from dse.sweep.storage import (
    DEFAULT_HEARTBEAT_S,
    StorageSpec,
    load_study,
    open_rdb,
    parse_storage,
    study_names,
)
from dse.sweep.study_record import StudyRecord, check_same, space_from_record

ENQUEUED_ATTR = "dse:enqueued"
POLL_S = 0.5  # a worker with nothing to claim waits this long before looking again
# A shared worker re-reads the study's evaluated configurations at most this often (s): one
# query for all trials, so two workers can still evaluate one configuration within this window.
CACHE_REFRESH_S = 5.0


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
                    study.sampler = sampler_for(rec, space, done, predictor, salt)
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
                    told = evaluate_batch(
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


def shared_study(
    storage: BaseStorage, space: SearchSpace, rec: StudyRecord, name: str, where: str
) -> tuple[optuna.Study, StudyRecord]:
    directions = list(space.objectives.directions)
    if name in study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        if "dse:space_hash" not in study.user_attrs and not study.get_trials(deepcopy=False):
            study = _init_record(study, space, rec)  # created but not yet recorded: finish it
        existing = StudyRecord.from_attrs(study.user_attrs, where)
        rec = check_same(existing, rec, name, where)
        if study.user_attrs.get("dse:trials") != rec.trials:
            study.set_user_attr("dse:trials", rec.trials)
        return study, rec
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=directions)
    except optuna.exceptions.DuplicatedStudyError:
        return shared_study(storage, space, rec, name, where)
    return _init_record(study, space, rec), rec


def _init_record(study: optuna.Study, space: SearchSpace, rec: StudyRecord) -> optuna.Study:
    study.set_metric_names(list(space.objectives.names))
    for k, v in rec.attrs().items():
        study.set_user_attr(k, v)
    return study


def run_shared(
    storage: BaseStorage,
    space: SearchSpace,
    rec: StudyRecord,
    spec: StorageSpec,
    name: str,
    opts: SweepOptions,
    stop: StopFlag,
) -> tuple[list[optuna.trial.FrozenTrial], int, StudyRecord]:
    study, rec = shared_study(storage, space, rec, name, spec.display)
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
    quiet_optuna()
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

"""Distributed sweeps on a real PostgreSQL server: three workers, one killed mid-run.

Needs DSE_TEST_POSTGRES_URL (`source .ci/postgres.sh` starts a throw-away server on loopback
and exports it); skipped otherwise.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pandas as pd
import pytest

from dse.cli import main
from dse.sweep import SweepOptions, run_sweep
from dse.sweep.storage import open_rdb, parse_storage

URL = os.environ.get("DSE_TEST_POSTGRES_URL")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(
        not URL,
        reason="DSE_TEST_POSTGRES_URL is not set: `source .ci/postgres.sh` starts a server",
    ),
]
REPO = Path(__file__).resolve().parents[2]
PARAMS = ["d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"]
# 2 x 3 x 2 x 2 x 2 = 48 configurations, 12 of them invalid (24 heads do not divide 4096).
SPACE = """\
name: dist
hardware: h100_sxm
workload: {batch_size: 16, prompt_tokens: 1024, output_tokens: 256, tensor_parallel: 1}
space:
  d_model: {values: [3072, 4096]}
  n_layers: {low: 24, high: 40, step: 8}
  n_heads: {values: [24, 32]}
  n_kv_heads: {values: [4, 8]}
  d_ff: {values: [8192, 16384]}
  vocab_size: 128256
constraints:
  active_params: {min: 5.0e+9, max: 12.0e+9}
objectives:
  latency: {metric: request}
  energy: {source: hymell}
study: {sampler: exhaustive, trials: 48, seed: 0, batch_size: 4}
"""


def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "dse", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def storage():
    return open_rdb(parse_storage(URL, None), heartbeat_s=None)


def wait(predicate, procs, what: str, timeout_s: float = 90) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if predicate():
            return
        for p in procs:
            if p.poll() not in (None, 0):
                raise AssertionError(f"{what}: a process failed: {p.communicate()[1][-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_workers_one_killed_exact_count_no_repeats_same_front(tmp_path: Path) -> None:
    space = tmp_path / "dist.yaml"
    space.write_text(SPACE)
    name = f"dist-{uuid.uuid4().hex[:8]}"
    st = storage()
    common = ["--storage", URL, "--study", name, "--heartbeat", "1", "-q"]
    a = start(["sweep", str(space), "--out", str(tmp_path / "res"), *common], tmp_path)

    def queued() -> bool:
        if name not in [s.study_name for s in st.get_all_studies()]:
            return False
        return optuna.load_study(study_name=name, storage=st).user_attrs.get("dse:enqueued") == 48

    wait(queued, [a], "the study and its queue")
    # A works on the queue too, and on a fast machine it finished all 48 trials before worker B
    # had started (Python start-up): B never held one. A is frozen until B holds a trial, so the
    # test does not lean on the machine's speed; frozen past the grace period, A's own running
    # trials fail as stale and run again elsewhere, and A's late results are dropped (the
    # same path as a worker that stalls).
    a.send_signal(signal.SIGSTOP)
    b = start(["worker", *common], tmp_path)
    b_id = f"{socket.gethostname()}:{b.pid}"

    def b_holds_a_trial() -> bool:
        study = optuna.load_study(study_name=name, storage=st)
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        return any(t.user_attrs.get("worker") == b_id for t in running)

    # Freeze B, then look: a trial it holds while frozen is one it still holds when killed (B
    # could otherwise finish the trial seen running between the look and the kill, and die
    # holding none: the stale path below would go untested).
    try:
        for _ in range(100):
            wait(b_holds_a_trial, [a, b], "worker B to hold a trial")
            b.send_signal(signal.SIGSTOP)
            if b_holds_a_trial():
                break
            b.send_signal(signal.SIGCONT)
        else:
            raise AssertionError("worker B never held a trial while frozen")
    except BaseException:
        for p in (a, b):
            p.send_signal(signal.SIGKILL)
        raise
    c = start(["worker", *common], tmp_path)
    a.send_signal(signal.SIGCONT)
    b.send_signal(signal.SIGKILL)
    b.wait()
    assert a.wait(timeout=120) == 0, a.communicate()[1][-3000:]
    assert c.wait(timeout=60) == 0, c.communicate()[1][-3000:]

    study = optuna.load_study(study_name=name, storage=st)
    trials = study.get_trials(deepcopy=False)
    states = Counter(t.state.name for t in trials)
    assert states["RUNNING"] == 0 and states["WAITING"] == 0
    evaluated = [
        t
        for t in trials
        if t.state.name == "COMPLETE" or "invalid_reason" in t.user_attrs  # invalid: FAIL
    ]
    assert len(evaluated) == 48  # exact: every configuration once
    keys = [tuple(t.params[p] for p in PARAMS) for t in evaluated]
    assert len(set(keys)) == 48  # none twice
    # B died holding trials: they failed as stale and ran again elsewhere (retried copies).
    stale = [t for t in trials if t.state.name == "FAIL" and "invalid_reason" not in t.user_attrs]
    assert stale, "the killed worker left no stale trial"
    retried = {t.system_attrs.get("failed_trial") for t in evaluated} - {None}
    assert {t.number for t in stale} <= retried
    workers = Counter(t.user_attrs.get("worker") for t in evaluated)
    assert len(workers) >= 2
    # The front equals the one a single process finds on the same exhaustive space.
    single = tmp_path / "single"
    run_sweep(SweepOptions(space_file=space, out=single, quiet=True))
    f1 = pd.read_csv(single / "front.csv")[PARAMS].sort_values(PARAMS).reset_index(drop=True)
    f3 = pd.read_csv(tmp_path / "res" / "front.csv")[PARAMS].sort_values(PARAMS)
    assert f3.reset_index(drop=True).equals(f1)
    res = pd.read_parquet(tmp_path / "res" / "trials.parquet")
    assert (res["state"] == "COMPLETE").sum() + (res["invalid_reason"] != "").sum() == 48


def test_studies_show_and_a_second_sweep_join_the_database(tmp_path: Path, capsys) -> None:
    space = tmp_path / "dist.yaml"
    space.write_text(SPACE.replace("sampler: exhaustive", "sampler: random").replace("48", "12"))
    name = f"list-{uuid.uuid4().hex[:8]}"
    args = ["--storage", URL, "--study", name, "-q"]
    assert main(["sweep", str(space), "--out", str(tmp_path / "r"), *args]) == 0
    assert main(["sweep", str(space), "--out", str(tmp_path / "r"), *args]) == 0  # no-op resume
    assert main(["studies", "--storage", URL]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith(name))
    assert " 12 " in line and "random" in line and "***" not in line
    assert main(["show", name, "--storage", URL]) == 0
    assert "configurations on the front" in capsys.readouterr().out
    assert main(["worker", "--storage", URL, "--study", name, "-q"]) == 0  # budget met: exits
    assert main(["worker", "--storage", URL, "--study", "no-such-study", "-q"]) == 2
    assert "no study named 'no-such-study'" in capsys.readouterr().err


def test_screened_sampler_on_the_database(tmp_path: Path) -> None:
    """The screened sampler through the shared-storage loop: its screen reads the study's
    trials from the database and proposes only valid, distinct configurations first."""
    space = tmp_path / "dist.yaml"
    space.write_text(SPACE.replace("sampler: exhaustive", "sampler: screened").replace("48", "24"))
    name = f"scr-{uuid.uuid4().hex[:8]}"
    args = ["--storage", URL, "--study", name, "-q"]
    assert main(["sweep", str(space), "--out", str(tmp_path / "r"), *args]) == 0
    res = pd.read_parquet(tmp_path / "r" / "trials.parquet")
    assert len(res) == 24 and (res["state"] == "COMPLETE").all()  # 36 valid: no invalid picked
    assert len(res[PARAMS].drop_duplicates()) == 24

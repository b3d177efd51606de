"""A finished sweep's storage opens in optuna-dashboard, read back through its HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_sweep import SMALL

from dse.sweep import SweepOptions, run_sweep

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_dashboard_reads_a_finished_study_on_loopback(tmp_path: Path) -> None:
    space = tmp_path / "small.yaml"
    space.write_text(SMALL)
    out = tmp_path / "res"
    run_sweep(SweepOptions(space_file=space, out=out, trials=32, quiet=True))
    port = free_port()
    exe = shutil.which("optuna-dashboard") or ""
    cmd = [exe] if exe else [sys.executable, "-m", "optuna_dashboard"]
    proc = subprocess.Popen(
        [*cmd, str(out / "journal.log"), "--host", "127.0.0.1", "--port", str(port), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        while True:
            try:
                studies = get(f"{base}/api/studies")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > 60:
                    raise AssertionError(f"dashboard did not start: {proc.stderr.read()}") from None
                time.sleep(0.2)
        (summary,) = studies["study_summaries"]
        assert summary["study_name"] == "small"
        attrs = {a["key"]: a["value"] for a in summary["user_attrs"]}
        assert attrs["dse:sampler"] == "random"
        study = get(f"{base}/api/studies/{summary['study_id']}?after=0")
        assert study["objective_names"] == ["latency_request", "energy_hymell_request"]
        trials = study["trials"]
        assert len(trials) == 32
        complete = [t for t in trials if t["state"] == "Complete"]
        assert complete
        t = complete[0]
        user = {a["key"]: a["value"] for a in t["user_attrs"]}
        assert json.loads(user["pred"])["latency_s"] == pytest.approx(t["values"][0])
        # optuna-dashboard 0.21 reads only the pre-Optuna-5 `constraints` list, not the named
        # values of Trial.set_constraint: the feasibility is in our user attributes instead.
        assert user["feasible"] in ("True", "False", True, False)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

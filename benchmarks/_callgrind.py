"""Instructions a benchmark's worker runs on a checkout, by callgrind: the shared runner of
the `*_instructions.py` benchmarks (a count other jobs on a shared machine do not move)."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from small_calls import _env


def callgrind_instructions(code: Path, script: str, worker_args: list[str]) -> int:
    """Instructions callgrind collected for `python script *worker_args` run in `code` on its
    own dse and artifacts (PYTHONHASHSEED=0, one BLAS thread)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**_env(code), "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
        env["OMP_NUM_THREADS"] = "1"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out"]
        cmd += [sys.executable, str(Path(script).resolve()), *worker_args]
        done = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
        hit = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode or hit is None:
            raise SystemExit(f"callgrind run for {code} failed:\n{done.stderr[-2000:]}")
        return int(hit.group(1))

"""`dse profile` on the CPU, end to end: profile -> fit -> predict -> a two-objective sweep on
the new "GPU", with energy not measured; a second run on the offset grid scored by `dse
validate`; bad input (exit 2, one message); an interrupted or killed profile loses nothing and
resumes. Real processes, real files, the real PyTorch kernels (CPU build)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# slow: minutes on a 2-core VM (fits, sweeps, builds); `pytest -m "not slow"` leaves it out
pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
GPU = "cputest"


def dse(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dse", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _sigint_default() -> None:
    """In the child, before Python starts: Ctrl-C at its default, as in a terminal (a child
    inherits an ignored SIGINT, e.g. from a background job, and Python then installs no
    KeyboardInterrupt handler: the interruption tests would not be about the code)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "dse", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_default,
    )


def journal_rows(out: Path) -> list[dict]:
    rows = []
    for p in sorted((out / ".journal").glob("*.jsonl")):
        for line in p.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a killed run's torn last line
                rows.append(json.loads(line))
    return rows


AIC = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data"


# ---------------------------------------------------------------------------- the whole loop
@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One quick CPU profile, its artifact (fitted without CV) and an offset-grid profile."""
    tmp = tmp_path_factory.mktemp("profile")
    prof, surr = tmp / "prof", tmp / "surrogates"
    got = dse("profile", "--device", "cpu", "--quick", "--name", GPU, "--out", str(prof), cwd=tmp)
    assert got.returncode == 0, got.stderr
    fit = dse(
        "fit",
        "--data",
        str(prof),
        "--gpu",
        GPU,
        "--no-cv",
        cwd=tmp,
        env={"DSE_SURROGATES": str(surr)},
    )
    assert fit.returncode == 0, fit.stderr + fit.stdout
    off = tmp / "prof_offset"
    got = dse(
        "profile", "--device", "cpu", "--quick", "--offset", "1", "--name", GPU,
        "--ops", "gemm,attention", "--out", str(off), cwd=tmp,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    return {"tmp": tmp, "prof": prof, "surr": surr, "offset": off, "fit_log": fit}


def test_profile_writes_the_layout_dse_fit_reads(loop: dict) -> None:
    from dse.data import load

    prof = loop["prof"]
    base = prof / AIC / GPU
    for op, stem in [
        ("gemm", "gemm_perf"),
        ("attention", "context_attention_perf"),
        ("attention", "generation_attention_perf"),
        ("moe", "moe_perf"),
    ]:
        (path,) = base.glob(f"{op}/pytorch/*/{stem}.parquet")
        df = pd.read_parquet(path)
        # spread recorded per row; latency in ms; no power column where none was measured
        assert {"latency", "latency_std_ms", "repeats", "ci_rel_halfwidth"} <= set(df.columns)
        assert "power" not in df.columns
        assert (df["latency"] > 0).all() and (df["repeats"] >= 5).all()
        assert (df["timer"] == "perf-counter").all()  # the CPU's timer; a GPU's: cuda-graph
    assert (prof / "vidur/data/profiling/compute" / GPU).is_dir()
    tables = load(prof)
    assert {"gemm", "context_attention", "generation_attention", "moe", "layer_op"} <= set(tables)
    for t in tables.values():
        assert set(t["gpu"]) == {GPU}
        assert t["energy_j"].isna().all()  # energy not measured on a CPU
    ctx = pd.read_parquet(next(base.glob("attention/pytorch/*/context_attention_perf.parquet")))
    assert ctx["kernel_source"].str.startswith("sdpa_").all()  # the SDPA backend is recorded
    moe = tables["moe"]
    assert set(moe["distribution"]) == {"balanced", "uniform", "power_law_1.2"}

    man = json.loads((prof / "profile.json").read_text())
    assert man["gpu"] == GPU and man["device"]["torch"] == torch.__version__
    assert man["energy"]["method"].startswith("not measured")
    assert "stop_rule" in man["protocol"] and man["runs"][-1]["status"] == "complete"
    assert "allreduce" in man["notes"]  # skipped on a CPU, and said so
    spec = (prof / "gpu.yaml").read_text()
    assert "measured:" in spec and "datasheet:" not in spec  # a CPU has no datasheet: measured only


def test_fit_predict_and_sweep_on_the_profiled_cpu(loop: dict) -> None:
    tmp, surr = loop["tmp"], loop["surr"]
    env = {"DSE_SURROGATES": str(surr)}
    art = json.loads((surr / GPU / "manifest.json").read_text())
    assert art["gpu"] == GPU and (surr / GPU / "gpu.yaml").is_file()
    fitted = set(art["models"])
    assert {"gemm.pytorch.bfloat16", "layer_op.vidur", "moe.pytorch.bfloat16"} <= fitted
    assert any(n.startswith("context_attention.") for n in fitted)
    assert not art["measured_power"]

    gpus = dse("gpus", cwd=tmp, env=env)
    assert gpus.returncode == 0 and GPU in gpus.stdout and "profiled" in gpus.stdout

    shape = ["--d-model", "256", "--n-layers", "4", "--n-heads", "8", "--n-kv-heads", "2"]
    shape += ["--d-ff", "512", "--vocab-size", "32000", "--batch-size", "2"]
    shape += ["--prompt-tokens", "64", "--output-tokens", "16"]
    got = dse("predict", *shape, "--gpu", GPU, "--json", cwd=tmp, env=env)
    assert got.returncode == 0, got.stderr
    pred = json.loads(got.stdout.replace("NaN", "null"))
    p = pred["prediction"]
    assert p["artifact_gpu"] == GPU and p["artifact_id"] == art["artifact_id"]
    assert p["latency_s"] > 0 and p["ttft_s"] > 0
    assert p["energy_j"] is None  # not measured: NaN, never a made-up number

    space = tmp / "space.yaml"
    space.write_text(
        f"""name: cpu-tiny
description: tiny dense models on the profiled CPU
hardware: {GPU}
workload: {{batch_size: 2, prompt_tokens: 64, output_tokens: 16, tensor_parallel: 1}}
space:
  d_model: {{values: [128, 256]}}
  n_layers: {{values: [2, 4]}}
  n_heads: 4
  n_kv_heads: 2
  d_ff: {{values: [256, 512]}}
  vocab_size: 32000
  training_tokens: 1.0e+9
objectives:
  loss: {{source: chinchilla}}
  latency: {{metric: request}}
study: {{sampler: exhaustive, trials: 8, seed: 0}}
"""
    )
    got = dse(
        "sweep", str(space), "--out", str(tmp / "sweep"), "--no-report", "-q", cwd=tmp, env=env
    )
    assert got.returncode == 0, got.stderr
    trials = pd.read_csv(tmp / "sweep" / "trials.csv")
    assert len(trials) == 8
    lat = [c for c in trials.columns if c.startswith("obj.latency")]
    assert lat and np.isfinite(trials[lat[0]]).all() and (trials[lat[0]] > 0).all()


def test_validate_scores_the_artifact_on_the_offset_grid(loop: dict) -> None:
    from dse.profile import grid

    # the offset grid measures shapes the first run did not
    base = {grid.shape_key("gemm", "bfloat16", s) for s in grid.gemm_shapes("tiny", 0)}
    off = {grid.shape_key("gemm", "bfloat16", s) for s in grid.gemm_shapes("tiny", 1)}
    assert off and not base & off
    got = dse(
        "validate", "--data", str(loop["offset"]), "--artifacts", str(loop["surr"]),
        "--gpu", GPU, "--json", str(loop["tmp"] / "v.json"), cwd=loop["tmp"],
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert GPU in (loop["tmp"] / "v.json").read_text()
    for kind in ("gemm", "context_attention", "generation_attention"):
        assert kind in got.stdout
    # each table of the profile has a latency MAPE: none is missing for the measured kinds
    # (read from the JSON report: the text table's columns grow, e.g. the band columns)
    report = json.loads((loop["tmp"] / "v.json").read_text())
    rows = [r for r in report["results"] if r["source"] == "aiconfigurator"]
    assert len(rows) == 3
    assert all(math.isfinite(float(r["latency_mape_pct"])) for r in rows)


# ---------------------------------------------------------------------------- relative speeds
def _slow_matmul_copy(prof: Path, dest: Path, tmp: Path) -> float:
    """A copy of the CPU profile where bf16 matmul is slow next to attention, as on an AVX2-only
    EPYC (SDPA 8 GFLOP/s, matmul 0.5; issue 32), whatever CPU runs the test: the GEMM rows'
    latencies in the journal and the measured square-GEMM peak in profile.json are scaled so
    the peak sits at 1/4 of the median attention rate and 1/3 of the median rate of vidur's
    projection GEMMs; a rerun of `dse profile` (nothing to measure) rebuilds the tables and
    gpu.yaml from them. Real files, the real commands. Returns the lowered peak (FLOP/s)."""
    from dse.data import load
    from dse.fitting import plausible as P

    shutil.copytree(prof, dest)
    tables = load(dest, ["context_attention", "layer_op"])
    att, lay = tables["context_attention"], tables["layer_op"]
    att_rate = np.median(P.kernel_work("context_attention", att).flops / att["latency_s"])
    w = P.kernel_work("layer_op", lay)
    gem = w.flops > 0
    proj_rate = np.median(w.flops[gem] / lay["latency_s"].to_numpy()[gem])
    man_path = dest / "profile.json"
    man = json.loads(man_path.read_text())
    p_sq = float(man["peaks"]["peak_bfloat16_flops_per_s"])
    p_low = min(p_sq, att_rate / 4.0, proj_rate / 3.0)
    slower = p_sq / p_low
    journal = dest / ".journal" / "gemm.jsonl"
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    for r in (r for r in rows if not r.get("skipped")):  # a skipped shape has no times
        for key in ("latency_s", "latency_mean_s", "latency_min_s", "latency_max_s", "latency_std_s"):  # fmt: skip
            r[key] *= slower
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows))
    man["peaks"]["peak_bfloat16_flops_per_s"] = p_low
    man_path.write_text(json.dumps(man))
    got = dse("profile", "--device", "cpu", "--quick", "--name", GPU, "--out", str(dest), cwd=tmp)
    assert got.returncode == 0 and "0 to measure now" in got.stdout, got.stderr
    return p_low


def test_attention_faster_than_the_matmul_peak_is_fitted(loop: dict, tmp_path: Path) -> None:
    """Issue 32: a CPU whose attention outruns its matmul peak. Floors from that one peak (a
    gpu.yaml without kernel_peaks: profiles before the fix) leave too few attention rows to fit
    and the vidur reader refused the projection GEMMs; with the per-kind peaks the profile now
    writes every row is kept and every table fitted."""
    import yaml

    from dse.data import load
    from dse.fitting import plausible as P
    from dse.fitting.attention import MIN_ATTENTION_ROWS
    from dse.spec import hardware

    dest = tmp_path / "slowmm"
    p_low = _slow_matmul_copy(loop["prof"], dest, tmp_path)
    spec = yaml.safe_load((dest / "gpu.yaml").read_text())
    assert spec["peak_bf16_flops_per_s"] == pytest.approx(p_low)
    peaks = spec["kernel_peaks"]
    assert peaks["context_attention"]["bfloat16"]["flops_per_s"] > 3 * p_low
    assert {"gemm", "context_attention", "generation_attention", "moe", "layer_op"} <= set(peaks)

    # the situation is the reported one: the matmul peak as every kind's floor (the spec
    # without kernel_peaks, under another name) leaves fewer attention rows than a fit needs
    old = {k: v for k, v in spec.items() if k != "kernel_peaks"} | {"name": "cpuold"}
    hardware.register_gpu(hardware.spec_from_mapping(old, "old gpu.yaml"))
    try:
        att = load(dest, ["context_attention"])["context_attention"].assign(gpu="cpuold")
        kept = len(att) - int(P.implausible("context_attention", att).sum())
        assert kept < MIN_ATTENTION_ROWS <= len(att)
    finally:
        hardware._EXTRA.pop("cpuold", None)

    out = tmp_path / "art"
    fit = dse(
        "fit", "--data", str(dest), "--gpu", GPU, "--no-cv", "--only", "gemm", "--only",
        "layer_op", "--only", "attention", "--out", str(out), cwd=tmp_path,
        env={"DSE_SURROGATES": str(tmp_path / "surrogates")},
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr + fit.stdout
    art = json.loads((out / "manifest.json").read_text())
    assert {
        "gemm.pytorch.bfloat16",
        "layer_op.vidur",
        "context_attention.pytorch",
        "generation_attention.pytorch",
    } <= set(art["models"])
    assert art["implausible_rows"] == {} and art["skipped_tables"] == {}
    assert "implausible" not in fit.stdout and "not fitted" not in fit.stdout


def test_a_table_too_small_to_fit_is_named(loop: dict, tmp_path: Path) -> None:
    """A table skipped for too few rows says so: its name, row count and the minimum, in the
    output of `dse fit` and in the manifest (issue 32: it was skipped without a word)."""
    from dse.fitting.attention import MIN_ATTENTION_ROWS

    dest = tmp_path / "small"
    shutil.copytree(loop["prof"], dest)
    (path,) = (dest / AIC / GPU).glob("attention/pytorch/*/context_attention_perf.parquet")
    pd.read_parquet(path).iloc[:150].to_parquet(path, index=False)
    out = tmp_path / "art"
    fit = dse(
        "fit", "--data", str(dest), "--gpu", GPU, "--no-cv", "--only", "attention",
        "--out", str(out), cwd=tmp_path, env={"DSE_SURROGATES": str(tmp_path / "surrogates")},
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr + fit.stdout
    assert (
        f"context_attention.pytorch: not fitted: 150 rows of {GPU}, fewer than the "
        f"{MIN_ATTENTION_ROWS} a context_attention table needs" in fit.stdout
    )
    art = json.loads((out / "manifest.json").read_text())
    assert art["skipped_tables"] == {
        "context_attention.pytorch": {
            "kind": "context_attention",
            "rows": 150,
            "min_rows": MIN_ATTENTION_ROWS,
            "implausible_rows_left_out": 0,
        }
    }
    assert "generation_attention.pytorch" in art["models"]
    assert "context_attention.pytorch" not in art["models"]


# ---------------------------------------------------------------------------- bad input
def test_bad_input_is_one_message_and_exit_2(loop: dict, tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        got = dse("profile", "--device", "cuda", "--out", str(tmp_path / "x"), cwd=tmp_path)
        assert got.returncode == 2 and "no CUDA GPU is visible" in got.stderr
        assert "--device cpu" in got.stderr and "Traceback" not in got.stderr
    got = dse(
        "profile",
        "--device",
        "cpu",
        "--ops",
        "gemm,conv",
        "--out",
        str(tmp_path / "y"),
        cwd=tmp_path,
    )
    assert got.returncode == 2 and "unknown op(s) conv" in got.stderr and "valid ops" in got.stderr
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    got = dse("profile", "--device", "cpu", "--quick", "--out", str(blocker / "sub"), cwd=tmp_path)
    assert got.returncode == 2 and "cannot write there" in got.stderr
    got = dse(
        "profile",
        "--device",
        "cpu",
        "--name",
        "cpu_test",
        "--out",
        str(tmp_path / "z"),
        cwd=tmp_path,
    )
    assert got.returncode == 2 and "'cputest'" in got.stderr  # vidur's reader would cut the name
    # a profile of another GPU given to --gpu
    got = dse(
        "fit",
        "--data",
        str(loop["prof"]),
        "--gpu",
        "h100_sxm",
        "--out",
        str(tmp_path / "a"),
        cwd=tmp_path,
    )
    assert got.returncode == 2
    assert f"is a profile of GPU '{GPU}'" in got.stderr and f"--gpu {GPU}" in got.stderr
    # continuing a profile folder under another name
    got = dse(
        "profile",
        "--device",
        "cpu",
        "--quick",
        "--name",
        "othercpu",
        "--out",
        str(loop["prof"]),
        cwd=tmp_path,
    )
    assert got.returncode == 2 and f"holds a profile of GPU '{GPU}'" in got.stderr


def test_missing_torch_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"  # what an install without torch sees
        "from dse.cli import main\n"
        f"sys.exit(main(['profile', '--device', 'cpu', '--out', {str(tmp_path / 'p')!r}]))\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 2 and "pip install 'dse[profile]'" in got.stderr


# ---------------------------------------------------------------------------- interruption
def _wait_rows(out: Path, n: int, proc: subprocess.Popen[str], timeout_s: float = 120) -> int:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        have = len(journal_rows(out))
        if have >= n or proc.poll() is not None:
            return have
        time.sleep(0.05)
    return len(journal_rows(out))


def test_interrupted_and_killed_runs_lose_nothing_and_resume(tmp_path: Path) -> None:
    from dse.profile import grid

    out = tmp_path / "p"
    args = ["profile", "--device", "cpu", "--quick", "--name", GPU, "--ops", "gemm,moe", "--out", str(out), "--no-progress"]  # fmt: skip
    planned = {grid.shape_key(*it) for it in grid.plan(["gemm", "moe"], ["bfloat16"], "tiny", 0)}

    proc = start(args, tmp_path)  # Ctrl-C: the run stops, tables are rebuilt, exit 130
    _wait_rows(out, 40, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    first = {r["key"]: r for r in journal_rows(out)}
    assert 0 < len(first) < len(planned)
    man = json.loads((out / "profile.json").read_text())
    assert man["runs"][-1]["status"] == "interrupted"
    (gemm,) = (out / AIC / GPU).glob("gemm/pytorch/*/gemm_perf.parquet")
    assert len(pd.read_parquet(gemm)) == sum(k.startswith("gemm|") for k in first)

    proc = start(args, tmp_path)  # SIGKILL: nothing runs after it, the journal still holds
    _wait_rows(out, len(first) + 40, proc)
    proc.kill()
    proc.communicate(timeout=60)
    second = {r["key"]: r for r in journal_rows(out)}
    assert set(first) <= set(second)

    got = dse(*args, cwd=tmp_path)  # resumes: measures only what is missing
    assert got.returncode == 0, got.stderr
    assert f"{len(second)} already measured" in got.stdout
    rows = journal_rows(out)
    keys = [r["key"] for r in rows]
    assert set(keys) == planned and len(keys) == len(set(keys))  # nothing lost, nothing twice
    final = {r["key"]: r for r in rows}
    assert all(final[k] == first[k] for k in first)  # earlier measurements kept as they were
    again = dse(*args, cwd=tmp_path)
    assert again.returncode == 0 and "0 to measure now" in again.stdout


def test_budget_defers_shapes_to_a_later_run(tmp_path: Path) -> None:
    out = tmp_path / "b"
    args = ["profile", "--device", "cpu", "--quick", "--name", GPU, "--ops", "gemm", "--out", str(out), "--no-progress"]  # fmt: skip
    got = dse(*args, "--max-minutes", "0.002", cwd=tmp_path)  # 0.12 s of estimated work
    assert got.returncode == 0, got.stderr
    assert "left for a later run" in got.stdout
    man = json.loads((out / "profile.json").read_text())
    assert man["pending"] > 0 and man["runs"][-1]["status"] == "budget"
    got = dse(*args, cwd=tmp_path)
    assert got.returncode == 0 and ", 0 left" in got.stdout


def test_allreduce_rows_round_trip_through_the_reader(tmp_path: Path) -> None:
    """The multi-GPU path's timing and table, run as two CPU processes over gloo (the same
    schedule and writer as NCCL on GPUs; `dse profile` uses it when >= 2 GPUs are visible)."""
    from dse.data import load
    from dse.profile.allreduce import group_sizes, measure_allreduce
    from dse.profile.writer import Journal, write_tables

    assert group_sizes(1) == [] and group_sizes(8) == [2, 4, 8]
    shapes = [{"num_gpus": 2, "message_elements": n} for n in (1024, 65536)]
    rows = measure_allreduce(shapes, "bfloat16", backend="gloo")
    assert sorted(r["message_elements"] for r in rows) == [1024, 65536]
    j = Journal(tmp_path)
    for r in rows:
        j.append("allreduce", {**r, "key": str(r["message_elements"])})
    write_tables(tmp_path, GPU, None, j, {"torch": torch.__version__, "name": "cpu"})
    t = load(tmp_path, ["allreduce"])["allreduce"]
    assert sorted(t["message_bytes"]) == [2048, 131072]  # bf16: 2 bytes per element
    assert set(t["n_gpus"]) == {2} and (t["latency_s"] > 0).all()


def test_fp8_on_a_cpu_is_recorded_as_skipped(tmp_path: Path) -> None:
    out = tmp_path / "f"
    args = ["profile", "--device", "cpu", "--quick", "--name", GPU, "--ops", "gemm", "--dtype", "bfloat16,fp8", "--out", str(out), "--no-progress"]  # fmt: skip
    got = dse(*args, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert "36 shapes measured, 36 skipped" in got.stdout
    skipped = [r for r in journal_rows(out) if r.get("skipped")]
    assert {r["dtype"] for r in skipped} == {"fp8"} and "CUDA" in skipped[0]["skipped"]
    got = dse("profile", "--device", "cpu", "--dtype", "int3", "--out", str(out), cwd=tmp_path)
    assert got.returncode == 2 and "unknown dtype(s) int3" in got.stderr


# ---------------------------------------------------------------------------- pure parts
def test_median_ci_stop_rule() -> None:
    from dse.profile.timing import median_ci_rel_halfwidth

    assert median_ci_rel_halfwidth(np.ones(4)) == math.inf  # too few samples
    assert median_ci_rel_halfwidth(np.ones(20)) == 0.0
    x = np.linspace(0.9, 1.1, 101)  # order statistics 40 and 60 of 101: 0.98 .. 1.02
    assert median_ci_rel_halfwidth(x) == pytest.approx(0.02, rel=0.06)


def test_a_sample_is_calls_back_to_back_and_the_energy_loop_reuses_it() -> None:
    """The timed sample (a Python loop on a CPU, a CUDA graph replay on a GPU) makes exactly
    `calls` calls per run, and the Timing hands that sample to the energy loop."""
    from dse.profile.timing import Clock, Protocol, measure

    n = [0]

    def fn() -> None:
        n[0] += 1

    clock = Clock(torch, torch.device("cpu"))
    assert not clock.graphs  # graphs are a CUDA thing
    run, timer = clock.batch(fn, 7)
    run()
    assert n[0] == 7 and timer == "perf-counter"
    proto = Protocol(warmup=1, min_repeats=5, max_repeats=6, min_sample_s=1e-3, max_calls=50)
    t = measure(fn, clock, proto, None)
    assert t.timer == "perf-counter" and 1 <= t.calls <= 50 and t.sample is not None
    before = n[0]
    t.sample()
    assert n[0] - before == t.calls


def test_journals_from_before_the_graph_timer_read_as_loops(tmp_path: Path) -> None:
    from dse.profile.writer import _aic_frame

    row = {"m": 8, "n": 16, "k": 16, "dtype": "bfloat16", "kernel_source": "torch_linear",
           "latency_s": 1e-5, "latency_mean_s": 1e-5, "latency_std_s": 0.0,
           "latency_min_s": 1e-5, "latency_max_s": 1e-5, "repeats": 5, "calls": 10,
           "ci_rel_halfwidth": 0.01, "power_w": math.nan, "energy_seconds": math.nan}  # fmt: skip
    info = {"torch": "2.11.0", "name": "NVIDIA H200", "device": "cuda:0"}
    assert list(_aic_frame("gemm", [row], info)["timer"]) == ["cuda-events"]
    new = _aic_frame("gemm", [row, {**row, "timer": "cuda-graph"}], info)
    assert list(new["timer"]) == ["cuda-events", "cuda-graph"]


def test_routings_touch_the_stated_experts() -> None:
    from dse.profile.ops import route

    bal = route(torch, 3, 2, 8, "balanced")
    assert len(set(bal.reshape(-1).tolist())) == min(8, 3 * 2)
    bal = route(torch, 64, 2, 8, "balanced")
    assert torch.bincount(bal.reshape(-1), minlength=8).tolist() == [16] * 8
    skew = route(torch, 4096, 1, 16, "power_law_1.2")
    counts = torch.bincount(skew.reshape(-1), minlength=16)
    assert counts[0] > 4 * counts[15]  # expert 0 drawn far more often
    uni = route(torch, 512, 4, 8, "uniform")
    assert all(len(set(row)) == 4 for row in uni.tolist())  # distinct experts per token


def test_journal_ignores_a_torn_last_line(tmp_path: Path) -> None:
    from dse.profile.writer import Journal

    j = Journal(tmp_path)
    j.append("gemm", {"key": "a", "latency_s": 1e-3})
    with open(tmp_path / ".journal" / "gemm.jsonl", "a") as fh:
        fh.write('{"key": "b", "laten')  # a kill mid-write
    assert [r["key"] for r in j.rows("gemm")] == ["a"] and j.done() == {"a"}


def test_a_signal_stops_the_run_between_shapes_and_a_second_at_once() -> None:
    import signal as sig

    from dse.profile.run import _stop_on_signals

    before = sig.signal(sig.SIGINT, sig.default_int_handler)  # as in a terminal
    with _stop_on_signals() as stop:
        stop.check()  # nothing asked: no stop
        sig.raise_signal(sig.SIGINT)  # lands mid-shape: only noted
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            stop.check()  # the loop stops at the next shape
        with pytest.raises(KeyboardInterrupt):
            sig.raise_signal(sig.SIGTERM)  # a second signal: at once
    assert sig.getsignal(sig.SIGINT) is sig.default_int_handler
    sig.signal(sig.SIGINT, before)
    # a run started with SIGINT ignored (a background job) keeps it ignored
    old = sig.signal(sig.SIGINT, sig.SIG_IGN)
    try:
        with _stop_on_signals():
            assert sig.getsignal(sig.SIGINT) is sig.SIG_IGN
    finally:
        sig.signal(sig.SIGINT, old)

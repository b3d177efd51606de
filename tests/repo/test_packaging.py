"""A plain (non-editable) install must carry everything it needs: example spaces, artifacts, specs."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

# slow: minutes on a 2-core VM (fits, sweeps, builds); `pytest -m "not slow"` leaves it out
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_lists_every_subpackage() -> None:
    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.relative_to(REPO).parent.parts)
        for p in (REPO / "dse").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found <= listed, (
        f"add to pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"
    )


def test_wheel_install_runs_from_anywhere(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("dse-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    installed = target / "dse"
    # Data folders travel inside the wheel.
    assert sorted(p.name for p in (installed / "search_spaces").glob("*.yaml")) == sorted(
        p.name for p in (REPO / "search_spaces").glob("*.yaml")
    )
    shipped = sorted(
        str(p.relative_to(REPO / "surrogates"))
        for p in (REPO / "surrogates").rglob("*")
        if p.suffix in (".json", ".npz")
    )
    got = sorted(
        str(p.relative_to(installed / "surrogates"))
        for p in (installed / "surrogates").rglob("*")
        if p.suffix in (".json", ".npz")
    )
    assert got == shipped
    assert len(list((installed / "hardware_specs").glob("*.yaml"))) >= 3
    # Run from an unrelated folder so the checkout cannot be found by accident.
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "dse", *a],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    where = subprocess.run(
        [sys.executable, "-c", "import dse; print(dse.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert where.stdout.strip().startswith(str(target))
    r = run("check", "dense_8b")
    assert r.returncode == 0, r.stderr
    # The console script too: it starts from dse.cli:main without runpy's imports.
    script = target / "bin" / "dse"
    assert script.is_file()
    r = subprocess.run(
        [sys.executable, str(script), "check", "dense_8b"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "search space 'dense-8b' is valid" in r.stdout
    r = run(
        "predict",
        "--d-model",
        "2048",
        "--n-layers",
        "16",
        "--n-heads",
        "16",
        "--d-ff",
        "8192",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert '"latency_s"' in r.stdout

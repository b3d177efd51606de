"""Where the shipped data folders are: inside the installed wheel, or the repository checkout.

`search_spaces/` and `surrogates/` live at the top level of the repository and are installed as
the packages `dse.search_spaces` and `dse.surrogates` (see pyproject.toml); running from a
checkout without installing (PYTHONPATH=.) finds them beside the `dse/` folder.
"""

from __future__ import annotations

import importlib.resources
import os
from functools import cache
from importlib.abc import Traversable
from pathlib import Path

# The folder holding the frozen artifacts, <gpu>/manifest.json + weights.npz: this variable, else
# the shipped `surrogates/`. `surrogates_dir()` is the one place it is read: `dse predict`,
# `dse fit` (its default output), `dse validate`, `Artifact.load(<gpu name>)` and the profiled
# GPUs of the registry all look there.
SURROGATES_ENV = "DSE_SURROGATES"


def shipped(name: str) -> Traversable:
    """The folder `name` ("search_spaces" or "surrogates") as installed or as checked out."""
    try:
        return importlib.resources.files(f"dse.{name}")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / name


def surrogates_dir() -> Path:
    """The artifacts folder: $DSE_SURROGATES when set, else the shipped `surrogates/`."""
    return _surrogates_root(os.environ.get(SURROGATES_ENV) or "")


@cache
def _surrogates_root(env: str) -> Path:
    return Path(env) if env else Path(str(shipped("surrogates")))

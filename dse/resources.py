"""Where the shipped data folders are: inside the installed wheel, or the repository checkout.

`search_spaces/` and `surrogates/` live at the top level of the repository and are installed as
the packages `dse.search_spaces` and `dse.surrogates` (see pyproject.toml); running from a
checkout without installing (PYTHONPATH=.) finds them beside the `dse/` folder.
"""

from __future__ import annotations

import importlib.resources
from importlib.abc import Traversable
from pathlib import Path


def shipped(name: str) -> Traversable:
    """The folder `name` ("search_spaces" or "surrogates") as installed or as checked out."""
    try:
        return importlib.resources.files(f"dse.{name}")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / name

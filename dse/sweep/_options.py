"""The options of one `dse sweep` and what it returns (`run_sweep`'s arguments and result)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dse.sweep import _enumerate as E
from dse.sweep import _samplers as S
from dse.sweep._evaluate import Predictor
from dse.sweep.results import Written
from dse.sweep.storage import DEFAULT_HEARTBEAT_S


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

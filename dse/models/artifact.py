"""Frozen predictor artifacts: the manifest and weights of one GPU's fitted models.

One folder per GPU, `surrogates/<gpu>/`:
  manifest.json  format_version, artifact_id, gpu, created, library versions, data files used
                 (path + sha256), and per model: kind, class, fitted range of every input,
                 cross-validated errors, measured_power; gpu_specs: the specs of the
                 artifact's gpu and level1_gpu (`Artifact.gpu_spec`).
  weights.npz    plain arrays only (no pickles), key "<model name>/<array name>"; the GPU
                 constants a model predicts with among them (`dse.models.base.GPU_SPEC`):
                 after loading, nothing is read from the GPU registry.

A model class (GEMM, power, layer ops, all-reduce, attention, MoE, blocks, end to end) derives
from `dse.models.base.Model` (inert constructor, fit -> self, learned state ending in `_`,
to_state / from_state, fitted_range), declares its `kind` (a ClassVar) and is listed by kind in
`dse.models.MODEL_CLASSES`. The model *families* that `dse fit` runs and `dse validate` scores
are `dse.fitting.families.FAMILIES`.

    art = Artifact.load("h100_sxm")          # or a folder path
    gemm = art.model("gemm.vllm.bfloat16")   # instance rebuilt with from_state (cached)
    art.out_of_range("gemm.vllm.bfloat16", m=m, n=n, k=k)   # bool array
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import platform
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import ArtifactError, ConfigError
from dse.files import sha256_file, write_atomic
from dse.models import class_path, model_class
from dse.models._npz import read_npz
from dse.models.band import Band, degree_of
from dse.models.base import (
    GPU_SPEC,
    Model,
    RangeMiss,
    broadcast_shape,
    gpu_constants,
    gpu_constants_to_state,
    range_misses,
)
from dse.spec.hardware import GPU, spec_from_mapping

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
# The manifest's specs of the GPUs the artifact was fitted for (its `gpu` and `level1_gpu`),
# name -> the fields of `dse.spec.hardware.GPU`: what predictions with the artifact read of
# them (`Artifact.gpu_spec`), whatever the registry says later (issue 36).
GPU_SPECS = "gpu_specs"
WEIGHTS = "weights.npz"
SEP = "/"  # between model name and array name in weights.npz; model names must not contain it


@dataclass
class FittedModel:
    """One fitted model as a family returns it to `dse fit`."""

    name: str  # unique in the artifact, e.g. "gemm.vllm.bfloat16"; no "/"
    model: Model
    cv: dict[str, Any] = field(default_factory=dict)  # held-out errors + the scheme that made them
    files: tuple[str, ...] = ()  # absolute paths of the data files the fit read
    info: dict[str, Any] = field(default_factory=dict)  # anything else for the manifest
    measured_power: bool = False  # True when energy is backed by measured power for this GPU
    # the latency band from the fit's held-out residuals (`dse.models.band`); None: none
    band: Band | None = None


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("pandas", "sklearn", "dse"):
        try:
            out[mod] = importlib.import_module(mod).__version__
        except Exception:  # a missing optional library is recorded, not fatal
            out[mod] = "absent"
    return out


def weights_id(models: Mapping[str, Mapping[str, np.ndarray]]) -> str:
    """Short content hash of every array (name, dtype, shape, bytes): the artifact id."""
    h = hashlib.sha256()
    for name in sorted(models):
        for key in sorted(models[name]):
            a = np.ascontiguousarray(models[name][key])
            h.update(f"{name}{SEP}{key}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
    return h.hexdigest()[:12]


def default_dir(gpu: str) -> Path:
    """The artifact folder of a GPU name: `<surrogates_dir()>/<gpu>/` (DSE_SURROGATES, else the
    shipped `surrogates/`), the folder `dse predict` reads and `dse fit` writes by default."""
    from dse.resources import surrogates_dir

    return surrogates_dir() / gpu


def _resolve(path_or_gpu: str | Path) -> Path:
    p = Path(path_or_gpu)
    if p.is_dir() or p.name == MANIFEST or SEP in str(path_or_gpu) or "\\" in str(path_or_gpu):
        return p.parent if p.name == MANIFEST else p
    return default_dir(str(path_or_gpu).strip().lower())


@dataclass
class Artifact:
    """A frozen set of fitted models for one GPU: `models` (name -> arrays) and `manifest`."""

    manifest: dict[str, Any]
    models: dict[str, dict[str, np.ndarray]]
    path: Path | None = None
    _instances: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        """An artifact saved without the specs of its GPUs (before issue 36) gets them here,
        once: from the registry, else from the spec file its folder carries (a profiled GPU);
        a name found in neither is left out (`gpu_spec` then says so)."""
        specs = self.manifest.get(GPU_SPECS) or {}
        if "gpu" not in self.manifest:
            return
        want = [n for n in dict.fromkeys((self.gpu, self.level1_gpu)) if n not in specs]
        if not want:
            return
        from dse.spec.hardware import SPEC_FILE, get_gpu, load_spec, spec_to_mapping

        own = None
        if self.path is not None and (Path(self.path) / SPEC_FILE).is_file():
            own = load_spec(Path(self.path) / SPEC_FILE)
        add = {}
        for name in want:
            try:
                spec = get_gpu(name)
            except ConfigError:
                if own is None or own.name != name:
                    continue
                spec = own
            add[name] = _jsonable(spec_to_mapping(spec))
        if add:  # a new manifest dict: the caller's (perhaps shared) one is left as it was
            self.manifest = {**self.manifest, GPU_SPECS: {**specs, **add}}

    # ---- building -------------------------------------------------------------------------
    @classmethod
    def from_fitted(
        cls,
        gpu: str,
        fitted: list[FittedModel],
        data_root: str | Path | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Artifact:
        """Assemble an artifact from fitted models; hashes the data files they name."""
        models: dict[str, dict[str, np.ndarray]] = {}
        entries: dict[str, Any] = {}
        files: set[str] = set()
        for fm in fitted:
            if SEP in fm.name or fm.name in models:
                raise ArtifactError(f"model name {fm.name!r} contains {SEP!r} or is duplicated")
            state = {k: np.asarray(v) for k, v in fm.model.to_state().items()}
            for k, v in state.items():
                if v.dtype == object:
                    raise ArtifactError(f"{fm.name}{SEP}{k}: object arrays cannot be stored")
            models[fm.name] = state
            rng = {k: [float(lo), float(hi)] for k, (lo, hi) in fm.model.fitted_range().items()}
            entries[fm.name] = {
                "kind": type(fm.model).kind,
                "class": class_path(type(fm.model)),
                "fitted_range": rng,
                "cv": _jsonable(fm.cv),
                "measured_power": bool(fm.measured_power),
                **_jsonable(fm.info),
            }
            if fm.band is not None:
                entries[fm.name]["band"] = _jsonable(fm.band.to_entry())
            files.update(fm.files)
        root = Path(data_root).resolve() if data_root is not None else None
        data_files = []
        for f in sorted(files):
            fp = Path(f).resolve()
            rel = str(fp.relative_to(root)) if root and fp.is_relative_to(root) else str(fp)
            data_files.append({"path": rel, "sha256": sha256_file(fp) if fp.exists() else None})
        from dse.spec.hardware import get_gpu

        try:
            gpu_measured = bool(get_gpu(gpu).measured_power)
        except ConfigError:  # an unregistered GPU name is allowed (tests)
            gpu_measured = False
        manifest = {
            "format_version": FORMAT_VERSION,
            "artifact_id": weights_id(models),
            "gpu": gpu,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "libraries": library_versions(),
            "data_files": data_files,
            "measured_power": gpu_measured,
            "models": entries,
            **_jsonable(dict(extra or {})),
        }
        return cls(manifest=manifest, models=models)

    # ---- I/O ------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write manifest.json and weights.npz into `directory` (created); returns it."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        flat = {
            f"{name}{SEP}{key}": arr for name, st in self.models.items() for key, arr in st.items()
        }
        self.manifest["artifact_id"] = weights_id(self.models)
        buf = io.BytesIO()
        np.savez_compressed(buf, **flat)
        write_atomic(d / WEIGHTS, buf.getvalue())
        write_atomic(d / MANIFEST, json.dumps(self.manifest, indent=1, sort_keys=False) + "\n")
        return d  # `self.path` stays where it was loaded from (a cached artifact may be shared)

    def save_manifest(self, directory: str | Path) -> Path:
        """Rewrite only manifest.json in `directory`, whose weights.npz must be this artifact's
        (same artifact id): for entries that describe the models without changing them (the
        bands of `dse fit --bands-only`). Returns the manifest's path."""
        d = Path(directory)
        on_disk = Artifact.load(d).artifact_id
        if on_disk != weights_id(self.models):
            raise ArtifactError(
                f"{d}: weights are artifact {on_disk}, not {weights_id(self.models)}; "
                "save the whole artifact instead"
            )
        write_atomic(d / MANIFEST, json.dumps(self.manifest, indent=1, sort_keys=False) + "\n")
        return d / MANIFEST

    @classmethod
    def load(cls, path_or_gpu: str | Path) -> Artifact:
        """Load from a folder path or a GPU registry name (`surrogates/<gpu>/`)."""
        d = _resolve(path_or_gpu)
        fix = f"re-create it with `dse fit --data DIR --gpu {d.name}`"
        man_p, w_p = d / MANIFEST, d / WEIGHTS
        if not man_p.is_file() or not w_p.is_file():
            missing = MANIFEST if not man_p.is_file() else WEIGHTS
            raise ArtifactError(f"no frozen artifact at {d} ({missing} missing); {fix}")
        try:
            manifest = json.loads(man_p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{man_p}: not valid JSON ({exc}); {fix}") from None
        ver = manifest.get("format_version") if isinstance(manifest, dict) else None
        if not isinstance(ver, int):
            raise ArtifactError(f"{man_p}: format_version missing or not an integer; {fix}")
        if ver > FORMAT_VERSION:
            raise ArtifactError(
                f"{man_p}: format_version {ver} is newer than this dse reads ({FORMAT_VERSION}); "
                "upgrade dse, or " + fix
            )
        try:
            flat = read_npz(w_p)
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise ArtifactError(f"{w_p}: cannot read weights ({exc}); {fix}") from None
        models: dict[str, dict[str, np.ndarray]] = {}
        for key, arr in flat.items():
            name, _, sub = key.partition(SEP)
            models.setdefault(name, {})[sub] = arr
        listed = set(manifest.get("models", {}))
        if listed != set(models):
            raise ArtifactError(
                f"{d}: manifest lists models {sorted(listed)} but weights hold {sorted(models)}; "
                + fix
            )
        if manifest.get("artifact_id") != weights_id(models):
            raise ArtifactError(f"{d}: weights do not match the manifest's artifact_id; {fix}")
        return cls(manifest=manifest, models=models, path=d)

    # ---- use ------------------------------------------------------------------------------
    @property
    def artifact_id(self) -> str:
        return str(self.manifest["artifact_id"])

    @property
    def gpu(self) -> str:
        return str(self.manifest["gpu"])

    @property
    def level1_gpu(self) -> str:
        """The GPU whose measurements the Level-1 (and Level-2) models were fitted on: `gpu`,
        or the chip they were carried over from (manifest "level1_gpu": a GH200 artifact with
        H200's kernel models and a Level 3 of its own). Predictions move Level-1 times from it
        to the GPU predicted (`dse.predict.pricing.transfer_factor`)."""
        return str(self.manifest.get("level1_gpu", self.manifest["gpu"]))

    def gpu_spec(self, name: str | None = None) -> GPU:
        """The spec of GPU `name` (default: the artifact's `gpu`; its `level1_gpu` is recorded
        too) as the artifact recorded it (manifest "gpu_specs"), never the registry's of now."""
        name = self.gpu if name is None else name
        specs = self.manifest.get(GPU_SPECS) or {}
        memo = self.__dict__.get("_specs")
        if memo is None or memo[0] is not specs:
            memo = (specs, {})
            self.__dict__["_specs"] = memo
        spec = memo[1].get(name)
        if spec is None:
            if name not in specs:
                raise ArtifactError(
                    f"artifact {self.artifact_id} ({self.gpu}) records no spec of GPU {name!r}; "
                    f"it records: {', '.join(sorted(specs)) or 'none'}"
                )
            spec = memo[1][name] = spec_from_mapping(
                specs[name], f"artifact {self.artifact_id} {GPU_SPECS}.{name}"
            )
        return spec

    def names(self, kind: str | None = None) -> list[str]:
        """Model names, optionally only those of one kind (a new list: callers may change it).
        Kept per kind while the manifest's model table is the same one of the same size
        (the pricer asks for them many times per prediction)."""
        entries = self.manifest["models"]
        stamp = (id(entries), len(entries))
        memo = self.__dict__.get("_names")
        if memo is None or memo[0] != stamp:
            memo = (stamp, {})
            self.__dict__["_names"] = memo
        hit = memo[1].get(kind)
        if hit is None:
            hit = memo[1][kind] = [n for n in entries if kind is None or entries[n]["kind"] == kind]
        return list(hit)

    def has(self, name: str) -> bool:
        return name in self.models

    def model(self, name: str) -> Any:
        """The model instance for `name` (built once with its class's from_state)."""
        if name not in self._instances:
            if name not in self.models:
                raise ArtifactError(
                    f"artifact {self.artifact_id} ({self.gpu}) has no model {name!r}; "
                    f"it has: {', '.join(sorted(self.models))}"
                )
            entry = self.manifest["models"][name]
            cls = model_class(entry["kind"], entry.get("class"))
            state = with_gpu_constants(cls, self.models[name], f"{self.path or self.gpu}: {name}")
            self._instances[name] = cls.from_state(state)
        return self._instances[name]

    def band(self, name: str) -> Band | None:
        """The latency band recorded for model `name` (manifest `models.<name>.band`), None
        when the fit or `dse fit --bands-only` recorded none."""
        return Band.from_entry(self.manifest["models"].get(name, {}).get("band"))

    def band_bounds(
        self, name: str, latency_s: Any, degree: Any = None, **inputs: Any
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(lo, hi) around latencies `name` predicted, widened by each row's distance outside
        the model's fitted range: `degree` when given (a model's own range check), else that of
        `inputs` against the manifest's fitted range (`range_misses`). None without a band."""
        band = self.band(name)
        if band is None:
            return None
        lat = np.asarray(latency_s, dtype=float).ravel()
        if degree is None:
            degree = degree_of(self.range_misses(name, **inputs), lat.size)
        return band.bounds(lat, degree)

    def out_of_range(self, model_name: str, **inputs: Any) -> np.ndarray:
        """True where any given input lies outside the fitted [min, max] of `model_name`.

        Inputs the model has no recorded range for are ignored; arrays broadcast together.
        """
        try:
            rng = self.manifest["models"][model_name]["fitted_range"]
        except KeyError:
            raise ArtifactError(f"artifact has no model {model_name!r}") from None
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
        shape = broadcast_shape(*(a.shape for a in arrays.values()))
        out = np.zeros(shape, dtype=bool)
        for key, a in arrays.items():
            if key in rng:
                lo, hi = rng[key]
                out |= (a < lo) | (a > hi)
        return out

    def range_misses(self, model_name: str, **inputs: Any) -> dict[str, RangeMiss]:
        """Input name -> its `RangeMiss` against the fitted [min, max] of `model_name`, for the
        inputs that leave it somewhere (by more than RANGE_TOL); arrays broadcast together and
        inputs without a recorded range are ignored (`range_miss`)."""
        try:
            rng = self.manifest["models"][model_name]["fitted_range"]
        except KeyError:
            raise ArtifactError(f"artifact has no model {model_name!r}") from None
        return range_misses(rng, inputs)


def with_gpu_constants(
    cls: type[Model], state: Mapping[str, np.ndarray], where: str
) -> Mapping[str, np.ndarray]:
    """`state`, with the GPU constants of `cls.gpu_fields` it lacks filled from the registry
    entry of the model's own GPU (its state's "gpu"): an artifact saved before models kept
    them (issue 36; `experiments/gpu_constants_in_artifacts.py` writes them into old ones).
    Looked up once, here at load; the model then predicts from its state alone."""
    missing = [f for f in cls.gpu_fields if f"{GPU_SPEC}{f}" not in state]
    if not missing:
        return state
    from dse.spec.hardware import get_gpu

    name = str(np.asarray(state["gpu"])) if "gpu" in state else "?"
    try:
        spec = get_gpu(name)
    except ConfigError as exc:
        raise ArtifactError(
            f"{where}: the state lacks the GPU constants {missing} and its GPU {name!r} is not "
            f"in the registry ({exc}); re-fit with dse fit"
        ) from None
    return {**state, **gpu_constants_to_state(gpu_constants(spec, missing))}


def _jsonable(obj: Any) -> Any:
    """Numpy scalars/arrays -> plain JSON types (NaN -> null)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj

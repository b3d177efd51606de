"""Which GEMM table prices an (engine, dtype) on a GPU: the artifact's own, another engine's, or
the sibling chip's (`dse.spec.stand_ins` "gemm_tables"), a borrowed time moved by the roofline
ratio (`sibling_factor`). The fitted model itself is `dse.models.gemm.GemmModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from dse.errors import ArtifactError
from dse.models.artifact import Artifact
from dse.models.gemm import GemmModel, canonical_dtype
from dse.predict.artifacts import sibling_artifact
from dse.roofline import LAUNCH_S, roofline_s
from dse.spec.hardware import GPU


def model_name(engine: str, dtype: str) -> str:
    return f"gemm.{engine}.{canonical_dtype(dtype)}"


# A GPU whose artifact has no GEMM table for an (engine, dtype) borrows the table of its sibling
# chip's artifact (same folder; dse.spec.stand_ins "gemm_tables", where the measurements behind it
# are cited), a borrowed time moved by the roofline ratio (`sibling_factor`).
# dtypes whose kernels are each engine's own (vLLM's and TensorRT-LLM's fp8 GEMMs): another
# engine's table of the same chip is far off (H100: 33-38% fp8, 58-363% fp8_block), so the
# sibling's table of the same engine comes first. bf16 GEMMs are cuBLAS in both engines: the
# other engine's table of the same chip (H100: 4.4-4.7%) comes before the sibling's (7.6-8.0%).
ENGINE_OWN_DTYPES: frozenset[str] = frozenset({"fp8", "fp8_block"})


def sibling_factor(flops: Any, nbytes: Any, dtype: str, here: GPU, there: GPU) -> np.ndarray:
    """Time on GPU `here` / time on GPU `there` (the one the table was fitted on) by the
    roofline with the launch floor (as `dse.predict.pricing.transfer_factor`): 1 where
    compute-bound on chips of one peak, the bandwidth ratio where memory-bound."""
    dt = canonical_dtype(dtype)
    f, b = np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float)
    t_here = roofline_s(f, b, here.peak_flops_per_s(dt), here.hbm_bw_bytes_per_s) + LAUNCH_S
    t_there = roofline_s(f, b, there.peak_flops_per_s(dt), there.hbm_bw_bytes_per_s) + LAUNCH_S
    return t_here / t_there


@dataclass(frozen=True)
class GemmChoice:
    """The GEMM model that prices an (engine, dtype) on a GPU: `name` in `artifact`, which is
    the GPU's own artifact or its sibling chip's (`borrowed`)."""

    name: str
    artifact: Artifact
    gpu: str  # the GPU priced (the asking artifact's)
    # its spec as the asking artifact recorded it (`Artifact.gpu_spec`), for a borrowed table
    spec: GPU | None = None

    @property
    def borrowed(self) -> bool:
        return self.artifact.gpu != self.gpu

    @property
    def label(self) -> str:
        """Provenance: the model name, with `@<gpu>` when it is the sibling chip's."""
        return f"{self.name}@{self.artifact.gpu}" if self.borrowed else self.name

    def model(self) -> GemmModel:
        return self.artifact.model(self.name)


def _engines_of(names: Any) -> list[str]:
    """The engines of GEMM model names ("gemm.<engine>.<dtype>"), sorted."""
    return sorted({n.split(".")[1] for n in names})


def _preferred_engine(engines: list[str]) -> str | None:
    """The default engine among `engines`: vLLM where present, else the first; None if none."""
    return "vllm" if "vllm" in engines else (engines[0] if engines else None)


class Gemm:
    """Every GEMM model of one artifact (and of its sibling chip's), chosen by dtype and engine.

    g = Gemm.load("h100_sxm")                  # or Gemm.for_artifact(artifact)
    g.predict(m, n, k, "bfloat16")["latency_s"]

    The constructor stores its arguments only (no I/O). `Gemm.for_artifact(artifact)` looks the
    sibling chip's artifact up at once; `Gemm(artifact)` looks it up on first use
    (`find_sibling`), `Gemm(artifact, find_sibling=False)` never."""

    # When no table of the asked dtype exists (own or sibling), try these in order (a dtype not
    # listed, e.g. nvfp4, has no stand-in: its own table or none).
    DTYPE_FALLBACK: ClassVar[dict[str, tuple[str, ...]]] = {
        "fp8": ("fp8_block",),
        "fp8_block": ("fp8",),
        "bfloat16": (),
        # nvfp4 only where a table measured it (Blackwell): no other dtype's kernels stand in
        # for 4-bit weights, so a GPU without one says so (ArtifactError) instead of guessing.
        "nvfp4": (),
    }

    def __init__(
        self, artifact: Artifact, sibling: Artifact | None = None, find_sibling: bool = True
    ) -> None:
        """`sibling`: the sibling chip's artifact; None with `find_sibling`: the one stored next
        to `artifact` (its "gemm_tables" lender, `predict.artifacts.sibling_artifact`), if any,
        looked up when first needed."""
        self.artifact = artifact
        self.sibling = sibling
        self.find_sibling = find_sibling

    @classmethod
    def for_artifact(cls, artifact: Artifact) -> Gemm:
        """The GEMM models of `artifact` and of its sibling chip's artifact stored next to it."""
        return cls(artifact, sibling_artifact(artifact), find_sibling=False)

    @classmethod
    def shared(cls, artifact: Artifact) -> Gemm:
        """`for_artifact`, one instance (its `choose` answers kept) per artifact while its model
        tables and its sibling stay the same ones: the pricer asks on every GEMM price (~1% of
        a one-configuration call rebuilt the names and choices). Kept on the artifact (as its
        `names` are), so it goes with it; a copy of the artifact makes its own."""
        sib = sibling_artifact(artifact)  # looked up each time: a re-fitted sibling reloads
        entries, models = artifact.manifest["models"], artifact.models
        held, sizes = (entries, models, sib), (len(entries), len(models))
        hit = artifact.__dict__.get("_gemm_shared")
        if (
            hit is None
            or hit[0] != id(artifact)  # a copy of the artifact (its __dict__ too)
            or hit[2] != sizes
            or any(a is not b for a, b in zip(hit[1], held, strict=True))
        ):
            gemm = cls(artifact, sib, find_sibling=False)
            hit = artifact.__dict__["_gemm_shared"] = (id(artifact), held, sizes, gemm)
        return hit[3]

    @classmethod
    def load(cls, path_or_gpu: str) -> Gemm:
        return cls.for_artifact(Artifact.load(path_or_gpu))

    @cached_property
    def names(self) -> set[str]:
        """The GEMM model names of this artifact (never the sibling's)."""
        return set(self.artifact.names("gemm"))

    @cached_property
    def lender(self) -> Artifact | None:
        """The sibling chip's artifact tables are borrowed from: `sibling`, else (with
        `find_sibling`) the one stored next to `artifact`, else None."""
        if self.sibling is None and self.find_sibling:
            return sibling_artifact(self.artifact)
        return self.sibling

    def engines(self) -> list[str]:
        return _engines_of(self.names)

    def default_engine(self) -> str:
        default = _preferred_engine(self.engines())
        if default is None:
            raise ArtifactError(f"artifact {self.artifact.artifact_id} has no GEMM models")
        return default

    def resolve(self, dtype: str, engine: str | None = None) -> str:
        """The model name in this artifact (never the sibling's) used for (dtype, engine): the
        engine's own, else the default engine's; the dtype's own, else its fallback. Raises
        ArtifactError if none. `choose` also looks at the sibling chip's tables."""
        dt = canonical_dtype(dtype)
        engines = [engine] if engine in self.engines() else []
        engines.append(self.default_engine())
        for eng in engines:
            for d in (dt, *self.DTYPE_FALLBACK.get(dt, ())):
                name = model_name(eng, d)
                if name in self.names:
                    return name
        raise ArtifactError(
            f"artifact for {self.artifact.gpu} has no GEMM model for dtype {dtype!r}; it has: "
            f"{', '.join(sorted(self.names))}"
        )

    def candidates(self, dtype: str, engine: str | None = None) -> list[tuple[Artifact, str]]:
        """(artifact, model name) in the order tried: per dtype (the asked one, then its
        DTYPE_FALLBACK), the asked engine before the default one, and the sibling chip's table
        of an engine before another engine's own table for ENGINE_OWN_DTYPES (after it for
        the others). Names a model artifact may lack; `choose` takes the first present."""
        dt = canonical_dtype(dtype)
        arts = [self.artifact] + ([self.lender] if self.lender is not None else [])

        def engines_of(art: Artifact) -> list[str]:
            have = _engines_of(art.names("gemm"))
            return list(dict.fromkeys([e for e in (engine, _preferred_engine(have)) if e in have]))

        out: list[tuple[Artifact, str]] = []
        for d in (dt, *self.DTYPE_FALLBACK.get(dt, ())):
            own = [(a, model_name(e, d)) for a in arts for e in engines_of(a)]
            if d in ENGINE_OWN_DTYPES:  # the asked engine on either chip, then the default
                own.sort(key=lambda p: p[1].split(".")[1] != engine)
            out.extend(own)
        return out

    def choose(self, dtype: str, engine: str | None = None) -> GemmChoice:
        """The model pricing (dtype, engine) on this artifact's GPU, perhaps the sibling's.
        Raises ArtifactError if none. Kept per (dtype, engine) on this instance (`shared`)."""
        memo: dict[tuple[str, str | None], GemmChoice] = self.__dict__.setdefault("_chosen", {})
        hit = memo.get((dtype, engine))
        if hit is None:
            hit = memo[(dtype, engine)] = self._choose(dtype, engine)
        return hit

    def _choose(self, dtype: str, engine: str | None) -> GemmChoice:
        for art, name in self.candidates(dtype, engine):
            if art.has(name):
                spec = self.artifact.gpu_spec() if art is not self.artifact else None
                return GemmChoice(name, art, self.artifact.gpu, spec)
        have = sorted(self.names | set(self.lender.names("gemm") if self.lender else ()))
        raise ArtifactError(
            f"artifact for {self.artifact.gpu} has no GEMM model for dtype {dtype!r}; it has: "
            f"{', '.join(have)}"
        )

    def model(self, dtype: str = "bfloat16", engine: str | None = None) -> GemmModel:
        return self.choose(dtype, engine).model()

    def power_host(self, dtype: str, engine: str | None = None) -> GemmModel | None:
        """This artifact's own model whose power stands in for a borrowed table's: the one
        `resolve` names (the same engine, a sibling dtype), else one of the default engine."""
        try:
            return self.artifact.model(self.resolve(dtype, engine))
        except ArtifactError:
            pass
        names = sorted(self.names, key=lambda n: (n.split(".")[1] != "vllm", n))
        return self.artifact.model(names[0]) if names else None

    def predict(
        self, m: Any, n: Any, k: Any, dtype: str = "bfloat16", engine: str | None = None
    ) -> dict[str, np.ndarray]:
        """Itemised prediction (see `GemmModel.predict`) plus `out_of_range`. A table borrowed
        from the sibling chip has its times moved by `sibling_factor` and its power taken on
        this GPU (`borrowed`)."""
        ch = self.choose(dtype, engine)
        out = ch.model().predict(m, n, k)
        if ch.borrowed:
            out = borrowed(out, ch, dtype, (m, n, k), self.power_host(dtype, engine))
        out["out_of_range"] = ch.artifact.out_of_range(ch.name, m=m, n=n, k=k)
        return out


def borrowed(
    out: dict[str, np.ndarray],
    ch: GemmChoice,
    dtype: str,
    mnk: tuple[Any, Any, Any],
    host: GemmModel | None = None,
) -> dict[str, np.ndarray]:
    """An itemised prediction of the sibling chip's model moved to `ch.gpu`: times by the
    roofline ratio; power from the power model at this GPU's utilisations, idle and board power,
    times the measured-power residual of `host` (this GPU's own table of the nearest dtype)
    where it has one. On the share (an H200 artifact lacking one table, priced from H100's),
    energy scores 18.5% (bf16) and 28.2% (fp8_block) this way, 23.7% and 48.5% with the
    sibling's own power (the H200 tables' own: 3.3% and 4.2%)."""
    gpu = ch.spec
    if gpu is None:
        raise ArtifactError(f"{ch.label}: a borrowed GEMM table needs the spec of {ch.gpu}")
    f = sibling_factor(out["flops"], out["bytes"], dtype, gpu, ch.artifact.gpu_spec())
    lat = out["latency_s"] * f
    out = dict(out)
    out["t_memory_s"] = out["bytes"] / gpu.hbm_bw_bytes_per_s
    out["roofline_s"] = out["roofline_s"] * f
    out["correction_s"] = lat - out["roofline_s"]
    out["latency_s"] = lat
    out["compute_util"] = out["t_compute_s"] / lat
    out["memory_util"] = out["t_memory_s"] / lat
    pm = host.power_model if host is not None else None
    pm = pm if pm is not None else ch.model().power_model
    if pm is not None:
        power = pm.predict(
            out["compute_util"].ravel(),
            out["memory_util"].ravel(),
            lat.ravel(),
            idle_power_w=gpu.idle_power_w,
            board_power_w=gpu.board_power_w,
        )["power_w"]
        if host is not None and host.power_table_ is not None:
            m, n, k = (a.ravel() for a in np.broadcast_arrays(*(np.asarray(v, float) for v in mnk)))
            power = power * np.exp(host._lookup(host.power_table_, m, n, k))
        out["power_w"] = power.reshape(lat.shape)
    out["energy_j"] = out["power_w"] * lat
    return out

"""The contract every fitted model class keeps (issue 23, `dse.models.base.Model`), checked over
every kind of `dse.models.MODEL_CLASSES`:

- the constructor stores its arguments and nothing else: no I/O (open, stat, Artifact.load and
  np.load refuse while it runs), nothing learned (`is_fitted` is False);
- for every model of the shipped artifacts (surrogates/*/), `from_state(to_state())` gives the
  same state and the same predictions, bit for bit, and a whole artifact rebuilt that way
  predicts every output of `dse.predict.predict` identically;
- every attribute `fit` or `from_state` sets that is not a constructor parameter ends in `_`;
- `fit` returns self and leaves the constructor parameters as they were (small fits, on the
  rows other tests fit on; skipped without the measured data).
"""

from __future__ import annotations

import builtins
import inspect
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from test_golden_small import golden_configs

from dse.errors import ConfigError
from dse.models import MODEL_CLASSES, model_class
from dse.models.artifact import Artifact
from dse.models.base import Model
from dse.resources import surrogates_dir
from dse.spec.hardware import get_gpu

KINDS = sorted(MODEL_CLASSES)
FAST = {
    "max_rows": 1000,
    "max_iter": 20,
}  # smaller than tests/models/test_ops_models.py: shape only


def _shipped() -> dict[str, Artifact]:
    root = surrogates_dir()
    out = {}
    for d in sorted(root.glob("*/manifest.json")) if root.is_dir() else []:
        out[d.parent.name] = Artifact.load(d.parent)
    return out


SHIPPED = _shipped()
SHIPPED_MODELS = [(gpu, name) for gpu, art in SHIPPED.items() for name in sorted(art.models)]


def _params(cls: type) -> set[str]:
    sig = inspect.signature(cls.__init__)
    return {p for p in sig.parameters if p != "self"}


def _learned_names(model: Model) -> set[str]:
    """The attributes that are not constructor parameters."""
    return set(vars(model)) - _params(type(model))


def _same_state(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = np.asarray(a[key]), np.asarray(b[key])
        assert x.dtype == y.dtype and x.shape == y.shape, key
        np.testing.assert_array_equal(x, y, err_msg=key)


def _same_outputs(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert list(a) == list(b)
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


# ---------------------------------------------------------------------------- construction
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_a_model_of_its_kind(kind: str) -> None:
    cls = model_class(kind)
    assert issubclass(cls, Model)
    assert cls.kind == kind


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("I/O while constructing a model")


@pytest.mark.parametrize("kind", KINDS)
def test_construction_does_no_io_and_learns_nothing(kind: str, monkeypatch) -> None:
    cls = model_class(kind)
    with monkeypatch.context() as m:
        for owner, name in (
            (builtins, "open"),
            (io, "open"),
            (Path, "open"),
            (Path, "stat"),
            (Path, "read_text"),
            (Path, "read_bytes"),
            (np, "load"),
        ):
            m.setattr(owner, name, _refuse)
        m.setattr(Artifact, "load", classmethod(_refuse))
        model = cls()
    assert not model.is_fitted
    params = model.get_params()
    assert set(params) == _params(cls)
    assert _learned_names(model) == set()  # the constructor stores its arguments only
    assert cls(**params).get_params() == params


def test_the_gemm_choice_constructor_does_no_io(monkeypatch) -> None:
    from dse.predict.gemm_choice import Gemm

    if "h200_sxm" not in SHIPPED:
        pytest.skip("shipped h200_sxm artifact not found")
    art = Artifact.load(SHIPPED["h200_sxm"].path)  # its own copy: the sibling cache is keyed
    with monkeypatch.context() as m:
        m.setattr(Path, "stat", _refuse)
        m.setattr(builtins, "open", _refuse)
        m.setattr(Artifact, "load", classmethod(_refuse))
        lazy = Gemm(art)
    assert sorted(vars(lazy)) == ["artifact", "find_sibling", "sibling"]
    assert lazy.artifact is art and lazy.sibling is None and lazy.find_sibling
    eager = Gemm.for_artifact(art)
    if "h100_sxm" in SHIPPED:  # h200_sxm borrows h100_sxm's tables (stand_ins "gemm_tables")
        assert eager.sibling is not None and eager.sibling.gpu == "h100_sxm"
        assert lazy.lender is not None and lazy.lender.gpu == "h100_sxm"
    assert Gemm(art, find_sibling=False).lender is None


def test_a_bad_parameter_is_a_config_error_from_fit_not_the_constructor() -> None:
    from dse.models.attention import ContextAttentionModel

    model = ContextAttentionModel("decode")  # stored as given
    assert model.phase == "decode" and not model.is_fitted
    with pytest.raises(ConfigError, match="'phase' parameter of ContextAttentionModel must be"):
        model.fit(pd.DataFrame())
    from dse.models.level2 import Level2Block

    with pytest.raises(ConfigError, match="'block' parameter of Level2Block must be one of"):
        Level2Block("ffn_moe").fit(np.zeros((4, 6)), np.zeros(4), np.zeros((4, 11)))


# ---------------------------------------------------------------------------- shipped state
def _sample_inputs(model: Model) -> dict[str, Any] | None:
    """predict() keyword inputs across and beyond the fitted range, for the kinds whose inputs
    are plain arrays (None for layer_op and level3_e2e: the whole-artifact test covers them)."""
    kind = type(model).kind
    rng = model.fitted_range()

    def span(key: str, n: int = 7) -> np.ndarray:
        lo, hi = rng[key]
        lo = max(lo, 1e-3)
        return np.geomspace(lo / 2, hi * 2, n) if hi > lo else np.full(n, lo)

    def count(key: str) -> np.ndarray:
        return np.maximum(np.round(span(key)), 1.0)

    if kind == "gemm":
        return {"m": count("m"), "n": count("n"), "k": count("k")}
    if kind == "power":  # a GPU spec, resolved by the caller (the model never looks one up)
        return {
            "compute_util": span("compute_util"),
            "memory_util": span("memory_util"),
            "gpu": get_gpu("h200_sxm"),
        }
    if kind in ("allreduce", "collective"):
        return {"message_bytes": span("message_bytes"), "n_gpus": np.array([2.0, 4, 8, 2, 4, 8, 3])}
    if kind in ("context_attention", "generation_attention"):
        length = "isl" if kind == "context_attention" else "kv_len"
        return {
            "batch_size": count("batch_size"),
            length: count(length),
            "num_heads": np.full(7, 32.0),
            "num_kv_heads": np.array([1.0, 2, 4, 8, 8, 32, 32]),
            "head_dim": np.full(7, 128.0),
        }
    if kind in ("context_mla", "generation_mla"):
        length = "isl" if kind == "context_mla" else "kv_len"
        return {
            "batch_size": count("batch_size"),
            length: count(length),
            "num_heads": np.array([1.0, 2, 16, 64, 128, 128, 256]),
            "kv_cache_dtype": np.array(["bfloat16", "fp8"] * 3 + ["fp8"]),
        }
    if kind in ("moe", "moe_physics", "moe_kernels"):
        return {
            "num_tokens": count("num_tokens"),
            "hidden_size": np.full(7, 4096.0),
            "inter_size": np.full(7, 14336.0),
            # top-k 2 and 8: SGLang's kernels on B200 differ (`dse.models.moe_kernels`)
            "topk": np.array([2.0, 2, 2, 8, 8, 8, 2]),
            "num_experts": np.full(7, 8.0),
        }
    if kind == "linear_layer":
        return {
            "batch_size": count("batch_size"),
            "seq_len": np.geomspace(1.0, 65536.0, 7),
            "n_heads": np.array([2.0, 4, 8, 16, 32, 64, 128]),
            "head_dim": np.full(7, 128.0),
            "n_groups": np.array([1.0, 2, 4, 8, 16, 16, 32]),
            "state_dim": np.full(7, 128.0),
        }
    if kind == "reduction_op":
        ops = [str(o) for o in model.ops_]
        return {
            "op": np.array([ops[i % len(ops)] for i in range(7)]),
            "m": span("m"),
            "n": span("n"),
        }
    if kind == "level2_block":
        return {"X": _level2_x(np.random.default_rng(1), 7, extra=1.0)}  # partly beyond the range
    if kind == "level3_power":
        return {
            "p_model_w": np.linspace(100.0, 700.0, 7),
            "batch": span("batch"),
            "gpu": get_gpu("h100_sxm"),
        }
    return None


def _level2_x(rng: np.random.Generator, n: int, extra: float = 0.0) -> np.ndarray:
    """Raw Level-2 block inputs (`dse.models.level2.LEVEL2_FEATURES`) of H100-like calls."""
    return np.column_stack(
        [
            rng.normal(-10, 1, (3, n)).T,
            rng.uniform(0, 12 + extra, n),
            rng.uniform(10, 14 + extra, (4, n)).T,
            np.full(n, np.log(989e12)),
            np.full(n, np.log(3.35e12)),
            np.full(n, 132.0),
        ]
    )


@pytest.mark.slow
@pytest.mark.parametrize(("gpu", "name"), SHIPPED_MODELS)
def test_shipped_models_round_trip_exactly(gpu: str, name: str) -> None:
    art = SHIPPED[gpu]
    cls = model_class(art.manifest["models"][name]["kind"])
    model = cls.from_state(art.models[name])
    assert model.is_fitted
    state = model.to_state()
    again = cls.from_state(state)
    _same_state(again.to_state(), state)
    inputs = _sample_inputs(model)
    if inputs is not None:
        before = dict(vars(model))
        _same_outputs(again.predict(**inputs), model.predict(**inputs))
        # predict reads a model (the artifact's cached instance is shared), never changes it
        assert vars(model).keys() == before.keys()
        assert all(vars(model)[k] is v for k, v in before.items())
    for m in (model, again):  # from_state's attributes end in "_"
        bad = {a for a in _learned_names(m) if not a.endswith("_")}
        assert not bad, f"{name}: learned state not ending in '_': {sorted(bad)}"
    assert model.fitted_range() == again.fitted_range()


@pytest.mark.slow
@pytest.mark.parametrize("gpu", sorted(SHIPPED))
def test_a_rebuilt_artifact_predicts_identically(gpu: str) -> None:
    """Every model of the artifact through to_state -> from_state: `predict` is unchanged."""
    from dse.predict import predict

    art = SHIPPED[gpu]
    rebuilt = Artifact(
        manifest=art.manifest,
        models={n: art.model(n).to_state() for n in art.models},
        path=art.path,
    )
    cfg = golden_configs(300)
    cfg["gpu"] = np.full(300, gpu)
    if not gpu.startswith("h"):  # the A100 artifacts have no fp8 kernels
        cfg["weight_dtype"] = np.full(300, "bfloat16")
        cfg["kv_dtype"] = np.full(300, "bfloat16")
    _same_outputs(predict(cfg, {gpu: rebuilt}), predict(cfg, {gpu: art}))


# ---------------------------------------------------------------------------- fit
@pytest.fixture(scope="module")
def tables(data_dir: Path) -> dict[str, pd.DataFrame]:
    from dse.data import load

    kinds = ["gemm", "layer_op", "allreduce", "softmax", "layernorm", "gelu"]
    mla = ["context_mla", "generation_mla"]
    return load(
        data_dir,
        [*kinds, "context_attention", "generation_attention", "moe", *mla, "linear_layer"],
    )


def _synthetic_level3() -> tuple[Any, ...]:
    from dse.models.level3 import design
    from dse.predict.request import base_costs, global_inputs
    from dse.spec import columns as C

    cfg = golden_configs(40)
    cfg["gpu"], cfg["engine"] = np.full(40, "h100_sxm"), np.full(40, "vllm")
    cfg["weight_dtype"] = cfg["kv_dtype"] = np.full(40, "bfloat16")
    cols, n = C.as_columns(cfg)
    g = global_inputs(cols, base_costs(cols, n, get_gpu("h100_sxm"), None))
    x_t, x_d = design(g)
    y = (x_t + x_d).sum(axis=1) * 1.1
    return g, y, np.arange(40) % 4


def _power_rows() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    uc, um = rng.uniform(0, 1, 300), rng.uniform(0, 1, 300)
    lat = 10.0 ** rng.uniform(-5, -2, 300)
    return pd.DataFrame(
        {
            "compute_util": uc,
            "memory_util": um,
            "latency_s": lat,
            "power_w": 100.0 + 500.0 * (0.6 * uc + 0.3 * um),
            "idle_power_w": 100.0,
            "board_power_w": 700.0,
        }
    )


def _allreduce_rows(tables: dict[str, pd.DataFrame], kind: str) -> tuple[str, pd.DataFrame]:
    """(implementation key, rows) of one h100_sxm table of `kind` (as dse fit names them)."""
    from dse.fitting.allreduce import allreduce_groups

    groups = allreduce_groups(tables["allreduce"], "h100_sxm")
    if kind == "allreduce":
        return "nccl.nccl", groups["allreduce.nccl.nccl"]
    names = sorted(n for n in groups if n.startswith("collective."))
    if not names:
        pytest.skip("no collective rows for h100_sxm")
    return names[0].split(".", 2)[2], groups[names[0]]


def _fits(kind: str, request: pytest.FixtureRequest) -> tuple[Model, Callable[[Model], Any]]:
    """A fresh model of `kind` and the call that fits it on a small set of rows."""
    cls = model_class(kind)
    rng = np.random.default_rng(0)
    if kind == "power":
        return cls(seed=0), lambda m: m.fit(_power_rows())
    if kind == "level2_block":
        from dse.models.level2 import gemm_inputs

        X = _level2_x(rng, 80)
        G = np.concatenate(gemm_inputs(X))
        return cls("ffn_dense", n_ensemble=2), lambda m: m.fit(G, 0.1 * np.sin(G[:, 0]), X)
    if kind == "level3_e2e":
        return cls(n_ensemble=1), lambda m: m.fit(*_synthetic_level3())
    if kind == "level3_power":
        u, batch = rng.uniform(0.1, 0.7, 30), rng.choice([1.0, 16.0, 64.0], 30)
        return cls(), lambda m: m.fit(u, batch, 0.05 + 0.9 * u, rng.integers(0, 3, 30))
    tables = request.getfixturevalue("tables")
    if kind == "gemm":
        g = tables["gemm"]
        g = g[(g["source"] == "aiconfigurator") & (g["gpu"] == "a100_sxm") & (g["n"] <= 2048)]
        return cls("a100_sxm", tree_iter=10, bags=1), lambda m: m.fit(g)
    if kind == "layer_op":
        return cls("h100_sxm"), lambda m: m.fit(tables["layer_op"])
    if kind == "reduction_op":
        t = {k: tables[k] for k in ("softmax", "layernorm", "gelu")}
        return cls("h100_sxm", fitted_on="a100_sxm"), lambda m: m.fit(t)
    if kind in ("allreduce", "collective"):
        key, rows = _allreduce_rows(tables, kind)
        return cls("h100_sxm", key, smooth=1e-3), lambda m: m.fit(rows)
    if kind in ("context_attention", "generation_attention"):
        return cls(gpu="h100_sxm", engine="vllm", **FAST), lambda m: m.fit(tables[kind])
    if kind in ("context_mla", "generation_mla"):
        return cls(gpu="h100_sxm", engine="trtllm", **FAST), lambda m: m.fit(tables[kind])
    if kind == "moe":
        return cls("h100_sxm", "vllm", "bfloat16", **FAST), lambda m: m.fit(tables["moe"])
    if kind == "moe_physics":
        # a small TensorRT-LLM table (every layout, splits tp 1-2 at ep 1): the kernel-sum fit
        # and the inner CV over layouts run 4 fits on it
        t = tables["moe"]
        t = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "trtllm") & (t["dtype"] == "fp8_block")]
        t = t[t["moe_tp_size"].isin([1, 2]) & (t["moe_ep_size"] == 1)]
        return cls("h100_sxm", "trtllm", "fp8_block", **FAST), lambda m: m.fit(t)
    if kind == "moe_kernels":
        # H100 SGLang bf16, tp 1-2 at ep 1: Triton's and FlashInfer CUTLASS's rows, one model each
        t = tables["moe"]
        t = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "sglang") & (t["dtype"] == "bfloat16")]
        t = t[t["moe_tp_size"].isin([1, 2]) & (t["moe_ep_size"] == 1)]
        return cls("h100_sxm", "sglang", "bfloat16", **FAST), lambda m: m.fit(t)
    if kind == "linear_layer":
        t = tables["linear_layer"]
        t = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "vllm") & (t["phase"] == "generation")]
        return cls("gdn", "generation", "h100_sxm", "vllm", max_iter=20), lambda m: m.fit(t)
    raise AssertionError(f"no fit fixture for kind {kind!r}")


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_fit_returns_self_keeps_its_parameters_and_names_learned_state(
    kind: str, request: pytest.FixtureRequest
) -> None:
    model, fit = _fits(kind, request)
    params = model.get_params()
    assert fit(model) is model
    assert model.is_fitted
    assert model.get_params().keys() == params.keys()
    for key, value in params.items():  # fit never rebinds a constructor parameter
        assert model.get_params()[key] is value, key
    bad = {a for a in _learned_names(model) if not a.endswith("_")}
    assert not bad, f"{kind}: learned state not ending in '_': {sorted(bad)}"
    again = type(model).from_state(model.to_state())
    _same_state(again.to_state(), model.to_state())

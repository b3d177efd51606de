"""Artifacts describe their GPUs (issue 36): every fitted model keeps the GPU constants it
predicts with as learned state (`dse.models.base.GPU_SPEC`), an artifact records the specs of
the GPUs it was fitted for (manifest "gpu_specs", `Artifact.gpu_spec`), and the GPU registry
(`dse.spec.hardware`, which scans artifact folders and `register_folder_spec` changes at run
time) is read only at the edges: the predict entry, fitting, and loading an artifact saved
before its constants were kept.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_golden_small import golden_configs
from test_models_contract import _sample_inputs

from dse.models import model_class
from dse.models.artifact import GPU_SPECS, MANIFEST, WEIGHTS, Artifact
from dse.models.base import GPU_SPEC
from dse.resources import surrogates_dir
from dse.spec import hardware

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.parent.name for p in surrogates_dir().glob(f"*/{MANIFEST}"))
pytestmark = pytest.mark.skipif(not SHIPPED, reason="shipped artifacts not found")


def _layer_op_inputs() -> dict[str, Any]:
    ops = ["input_layernorm", "attn_rope", "mlp_act", "add", "emb", "post_attention_layernorm"]
    n = len(ops)
    return {
        "op": np.array(ops),
        "num_tokens": np.array([1.0, 17, 300, 2048, 9000, 64]),
        "d_model": np.full(n, 4096.0),
        "n_heads": np.full(n, 32.0),
        "n_kv_heads": np.full(n, 8.0),
        "d_ff": np.full(n, 14336.0),
        "tensor_parallel": np.array([1.0, 2, 4, 8, 1, 2]),
    }


def _inputs(model: Any) -> dict[str, Any] | None:
    if type(model).kind == "layer_op":
        return _layer_op_inputs()
    return _sample_inputs(model)


def _inputs_of(art: Artifact) -> dict[str, dict[str, Any]]:
    """Sample predict() inputs per model (the kinds with plain array inputs), built before any
    registry change: a power model's GPU spec is the caller's, resolved at its edge."""
    out = {}
    for name in sorted(art.models):
        inputs = _inputs(art.model(name))
        if inputs is not None:
            out[name] = inputs
    return out


def _predictions(
    art: Artifact, inputs: dict[str, dict[str, Any]]
) -> dict[str, dict[str, np.ndarray]]:
    """Every model's predict() on its sample inputs."""
    return {
        name: {k: np.asarray(v) for k, v in art.model(name).predict(**kw).items()}
        for name, kw in inputs.items()
    }


def _same(a: dict[str, dict[str, np.ndarray]], b: dict[str, dict[str, np.ndarray]]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].keys() == b[name].keys(), name
        for key in a[name]:
            np.testing.assert_array_equal(a[name][key], b[name][key], err_msg=f"{name} {key}")


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the GPU registry was read after the edge")


def _break_registry(mp: pytest.MonkeyPatch) -> None:
    """Every registry look-up (get_gpu, gpu_names, shipped_gpu, ...) raises from now on."""
    mp.setattr(hardware, "_registry", _refuse)
    mp.setattr(hardware, "_all", _refuse)


def _other_registry() -> dict[str, hardware.GPU]:
    """The shipped registry with every constant a model reads changed."""
    return {
        name: dataclasses.replace(
            g,
            n_sms=g.n_sms // 2,
            board_power_w=g.board_power_w * 0.6,
            idle_power_w=g.idle_power_w * 2.0,
            hbm_bw_bytes_per_s=g.hbm_bw_bytes_per_s * 3.0,
            peak_bf16_flops_per_s=g.peak_bf16_flops_per_s * 0.5,
            peak_fp8_flops_per_s=(g.peak_fp8_flops_per_s or g.peak_bf16_flops_per_s) * 0.5,
            nvlink_bw_bytes_per_s=g.nvlink_bw_bytes_per_s * 4.0,
        )
        for name, g in hardware._registry().items()
    }


def _gpu_fields_models(art: Artifact) -> list[str]:
    return [
        n
        for n, e in art.manifest["models"].items()
        if model_class(e["kind"], e.get("class")).gpu_fields
    ]


# ---------------------------------------------------------------------------- models
@pytest.mark.slow
@pytest.mark.parametrize("gpu", SHIPPED)
def test_shipped_artifacts_carry_their_gpu_constants(gpu: str) -> None:
    """Written into the artifact (experiments/gpu_constants_in_artifacts.py), not filled at
    load: every model listing `gpu_fields` has them in its weights, with the values of the
    spec the artifact records, and the manifest records its GPUs' specs."""
    raw = json.loads((surrogates_dir() / gpu / MANIFEST).read_text())
    art = Artifact.load(surrogates_dir() / gpu)
    assert {art.gpu, art.level1_gpu} <= set(raw[GPU_SPECS])
    names = _gpu_fields_models(art)
    assert names  # attention and layer_op models at least
    with np.load(surrogates_dir() / gpu / WEIGHTS) as npz:
        stored = set(npz.files)
    for name in names:
        model = art.model(name)
        spec = art.gpu_spec(str(model.gpu))
        lent = raw["models"][name].get("fitted_on_gpu")
        if lent and lent != art.gpu:
            # fitted on another chip's rows and used as is (B200's layer ops on H100's: its
            # rows per wave are H100's 132 SMs'), so it keeps the constants of that chip
            spec = hardware.get_gpu(lent)
        for field in type(model).gpu_fields:
            assert f"{name}/{GPU_SPEC}{field}" in stored, (name, field)
            assert model.gpu_spec_[field] == float(getattr(spec, field)), (name, field)


@pytest.mark.parametrize("gpu", SHIPPED)
def test_no_model_reads_the_registry_to_predict(gpu: str, monkeypatch) -> None:
    """Loaded, every model predicts the same with the registry gone."""
    art = Artifact.load(surrogates_dir() / gpu)
    inputs = _inputs_of(art)
    before = _predictions(art, inputs)
    with monkeypatch.context() as mp:
        _break_registry(mp)
        again = Artifact.load(surrogates_dir() / gpu)  # self-describing: loads without it too
        _same(_predictions(art, inputs), before)
        _same(_predictions(again, inputs), before)


@pytest.mark.parametrize("gpu", SHIPPED)
def test_a_changed_registry_does_not_move_an_artifacts_predictions(gpu: str, monkeypatch) -> None:
    """The registry redefining the artifact's GPU (every constant changed) moves nothing a
    model predicts, for an artifact loaded before or after the change."""
    art = Artifact.load(surrogates_dir() / gpu)
    inputs = _inputs_of(art)
    before = _predictions(art, inputs)
    other = _other_registry()
    with monkeypatch.context() as mp:
        mp.setattr(hardware, "_registry", lambda: other)
        assert hardware.get_gpu(gpu).n_sms != art.gpu_spec().n_sms  # the change took
        _same(_predictions(art, inputs), before)
        again = Artifact.load(surrogates_dir() / gpu)
        assert again.gpu_spec() == art.gpu_spec()
        _same(_predictions(again, inputs), before)


def test_power_models_take_a_spec_not_a_name() -> None:
    from dse.errors import ConfigError

    art = Artifact.load(surrogates_dir() / "h200_sxm")
    power, power3 = art.model("power"), art.model(art.names("level3_power")[0])
    h100 = hardware.get_gpu("h100_sxm")
    got = power.predict(0.5, 0.2, 1e-3, gpu=h100)["power_w"]
    assert h100.idle_power_w < got < h100.board_power_w
    with pytest.raises(ConfigError, match="GPU spec"):
        power.predict(0.5, 0.2, 1e-3, gpu="h100_sxm")
    with pytest.raises(ConfigError, match="GPU spec"):
        power3.predict(p_model_w=np.array([300.0]), batch=np.array([8.0]), gpu="h100_sxm")


# ---------------------------------------------------------------------------- the predictor
@pytest.mark.parametrize("gpu", [*SHIPPED, "a100_sxm_40gb"])
def test_the_predictor_reads_the_registry_at_its_entry_only(gpu: str, monkeypatch) -> None:
    """The GPU name resolved at the entry (and the columns checked there), the whole
    prediction, chip transfers and borrowed sibling tables included, runs without the
    registry and gives the same outputs."""
    from dse.predict.artifacts import load_artifact
    from dse.predict.request import predict_columns
    from dse.spec import columns as C

    cfg = golden_configs(64)
    cfg["gpu"] = np.full(64, gpu)
    if not gpu.startswith(("h", "gh")):  # the A100 artifacts have no fp8 kernels
        cfg["weight_dtype"] = cfg["kv_dtype"] = np.full(64, "bfloat16")
    cols, n = C.as_columns(cfg)
    spec = hardware.get_gpu(gpu)
    art, _ = load_artifact(gpu)
    assert art is not None
    before = predict_columns(cols, n, gpu=spec, artifact=art)
    with monkeypatch.context() as mp:
        _break_registry(mp)
        after = predict_columns(cols, n, gpu=spec, artifact=art)
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(np.asarray(after[key]), np.asarray(before[key]), key)


# ---------------------------------------------------------------------------- older artifacts
def _strip(src: Path, dst: Path) -> None:
    """A copy of the artifact at `src` as saved before issue 36: no GPU constants, no specs."""
    art = Artifact.load(src)
    art.models = {
        n: {k: v for k, v in st.items() if GPU_SPEC not in k} for n, st in art.models.items()
    }
    art.manifest = {k: v for k, v in art.manifest.items() if k != GPU_SPECS}
    art.save(dst)
    assert GPU_SPECS not in json.loads((dst / MANIFEST).read_text())


def test_an_artifact_saved_before_gets_its_constants_once_at_load(tmp_path, monkeypatch) -> None:
    gpu = "h100_sxm" if "h100_sxm" in SHIPPED else SHIPPED[0]
    shipped = Artifact.load(surrogates_dir() / gpu)
    _strip(shipped.path, tmp_path / gpu)
    old = Artifact.load(tmp_path / gpu)
    assert old.artifact_id != shipped.artifact_id  # the constants are state: the id hashes them
    assert old.gpu_spec() == shipped.gpu_spec()  # from the registry, at load
    names = _gpu_fields_models(old)
    assert names and all(GPU_SPEC not in k for n in names for k in old.models[n])
    inputs = _inputs_of(old)  # every model built (constants filled from the registry) here
    expected = _predictions(shipped, inputs)
    with monkeypatch.context() as mp:
        _break_registry(mp)
        _same(_predictions(old, inputs), expected)


def test_the_migration_writes_what_the_load_fills(tmp_path) -> None:
    """experiments/gpu_constants_in_artifacts.py on an old artifact gives the shipped one back:
    the same weights (id) and the same manifest specs; run again, it changes nothing."""
    import importlib.util

    gpu = "gh200" if "gh200" in SHIPPED else SHIPPED[0]
    shipped = Artifact.load(surrogates_dir() / gpu)
    _strip(shipped.path, tmp_path / gpu)
    path = ROOT / "experiments" / "gpu_constants_in_artifacts.py"
    spec = importlib.util.spec_from_file_location("gpu_constants_in_artifacts", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    old_id, new_id = mod.migrate(tmp_path / gpu)
    assert old_id != new_id == shipped.artifact_id
    raw = json.loads((tmp_path / gpu / MANIFEST).read_text())
    assert raw[GPU_SPECS] == shipped.manifest[GPU_SPECS]
    assert mod.migrate(tmp_path / gpu) == (new_id, new_id)


def test_a_profiled_gpus_artifact_reads_the_spec_it_carries(tmp_path, monkeypatch) -> None:
    """An artifact for a GPU outside the registry, saved before issue 36 with its gpu.yaml
    beside it: the spec comes from that file at load, without registering it."""
    gpu = "h200_sxm" if "h200_sxm" in SHIPPED else SHIPPED[0]
    folder = tmp_path / "myboard"
    _strip(surrogates_dir() / gpu, folder)
    raw = json.loads((folder / MANIFEST).read_text())
    raw["gpu"] = "myboard"
    (folder / MANIFEST).write_text(json.dumps(raw))
    spec = dataclasses.replace(hardware.get_gpu(gpu), name="myboard", board_power_w=555.0)
    mapping = hardware.spec_to_mapping(spec)
    (folder / hardware.SPEC_FILE).write_text(json.dumps(mapping))  # JSON is YAML
    art = Artifact.load(folder)
    assert art.gpu_spec() == spec
    assert "myboard" not in hardware.gpu_names()
    # registering another spec under its name later (`register_folder_spec` of another folder)
    # moves neither the spec the artifact recorded nor its models' predictions
    inputs = _inputs_of(art)
    before = _predictions(art, inputs)
    other = tmp_path / "elsewhere"
    other.mkdir()
    changed = dataclasses.replace(spec, n_sms=spec.n_sms // 2, board_power_w=300.0)
    (other / hardware.SPEC_FILE).write_text(json.dumps(hardware.spec_to_mapping(changed)))
    monkeypatch.setattr(hardware, "_EXTRA", {})  # this process's registrations, undone after
    assert hardware.register_folder_spec(other) == changed
    assert hardware.get_gpu("myboard") == changed
    assert art.gpu_spec() == spec
    _same(_predictions(art, inputs), before)
    _same(_predictions(Artifact.load(folder), inputs), before)


# ---------------------------------------------------------------------------- the source
# Where dse/models and dse/predict may still look a GPU up: fitting (the constants become
# learned state there), the artifact's edges (building one, loading one saved before issue 36)
# and the predictor's entry. Anything else (a predict method, a pricer) must read the spec it
# was given or the artifact's own.
REGISTRY_CALLS = {"get_gpu", "gpu_names", "shipped_gpu", "profiled_names", "register_gpu"}
ALLOWED = {
    ("dse/models/artifact.py", "__post_init__"),
    ("dse/models/artifact.py", "from_fitted"),
    ("dse/models/artifact.py", "with_gpu_constants"),
    ("dse/models/attention.py", "feature_set_for"),  # fit: which inputs the MLP gets
    ("dse/models/attention.py", "_peak"),  # fit: the roofline's peak (kept in roof_)
    ("dse/models/attention.py", "fit"),
    ("dse/models/gemm.py", "_constants"),  # fit: kept as c_
    ("dse/models/layer_ops.py", "fit"),
    ("dse/models/mla.py", "_peak"),  # fit: kept in roof_
    ("dse/models/mla.py", "fit"),
    ("dse/models/linear_layers.py", "fit"),  # kept as gpu_spec_ (SMs, bf16 peak, HBM bandwidth)
    ("dse/models/moe.py", "_peak"),  # fit: kept in roof_
    (
        "dse/models/moe.py",
        "_fit_rows",
    ),  # fit (after row selection): the power head's idle and board power (kept in it)
    ("dse/models/moe_physics.py", "fit"),
    ("dse/models/reductions.py", "fit"),  # kept as bw_scale_
    ("dse/predict/request.py", "predict"),  # the entry: one look-up per GPU name
    ("dse/predict/request.py", "_predict_gpus"),  # the entry's GPU loop (after repeated rows)
    ("dse/predict/request.py", "predict_columns"),  # its entry for callers without a spec
}


def _registry_calls(path: Path, base: Path = ROOT) -> set[tuple[str, str]]:
    """(file, enclosing function) of every registry call in a source file."""
    out: set[tuple[str, str]] = set()

    def visit(node: ast.AST, fn: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            fn = node.name
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            if name in REGISTRY_CALLS:
                out.add((path.relative_to(base).as_posix(), fn))
        for child in ast.iter_child_nodes(node):
            visit(child, fn)

    visit(ast.parse(path.read_text()), "<module>")
    return out


def test_models_and_the_predictor_look_gpus_up_only_at_the_edges() -> None:
    found: set[tuple[str, str]] = set()
    for folder in ("dse/models", "dse/predict"):
        for path in sorted((ROOT / folder).glob("*.py")):
            found |= _registry_calls(path)
    assert found - ALLOWED == set(), "registry look-ups outside the edges"


def test_no_predict_method_of_a_model_looks_a_gpu_up() -> None:
    """The rule itself, whatever ALLOWED says: no method named predict*, fraction, power* or
    design of dse/models calls the registry."""
    for path in sorted((ROOT / "dse" / "models").glob("*.py")):
        for _, fn in _registry_calls(path):
            assert not fn.startswith(("predict", "fraction", "power", "design")), (path, fn)


def test_the_scan_sees_a_look_up(tmp_path) -> None:
    """The scan finds a call inside a method, by plain and by dotted name (not vacuous)."""
    src = tmp_path / "m.py"
    src.write_text(
        "class M:\n"
        "    def predict(self):\n"
        "        return hardware.get_gpu(self.gpu).n_sms\n"
        "def fit():\n"
        "    return get_gpu('x')\n"
    )
    assert _registry_calls(src, tmp_path) == {("m.py", "predict"), ("m.py", "fit")}

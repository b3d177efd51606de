"""Write the GPU constants each model predicts with into artifacts saved before models kept them
(issue 36): after this an artifact describes itself and predicting never reads the GPU registry.

For every model whose class lists `gpu_fields` (`dse.models.base.Model`), the state arrays
`gpu_spec/<field>` (and `<part>/gpu_spec/<field>` of a model with parts) are added, with the
values the registry gives the model's own GPU today, the values its predictions have always
read (`dse.models.artifact.with_gpu_constants` fills them the same way at load). No other
array changes (checked byte for byte); the artifact id changes, because it hashes every state
array, so the ids recorded in the golden files are rewritten (their strings only: no number
moves, which `tests/predict/test_golden_predictions.py` then checks). The manifest gets the specs of
the artifact's GPU and of its `level1_gpu` ("gpu_specs", `Artifact.gpu_spec`), which the
predictor reads for the roofline transfers between chips.

    PYTHONPATH=. python experiments/gpu_constants_in_artifacts.py [FOLDER ...]

Without folders: every artifact under surrogates/. Idempotent: an artifact that has every
constant already is left alone. Run it again after a refit made by a dse older than issue 36.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from dse.models import model_class
from dse.models.artifact import GPU_SPECS, MANIFEST, Artifact
from dse.models.base import GPU_SPEC
from dse.resources import surrogates_dir

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden_predictions.npz"


def migrate(folder: Path) -> tuple[str, str]:
    """Add the missing GPU constants to the artifact in `folder`; (old id, new id)."""
    art = Artifact.load(folder)
    old_id = art.artifact_id
    before = {n: dict(st) for n, st in art.models.items()}
    added = 0
    for name, state in art.models.items():
        entry = art.manifest["models"][name]
        if not model_class(entry["kind"], entry.get("class")).gpu_fields:
            continue
        new = art.model(name).to_state()  # from_state of the state with the constants filled
        extra = {k: v for k, v in new.items() if GPU_SPEC in k and k not in state}
        state.update(extra)
        added += len(extra)
    for name, st in before.items():  # nothing but the added arrays changed
        for key, arr in st.items():
            got = art.models[name][key]
            assert got.dtype == arr.dtype and got.shape == arr.shape, (name, key)
            assert got.tobytes() == arr.tobytes(), (name, key)
    on_disk = json.loads((folder / MANIFEST).read_text())
    specs = art.manifest.get(GPU_SPECS)  # filled at load where the manifest had none
    if not added:
        if on_disk.get(GPU_SPECS) != specs:
            art.save_manifest(folder)
            print(f"{folder}: GPU specs {sorted(specs or {})} written into the manifest")
        else:
            print(f"{folder}: every GPU constant present (artifact {old_id}); left alone")
        return old_id, old_id
    art.save(folder)
    again = Artifact.load(folder)
    print(f"{folder}: {added} arrays added, artifact {old_id} -> {again.artifact_id}")
    return old_id, again.artifact_id


def rename_ids(path: Path, ids: dict[str, str]) -> None:
    """Rewrite artifact ids in the string arrays of a golden file (numbers untouched)."""
    if not path.is_file() or all(a == b for a, b in ids.items()):
        return
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    changed = 0
    for key in [k for k in arrays if k.endswith("@values")]:
        a = arrays[key]
        renamed = []
        for s in a.tolist():
            for old, new in ids.items():
                s = s.replace(old, new)
            renamed.append(s)
        out = np.array(renamed, dtype=a.dtype)  # ids keep their length (12 hex digits)
        if np.array_equal(out, a):
            continue
        # a packed column keeps its values sorted, codes indexing them: re-sort, re-index
        order = np.argsort(out, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        codes = key[: -len("@values")] + "@codes"
        arrays[key] = out[order]
        arrays[codes] = rank[arrays[codes]].astype(arrays[codes].dtype)
        changed += 1
    np.savez_compressed(path, **arrays)
    print(f"{path}: artifact ids rewritten in {changed} string arrays")


def main(argv: list[str]) -> None:
    folders = [Path(a) for a in argv] or sorted(
        p.parent for p in surrogates_dir().glob("*/manifest.json")
    )
    ids = dict(migrate(f) for f in folders)
    rename_ids(GOLDEN, ids)


if __name__ == "__main__":
    main(sys.argv[1:])

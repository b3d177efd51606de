"""Put separately refitted GEMM models into the shipped H200 and GH200 artifacts.

    PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates python experiments/h200_gemm_merge_refit.py \\
        /tmp/fit_bf16:gemm.vllm.bfloat16 /tmp/fit_fp8:gemm.vllm.fp8_block

Each argument is FOLDER:MODEL, an artifact `dse fit --out FOLDER --only gemm --model MODEL`
wrote (one process per model, so the two tables fit at once on one core each). The model's
weights and manifest entry replace those of surrogates/h200_sxm and of surrogates/gh200, which
carries H200's kernel models (manifest `carried_over`). Refit level3.power on both afterwards.
"""

from __future__ import annotations

import sys

from dse.models.artifact import Artifact, default_dir


def main() -> None:
    pairs = [a.rsplit(":", 1) for a in sys.argv[1:]]
    for gpu in ("h200_sxm", "gh200"):
        art = Artifact.load(gpu)
        for folder, name in pairs:
            src = Artifact.load(folder)
            art.models[name] = src.models[name]
            art.manifest["models"][name] = src.manifest["models"][name]
        art.save(default_dir(gpu))
        print(f"{gpu}: {', '.join(n for _, n in pairs)} replaced; artifact {art.artifact_id}")


if __name__ == "__main__":
    main()

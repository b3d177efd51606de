"""Instructions of the exact sweep's work outside the enumeration, by callgrind: recording the
front and sample as trials (`record_trials`: their evaluation, `created_trials`), adding them
to a journal study (`study.add_trials`, the batched journal flushed once) and writing the
results folder (`write_results`, exact_front.csv), as `dse sweep --sampler exact` does after
the enumeration; and, with `--part chunks`, two 131,072-row enumeration chunks.

    PYTHONPATH=. python benchmarks/exact_write_instructions.py --results DIR \\
        --code /tmp/base-main --code . [--part write|chunks]

DIR: the results folder of a finished `dse sweep benchmarks/sweep_3m_space.yaml --sampler
exact` (its journal names the configurations recorded). Per checkout, two runs under
`valgrind --tool=callgrind` (PYTHONHASHSEED=0, one BLAS thread, the checkout's own artifacts):
both import, evaluate three configurations fully and scan a 2,048-row chunk (artifacts and lazy
imports loaded); the second then does the part. The difference is the part's instructions
(~5-10 minutes per checkout on a loaded 2-core machine). Prints a table; writes nothing but a
temporary folder.
"""

from __future__ import annotations

import argparse
import inspect
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _callgrind import callgrind_instructions
from _provenance import checkout_label

SPACE = Path(__file__).resolve().parent / "sweep_3m_space.yaml"


def worker(results: Path, part: str, measure: bool) -> None:
    """The measured process: the warm-up, then (with `measure`) the part."""
    import numpy as np
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    from dse.spec.space import load_space
    from dse.sweep import _enumerate as E
    from dse.sweep._journal import BatchedJournalBackend
    from dse.sweep.results import record_own_exact_front, write_results
    from dse.sweep.space_index import param_digits

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space(SPACE)
    sizes = [len(p.values) for p in space.searched]
    ref = JournalStorage(JournalFileBackend(str(results / "journal.log")))
    (name,) = optuna.get_all_study_names(ref)
    stored = optuna.load_study(study_name=name, storage=ref).get_trials(deepcopy=False)
    digits = np.array(param_digits(space, [t.params for t in stored]))
    index = np.sort(np.ravel_multi_index(tuple(digits.T), sizes))
    E.evaluate_index(space, index[:3])
    E.evaluate_chunk(space, 0, 2048)
    if not measure:
        return
    if part == "chunks":
        for c in (1, 2):
            E.evaluate_chunk(space, c, E.CHUNK)
        return
    # main has no `parsed`: the same calls without it
    kw = {"parsed": {}} if "parsed" in inspect.signature(E.record_trials).parameters else {}
    trials = E.record_trials(space, index, **kw)
    folder = Path(tempfile.mkdtemp())
    try:
        backend = BatchedJournalBackend(folder / "journal.log")
        storage = JournalStorage(backend)
        backend.adopt(storage)
        study = optuna.create_study(
            storage=storage, study_name=name, directions=list(space.objectives.directions)
        )
        study.add_trials(trials)
        backend.flush()
        got = study.get_trials(deepcopy=False)
        written = write_results(
            folder,
            space,
            got,
            study_name=name,
            sampler="exact",
            seed=0,
            trials_requested=len(got),
            storage="journal",
            elapsed_s=0.0,
            **kw,
        )
        record_own_exact_front(written, space, folder)
    finally:
        shutil.rmtree(folder)


def instructions(code: Path, results: Path, part: str, measure: bool) -> int:
    """Instructions callgrind collected for `worker(...)` on `code`."""
    args = ["--worker", "--results", str(results), "--part", part]
    return callgrind_instructions(code, __file__, args + (["--measure"] if measure else []))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--results", type=Path, required=True, help="a finished exact sweep's folder")
    p.add_argument("--code", action="append", type=Path, help="a checkout (repeatable)")
    p.add_argument("--label", action="append", help="a label per --code (default: its commit)")
    p.add_argument("--part", choices=("write", "chunks"), default="write")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    results = args.results.resolve()
    if args.worker:
        worker(results, args.part, args.measure)
        return
    codes = [c.resolve() for c in (args.code or [Path(__file__).resolve().parents[1]])]
    labels = args.label or [checkout_label(c) for c in codes]
    per: list[float] = []
    for code in codes:
        per.append(
            instructions(code, results, args.part, True)
            - instructions(code, results, args.part, False)
        )
        print(f"{code}: {per[-1] / 1e6:.1f} M instructions", file=sys.stderr)
    print(f"| code | instructions, exact sweep's {args.part} part (M) | ratio |")
    print("|---|---|---|")
    for lab, x in zip(labels, per, strict=True):
        print(f"| {lab} | {x / 1e6:.1f} | {x / per[0]:.3f} |")


if __name__ == "__main__":
    main()

"""Walk the code a search-space field takes from YAML to front.csv (issue 36's "walk").

Runs `dse sweep` in this process under a profiler hook and reads the call tree of the `dse`
package, in the order the code runs (what a reader following the calls would open):

- stops: the distinct `dse` functions run, in first-run order (comprehensions and lambdas
  count as their enclosing function);
- module returns: how often that reading order comes back to a module it had left (a walk
  through a layered house leaves each module once, apart from shared leaves: dse.errors,
  dse.files, ...);
- back-calls: calls into a module that is already on the call stack further down, made from
  another module: work handed back to a caller, which a one-way import rule forbids at import
  time but callbacks and late imports still allow. A house whose modules each pass work only
  downward has none.

    PYTHONPATH=. python benchmarks/walk.py                         # the README's main job
    PYTHONPATH=. python benchmarks/walk.py SPACE.yaml --sampler exact --trials 64
    PYTHONPATH=. python benchmarks/walk.py --json walk.json        # the walk as JSON

The sweep writes into a temporary folder (report off unless --report). No timing is read: the
numbers depend on the code's call structure only (not the machine)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Walk:
    """The call structure of one run of the `dse` package."""

    stops: list[tuple[str, str]] = field(default_factory=list)  # (module, function), first run
    back_calls: Counter = field(default_factory=Counter)  # module -> calls back into it
    back_edges: Counter = field(default_factory=Counter)  # (from module, into module) -> calls
    back_functions: Counter = field(default_factory=Counter)  # "module.function" called back
    callbacks: Counter = field(default_factory=Counter)  # (helper's module, callback's) -> calls

    def modules(self) -> list[str]:
        """Modules in first-visit order of their functions, consecutive repeats collapsed."""
        out: list[str] = []
        for mod, _ in self.stops:
            if not out or out[-1] != mod:
                out.append(mod)
        return out

    def returns(self) -> Counter:
        """module -> how often the reading order comes back to it after leaving it."""
        seq = self.modules()
        seen: set[str] = set()
        back: Counter = Counter()
        for mod in seq:
            if mod in seen:
                back[mod] += 1
            seen.add(mod)
        return back

    def summary(self) -> dict[str, Any]:
        ret = self.returns()
        return {
            "stops": len(self.stops),
            "modules": len(set(m for m, _ in self.stops)),
            "module_changes": len(self.modules()) - 1,
            "module_returns": sum(ret.values()),
            "returns_by_module": dict(ret.most_common()),
            "back_calls": sum(self.back_calls.values()),
            "back_calls_by_module": dict(self.back_calls.most_common()),
            "back_edges": {f"{a} -> {b}": n for (a, b), n in self.back_edges.most_common()},
            "back_functions": dict(self.back_functions.most_common()),
            "callbacks": {f"{a} -> {b}": n for (a, b), n in self.callbacks.most_common()},
            "walk": [f"{m}.{f}" for m, f in self.stops],
        }


def _module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name == "dse" or name.startswith("dse.") else None


def trace(run: Any) -> Walk:
    """Run `run()` and return the walk of the `dse` functions it ran."""
    walk = Walk()
    seen: set[Any] = set()
    # the dse frames now running: (frame id, module); a callback (a function defined inside
    # another and handed to a helper of another module, `<locals>` in its name) starts a new
    # segment: the helper calling it is delegation, not work handed back
    stack: list[tuple[int, str]] = []
    segments: list[int] = [0]  # where each segment of `stack` starts
    importing = [0]  # module bodies now running: calls made while importing are not the walk

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if code.co_name == "<module>":
            importing[0] += 1 if event == "call" else -1 if event == "return" else 0
            return
        if event == "call":
            mod = _module(frame)
            if mod is None or importing[0] or code.co_name.startswith("<"):
                return
            caller = stack[-1][1] if stack else None
            if caller is not None and caller != mod:
                if "<locals>" in code.co_qualname:
                    walk.callbacks[(caller, mod)] += 1
                    segments.append(len(stack))
                elif any(m == mod for _, m in stack[segments[-1] :]):
                    walk.back_calls[mod] += 1
                    walk.back_edges[(caller, mod)] += 1
                    walk.back_functions[f"{mod}.{code.co_qualname}"] += 1
            stack.append((id(frame), mod))
            if code not in seen:
                seen.add(code)
                walk.stops.append((mod, code.co_qualname))
        elif event == "return" and stack and stack[-1][0] == id(frame):
            stack.pop()
            if len(segments) > 1 and segments[-1] == len(stack):
                segments.pop()

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return walk


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("space", nargs="?", default=str(ROOT / "search_spaces" / "gpu_batch.yaml"))
    ap.add_argument("--sampler", default=None, help="as `dse sweep --sampler`")
    ap.add_argument("--trials", type=int, default=None, help="as `dse sweep --trials`")
    ap.add_argument("--report", action="store_true", help="also build report.html")
    ap.add_argument("--json", type=Path, default=None, help="write the whole walk here")
    ap.add_argument("--show", type=int, default=60, help="print the first N module changes")
    a = ap.parse_args(argv)

    from dse.cli import main as dse_main

    with tempfile.TemporaryDirectory() as tmp:
        args = ["sweep", a.space, "--out", str(Path(tmp) / "out"), "-q"]
        args += [] if a.report else ["--no-report"]
        args += ["--sampler", a.sampler] if a.sampler else []
        args += ["--trials", str(a.trials)] if a.trials else []
        rc: list[int] = []
        walk = trace(lambda: rc.append(dse_main(args)))
        if rc != [0] or not (Path(tmp) / "out" / "front.csv").exists():
            print(f"dse sweep failed (exit {rc}), no front.csv", file=sys.stderr)
            return 1
    s = walk.summary()
    print(f"dse {' '.join(args[:2])}  (sampler {a.sampler or 'from the YAML'})")
    print(
        f"stops {s['stops']} functions in {s['modules']} modules; "
        f"{s['module_changes']} module changes, {s['module_returns']} returns to a module "
        f"left before; {s['back_calls']} back-calls (into a module already on the stack)"
    )
    print("returns by module:", ", ".join(f"{m} {n}" for m, n in s["returns_by_module"].items()))
    if s["back_edges"]:
        print("back-calls:", ", ".join(f"{e} x{n}" for e, n in s["back_edges"].items()))
    if s["callbacks"]:
        print("callbacks:", ", ".join(f"{e} x{n}" for e, n in s["callbacks"].items()))
    if s["back_functions"]:
        print("called back:", ", ".join(f"{f} x{n}" for f, n in s["back_functions"].items()))
    print("walk (modules, first-run order):")
    for mod in walk.modules()[: a.show]:
        print("  ", mod)
    if a.json:
        a.json.write_text(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

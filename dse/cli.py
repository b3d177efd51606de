"""The `dse` command: parses arguments, calls the library, writes files.

Each subcommand lives in `dse/commands/<name>.py` with `register(subparsers)` and `run(args)`;
modules are imported only when their subcommand runs, so `dse predict` never imports Optuna or
plotly and answers within about a second.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import os
import sys

from dse.errors import DSEError

# name -> (module, one-line help). Order is the order `dse --help` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("dse.commands.check", "validate a search-space YAML and count its configurations"),
    "arch": ("dse.commands.arch", "parameters, FLOPs, bytes and memory of one architecture"),
    "predict": ("dse.commands.predict", "predict latency and energy of one or many configurations"),
    "energy": ("dse.commands.energy", "tokens-to-watt-hours energy breakdown of one configuration"),
    "sweep": ("dse.commands.sweep", "run a multi-objective study over a search space"),
    "worker": ("dse.commands.worker", "join a running study from another process or machine"),
    "studies": ("dse.commands.studies", "list the studies in a storage"),
    "show": ("dse.commands.show", "print a study's Pareto front"),
    "report": ("dse.commands.report", "write the interactive HTML report of a sweep"),
    "export": (
        "dse.commands.export",
        "export chosen configurations as YAML, JSON or HF config.json",
    ),
    "fit": ("dse.commands.fit", "fit the frozen predictor artifact of one GPU from measurements"),
    "validate": ("dse.commands.validate", "score the frozen predictor against measured data"),
    "gpus": ("dse.commands.gpus", "list the GPUs in the hardware registry"),
    "profile": ("dse.commands.profile", "measure a GPU's primitives into tables `dse fit` reads"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {
        name: spec
        for name, spec in COMMANDS.items()
        if importlib.util.find_spec(spec[0]) is not None
    }


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with `only`, import just that subcommand's module."""
    parser = argparse.ArgumentParser(
        prog="dse",
        description="Design-space exploration of LLM architectures: predicted inference latency "
        "and energy, Pareto fronts, exports.",
    )
    from dse import __version__

    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in _available().items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        importlib.import_module(module).register(sub)
    # No abbreviated flags: with them a new flag changes what an old command line means
    # (`--ffn=14336` became `--ffn-pattern` when that flag came); a typo gets the closest flags.
    parser.allow_abbrev = False
    for p in sub.choices.values():
        p.allow_abbrev = False
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in COMMANDS else None
    parser = build_parser(only)
    if only is None and first is not None and argv[0] == first:  # not a flag's value
        close = difflib.get_close_matches(first, list(_available()), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        parser.error(f"unknown command {first!r}{hint} (`dse --help` lists them)")
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, args.command, extra)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
    except DSEError as exc:
        print(f"dse {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dse {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a path the user named: missing, a folder, no permission, disk full
        if os.environ.get("DSE_TRACEBACK"):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"dse {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line, not a traceback, unless asked for
        if os.environ.get("DSE_TRACEBACK"):
            raise
        print(
            f"dse {args.command}: internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in dse, not a problem with your input; run again with "
            "DSE_TRACEBACK=1 to see where it happened, and report it.",
            file=sys.stderr,
        )
        return 1


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extra: list[str]) -> None:
    """Exit 2 with the subcommand's own usage (not the top-level one) and, for each unknown
    flag, the closest flags that subcommand has: `--layers` -> `--n-layers`."""
    target = parser
    if command is not None:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        target = sub.choices[command]
    known = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("-"):
            continue
        close = difflib.get_close_matches(flag, known, n=2, cutoff=0.6)
        if close:
            hints.append(f"{flag}: did you mean {' or '.join(close)}?")
    msg = "unrecognized arguments: " + " ".join(extra)
    target.error("; ".join([msg, *hints]))


if __name__ == "__main__":
    raise SystemExit(main())

"""One module per `dse` subcommand: each defines `register(subparsers)` and `run(args) -> int`."""

"""One entry point over several tools: `python -m bench.<group> <subcommand> [its arguments]`."""

from __future__ import annotations

import importlib
import sys


def dispatch(group: str, subcommands: dict[str, tuple[str, str]], argv: list[str] | None = None) -> None:
    """Run `subcommands[name]`'s module's `main(rest)`, where argv = [name, *rest]; each value is (module, what it
    answers). No name, or an unknown one, prints the list and exits with status 2."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in subcommands:
        width = max(map(len, subcommands))
        lines = [f"usage: python -m bench.{group} SUBCOMMAND [arguments; --help for each]", ""]
        lines += [f"  {name:<{width}}  {what}" for name, (_, what) in subcommands.items()]
        if argv and argv[0] not in ("-h", "--help"):
            lines.insert(0, f"unknown subcommand {argv[0]!r}")
        print("\n".join(lines), file=sys.stderr)
        raise SystemExit(2 if argv[:1] not in (["-h"], ["--help"]) else 0)
    module, _ = subcommands[argv[0]]
    sys.argv[0] = f"python -m bench.{group} {argv[0]}"  # argparse's prog in usage lines
    importlib.import_module(module).main(argv[1:])

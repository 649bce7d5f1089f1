"""The ``otspec`` command line: thin adapters over the public API.

Each subcommand lives in its own module with ``register(subparsers)``; errors from the library
(:class:`otspec.errors.OtspecInputError`) are printed as one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

from otspec.cli._common import run_guarded

__all__ = ["main", "build_parser"]


class _OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors on one stderr line (``otspec: error: ...``), exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(2, f"otspec: error: {sub}{message}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``otspec`` argument parser with every subcommand registered.

    Returns
    -------
    argparse.ArgumentParser
        A parser whose usage errors print one ``otspec: error: ...`` line and exit with status 2;
        each subcommand sets ``args.func`` to its ``run``.
    """
    from otspec import __version__
    from otspec.cli import audit, block, bound, decode

    parser = _OneLineParser(
        prog="otspec",
        description="Exact optimal-transport bounds and verifiers for speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"otspec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    bound.register(sub)
    block.register(sub)
    audit.register(sub)
    decode.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``otspec`` command line (the console-script entry point).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; ``None`` reads ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 on success, 2 on a usage or input error (printed as one line on
        stderr, no traceback), 1 when ``otspec audit`` finds a failing property.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    return run_guarded(args.func, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``otspec`` command line: thin adapters over the public API.

The core commands (``bound``, ``block``, ``audit``, ``speedup``) live in this package, one module each with
``register(subparsers)``. Commands that need torch (``decode``, ``sprinter``, ...) are plug-ins:
a package declares them as Python entry points of the group ``"otspec.cli"`` (:data:`PLUGIN_GROUP`),
each entry point named after its command and pointing at a ``register(subparsers)`` function, e.g.
in ``pyproject.toml``::

    [project.entry-points."otspec.cli"]
    decode = "otspec_gpu.cli.decode:register"

so this package never imports ``otspec_gpu`` (or torch) itself. A plug-in is imported only when its
command is run or the top-level help is printed; one that fails to import (torch missing, say) does
not break the core commands: it is listed with the reason, and running it prints that reason as one
line and exits with status 2. Errors from the library (:class:`otspec.errors.OtspecInputError`)
are printed as one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from otspec.cli.toolkit import CliError, run_guarded

__all__ = ["PLUGIN_GROUP", "build_parser", "main"]

#: The entry-point group of CLI plug-ins: each entry point's name is the command, its value a
#: ``register(subparsers)`` function (the same signature as the core commands' ``register``).
PLUGIN_GROUP = "otspec.cli"

#: The commands of the core, registered directly; a plug-in of the same name is ignored.
_CORE = ("bound", "block", "audit", "speedup")


class _OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors on one stderr line (``otspec: error: ...``), exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(2, f"otspec: error: {sub}{message}; see {self.prog} --help\n")


def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The installed CLI plug-ins by command name (core command names excluded), sorted."""
    found = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    return {ep.name: ep for ep in sorted(found, key=lambda ep: ep.name) if ep.name not in _CORE}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _unavailable(sub: argparse._SubParsersAction, name: str, reason: str) -> None:
    """List command ``name`` with ``reason``; running it raises a CliError that says why."""

    def run(args: argparse.Namespace) -> int:
        raise CliError(f"`otspec {name}` is unavailable: {reason}")

    _listed(sub, name, f"(unavailable: {reason})").set_defaults(func=run)


def _listed(sub: argparse._SubParsersAction, name: str, help: str) -> argparse.ArgumentParser:
    """A placeholder subcommand that takes any arguments (its prefix character is never typed, so
    ``--help`` and every flag are plain words) and runs nothing until ``func`` is set."""
    ap = sub.add_parser(name, help=help, add_help=False, prefix_chars="\0")
    ap.add_argument("rest", nargs="*")
    return ap


def _register_plugin(sub: argparse._SubParsersAction, ep: importlib.metadata.EntryPoint) -> str | None:
    """Load plug-in ``ep`` and register its command; the one-line reason when it cannot be loaded."""
    try:
        register = ep.load()
        # a rehearsal on a scratch parser first, so that a register() failing half-way leaves no
        # half-registered command behind
        register(_OneLineParser(prog="otspec").add_subparsers())
    except (Exception, SystemExit) as exc:  # a broken plug-in must never take the core commands down with it
        reason = _one_line(exc)
        _unavailable(sub, ep.name, reason)
        return reason
    register(sub)
    return None


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand word of ``argv`` (the first non-option argument; the top level has no valued options)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``otspec`` argument parser with every subcommand registered.

    Parameters
    ----------
    command : str, optional
        The subcommand about to run. When it is a core command, plug-ins are listed by name without
        being imported (so ``otspec bound`` never imports torch); otherwise (``None``: the
        top-level help, or a plug-in's name) they are imported and registered.

    Returns
    -------
    argparse.ArgumentParser
        A parser whose usage errors print one ``otspec: error: ...`` line and exit with status 2;
        each subcommand sets ``args.func`` to its ``run``.
    """
    from otspec import __version__
    from otspec.cli import audit, block, bound, speedup

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
    speedup.register(sub)
    plugins = _plugins()
    for name, ep in plugins.items():
        if command in _CORE:  # listed, not imported: the command being run is a core one
            _listed(sub, name, f"(plug-in {ep.value})")
        else:
            _register_plugin(sub, ep)
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
        stderr, no traceback) or an unavailable plug-in command, 1 when ``otspec audit`` finds a
        failing property.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    return run_guarded(args.func, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The torch commands of the ``otspec`` command line, as a plug-in.

``otspec decode`` (with ``--verifier sprinter`` for SPRINTER) is declared as an entry point of the
group ``"otspec.cli"`` in ``pyproject.toml``; the core CLI (:mod:`otspec.cli`) loads it by name and
never imports this package itself. Pieces shared by :mod:`otspec_gpu.cli.decode` and
:mod:`otspec_gpu.cli.sprinter` live here (so the two never import each other both ways).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from otspec.cli.toolkit import CliError, number_flag
from otspec.plugin import require

__all__ = ["check_writable", "prompt_arg", "require_decode_stack", "sampling_flags"]


def require_decode_stack() -> None:
    """Keep the model loaders offline and check that transformers imports.

    ``HF_HUB_OFFLINE=1`` is set unless the environment sets it already.

    Raises
    ------
    CliError
        If transformers is not installed (the message says how to install it).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    require(
        "transformers",
        "decode",
        needed_by="otspec decode",
        install='pip install torch==2.13.0 && pip install "otspec[decode]"',
        error=CliError,
    )


def _ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise CliError(
            f"--prompt-ids must be token ids separated by commas or spaces (got {text!r}); pass e.g. --prompt-ids 1,2,3"
        ) from None
    if not ids:
        raise CliError(f"--prompt-ids needs at least one token id (got {text!r}); pass e.g. --prompt-ids 1,2,3")
    return ids


def prompt_arg(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The prompt (or batch) to decode and its labels, from ``--prompt`` or ``--prompt-ids``.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed options with ``prompt`` and ``prompt_ids`` (lists, one of them set).

    Returns
    -------
    (object, list of str)
        A text, a list of texts, a list of ids or a list of id lists (one prompt is passed alone),
        and one label per prompt for printing.

    Raises
    ------
    CliError
        If ``--prompt-ids`` is not a list of integers.
    """
    if args.prompt_ids:
        ids = [_ids(t) for t in args.prompt_ids]
        return (ids if len(ids) > 1 else ids[0]), [",".join(map(str, p)) for p in ids]
    return (args.prompt if len(args.prompt) > 1 else args.prompt[0]), list(args.prompt)


def sampling_flags(args: argparse.Namespace) -> dict:
    """The sampling and length flags shared by every decoder, parsed by :func:`otspec.cli.toolkit.number_flag`.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed options with ``temperature``, ``top_k``, ``top_p``, ``max_new_tokens`` and ``seed``.

    Returns
    -------
    dict
        ``temperature``, ``top_k``, ``top_p``, ``max_new_tokens`` and ``seed``, as the decoders take them.

    Raises
    ------
    CliError
        If a flag is not a number of the right kind or is out of range.
    """
    return dict(
        temperature=number_flag(args.temperature, "--temperature", float, minimum=0),
        top_k=number_flag(args.top_k, "--top-k", int, minimum=1, optional=True),
        top_p=number_flag(args.top_p, "--top-p", float, minimum=0, maximum=1, optional=True),
        max_new_tokens=number_flag(args.max_new_tokens, "--max-new-tokens", int, minimum=1),
        seed=number_flag(args.seed, "--seed", int, minimum=0),
    )


def check_writable(path: str | None, flag: str = "--trace") -> None:
    """Refuse an output file that cannot be written, before any work is done.

    Parameters
    ----------
    path : str or None
        The file (``None``: nothing to check).
    flag : str
        The option's name, for the message.

    Raises
    ------
    CliError
        If the folder does not exist or is not writable, or the path is a folder or a read-only file.
    """
    if not path:
        return
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise CliError(f"{flag} {path} is a folder; pass a file name, e.g. {flag} {p / 'trace.safetensors'}")
    if not folder.is_dir():
        raise CliError(f"{flag} {path}: folder {folder} does not exist; create it or pick another path")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise CliError(f"{flag} {path} is not writable; pick a path you can write")

"""``otspec block``: expected accepted tokens of chain / tree verifiers on random models (WIP)."""

from __future__ import annotations

__all__ = ["register"]


def register(subparsers) -> None:
    parser = subparsers.add_parser("block", help="block / tree verification on random models")
    parser.add_argument("--vocab", type=int, default=4)
    parser.add_argument("--gamma", type=int, default=3)
    parser.set_defaults(func=_run)


def _run(args) -> int:
    print("otspec block: not implemented yet")
    return 0

"""The one way an optional fast path (the Triton kernels, the compiled steps) gives up for the
process: its first failure is recorded in the path's own list and announced once with a
``RuntimeWarning``; the caller then runs the plain torch step, whose result is the same."""

from __future__ import annotations

import warnings

__all__ = ["first_failure", "give_up"]


def first_failure(store: list[str]) -> str | None:
    """The first failure recorded in ``store`` (``"<exception type>: <message>"``), or ``None``.

    Parameters
    ----------
    store : list of str
        A fast path's failure record.

    Returns
    -------
    str or None
        The first entry, or ``None`` when the path has not failed.
    """
    return store[0] if store else None


def give_up(store: list[str], exc: BaseException, message: str) -> None:
    """Record ``exc`` in ``store`` and warn once with ``message`` (``{failure}`` is replaced by the
    first recorded failure, cut to 300 characters), pointing at the fast path's caller.

    Parameters
    ----------
    store : list of str
        The fast path's failure record (non-empty afterwards: the path is off).
    exc : BaseException
        What the fast path raised.
    message : str
        The warning, with a ``{failure}`` field.
    """
    store.append(f"{type(exc).__name__}: {exc}")
    warnings.warn(message.format(failure=store[0][:300]), RuntimeWarning, stacklevel=3)

"""Every check of user input, in one place.

Each failure raises a subclass of :class:`OtspecInputError` (itself a ``ValueError``) whose message
says the name, the value, the rule and the fix, e.g. ``p must sum to 1 (got 0.93); normalise it
first``. Nothing here clips or renormalises silently.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from otspec._tolerances import DEFAULT_MEMORY_CAP_BYTES, SIMPLEX_SUM_ATOL
from otspec.errors import (
    InvalidDistributionError,
    InvalidDraftCountError,
    InvalidDraftsError,
    InvalidOptionError,
    NotAnIntegerError,
    OtspecTypeError,
    ProblemTooLargeError,
    ShapeMismatchError,
)

__all__ = [
    "as_distribution",
    "check_same_vocab",
    "as_int_in_range",
    "as_token_tuples",
    "as_supported_drafts",
    "as_weights",
    "as_generator",
    "check_memory",
    "as_memory_cap",
    "format_bytes",
]


def _short(x: Any) -> str:
    text = np.array2string(np.asarray(x), threshold=6, precision=4) if not np.isscalar(x) else repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def as_distribution(x: Any, name: str = "p") -> np.ndarray:
    """Return ``x`` as a float64 ``(V,)`` array on the simplex, or raise.

    Rules: one-dimensional, non-empty, finite, no negative entry, sum within
    :data:`~otspec._tolerances.SIMPLEX_SUM_ATOL` of 1. The array is copied and made read-only.
    """
    if np.iscomplexobj(x):
        raise InvalidDistributionError(
            f"{name} must be real (got complex values, e.g. {_short(np.asarray(x).reshape(-1)[:3])}); "
            "pass the real probabilities (casting would silently drop the imaginary part)"
        )
    try:
        arr = np.array(x, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise InvalidDistributionError(
            f"{name} must be a 1-D array of probabilities (got {type(x).__name__}: {exc}); pass a list or numpy array of floats"
        ) from None
    if arr.ndim != 1:
        raise ShapeMismatchError(f"{name} must be one-dimensional (got shape {arr.shape}); pass one distribution of shape (V,)")
    if arr.size == 0:
        raise InvalidDistributionError(f"{name} must have at least one entry (got an empty array); pass a (V,) distribution")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise InvalidDistributionError(f"{name} must be finite (got {arr[bad]} at index {bad}); check the logits/softmax that produced it")
    if np.any(arr < 0):
        bad = int(np.argmin(arr))
        raise InvalidDistributionError(
            f"{name} must be non-negative (got {arr[bad]:.3g} at index {bad}); clip rounding noise yourself if intended"
        )
    total = float(arr.sum())
    if abs(total - 1.0) > SIMPLEX_SUM_ATOL:
        raise InvalidDistributionError(
            f"{name} must sum to 1 within {SIMPLEX_SUM_ATOL:g} (got {total:.12g}); normalise it first "
            "(in float64: a float32 softmax is not accurate enough)"
        )
    arr.setflags(write=False)
    return arr


def check_same_vocab(a: np.ndarray, b: np.ndarray, names: tuple[str, str] = ("p", "q")) -> None:
    """Raise :class:`ShapeMismatchError` unless two distributions share the vocabulary size."""
    if a.shape != b.shape:
        raise ShapeMismatchError(
            f"{names[0]} and {names[1]} must have the same vocabulary size (got {a.shape[0]} and {b.shape[0]}); "
            "both must be distributions over the same token ids"
        )


def as_int_in_range(k: Any, name: str = "k", *, minimum: int = 1, maximum: int | None = None, why_max: str = "") -> int:
    """Return ``k`` as a Python int in ``[minimum, maximum]``, or raise.

    Used for every whole-number argument: draft counts ``k``, block lengths ``gamma``, vocabulary
    sizes, seeds and sample sizes. Booleans and non-integral numbers are refused.

    Parameters
    ----------
    k : object
        The value to check.
    name : str
        Its name in the error message.
    minimum, maximum : int, optional
        Inclusive bounds (``maximum=None``: no upper bound).
    why_max : str
        Text appended to the message when ``k > maximum``.

    Returns
    -------
    int

    Raises
    ------
    NotAnIntegerError
        If ``k`` is not an integer (an :class:`InvalidDraftCountError` and a ``TypeError``).
    InvalidDraftCountError
        If ``k`` lies outside ``[minimum, maximum]``.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        if isinstance(k, numbers.Real) and float(k).is_integer():
            hint = f"pass the integer {int(k)}"
        else:
            hint = "pass a whole number"
        raise NotAnIntegerError(f"{name} must be an integer (got {k!r}); {hint}")
    k = int(k)
    if k < minimum:
        raise InvalidDraftCountError(f"{name} must be >= {minimum} (got {k}); pass at least {minimum}")
    if maximum is not None and k > maximum:
        raise InvalidDraftCountError(f"{name} must be <= {maximum} (got {k}){why_max}")
    return k


def as_token_tuples(tuples: Any, V: int | None = None, name: str = "tuples") -> np.ndarray:
    """Return draft tuples as an int64 ``(M, k)`` array with entries in ``[0, V)``."""
    try:
        arr = np.array(tuples)
    except (TypeError, ValueError) as exc:  # ragged input
        raise InvalidDraftsError(
            f"{name} must be a rectangular (M, k) array of token ids ({exc}); give every tuple the same length"
        ) from None
    if arr.ndim == 1:
        arr = arr[None, :] if name == "drafts" else arr[:, None]
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidDraftsError(f"{name} must have shape (M, k) with M, k >= 1 (got shape {arr.shape}); pass a list of token tuples")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise InvalidDraftsError(f"{name} must hold integer token ids (got {_short(arr)}); cast them to int")
    elif arr.dtype.kind not in "iu":
        raise InvalidDraftsError(f"{name} must hold integer token ids (got dtype {arr.dtype}); cast them to int")
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise InvalidDraftsError(f"{name} must hold token ids >= 0 (got {int(arr.min())}); token ids index the vocabulary")
    if V is not None and np.any(arr >= V):
        raise InvalidDraftsError(
            f"{name} must hold token ids < V = {V} (got {int(arr.max())}); every drafted token must be in the vocabulary"
        )
    return arr


def as_supported_drafts(drafts: Any, q: Any, *, name: str = "drafts", q_name: str = "q", distinct: bool = False) -> np.ndarray:
    """The one check of drafted tokens, shared by every entry point that takes drafts.

    Parameters
    ----------
    drafts : array_like of int, shape (k,) or (M, k)
        Draft tuples (one drafted token per position).
    q : array_like, shape (V,) or (k, V)
        The draft law that proposed them: one distribution shared by every position, or one row per
        position (a product law's drafters, or the conditionals along a drafted path).
    distinct : bool
        Require distinct tokens within each tuple (drafting without replacement).

    Returns
    -------
    ndarray of int64, shape (M, k)

    Rules: integer ids in ``[0, V)``; every drafted token has positive draft probability at its
    position (a token the drafter gives probability 0 cannot have been drafted, and verifying it
    would divide by 0); with ``distinct``, no tuple repeats a token. Raises
    :class:`InvalidDraftsError` naming the tuple, the token and the position.
    """
    Q = np.asarray(q, dtype=np.float64)
    arr = np.asarray(drafts)
    t = as_token_tuples(arr.reshape(1, -1) if arr.ndim <= 1 else arr, Q.shape[-1], name=name)
    if Q.ndim == 2 and Q.shape[0] != t.shape[1]:
        raise ShapeMismatchError(
            f"{name} must hold one token per row of {q_name} ({Q.shape[0]}) (got {t.shape[1]} per tuple); pass tuples of that length"
        )
    qx = Q[t] if Q.ndim == 1 else Q[np.arange(t.shape[1])[None, :], t]
    if np.any(~(qx > 0)):
        m, j = (int(v) for v in np.argwhere(~(qx > 0))[0])
        tok = int(t[m, j])
        where = f"{q_name}[{tok}]" if Q.ndim == 1 else f"{q_name}[{j}, {tok}]"
        raise InvalidDraftsError(
            f"{name} {t[m].tolist()} hold token {tok} at position {j}, which has draft probability 0 ({where} = 0); "
            "the drafter could not have produced it: pass drafts sampled from the draft law"
        )
    if distinct and t.shape[1] > 1:
        s = np.sort(t, axis=1)
        dup = np.flatnonzero(np.any(s[:, 1:] == s[:, :-1], axis=1))
        if dup.size:
            raise InvalidDraftsError(
                f"{name} {t[int(dup[0])].tolist()} repeat a token, which drafting without replacement never does; pass distinct tokens"
            )
    return t


def as_weights(w: Any, M: int, name: str = "weights") -> np.ndarray:
    """Probability weights of M enumerated objects (same rules as :func:`as_distribution`)."""
    arr = as_distribution(w, name)
    if arr.shape[0] != M:
        raise ShapeMismatchError(f"{name} must have one entry per tuple ({M}) (got {arr.shape[0]}); pass one weight per tuple")
    return arr


def as_generator(rng: Any, name: str = "rng") -> np.random.Generator:
    """Require an explicit ``numpy.random.Generator`` (never a seed, never the global state)."""
    if not isinstance(rng, np.random.Generator):
        raise OtspecTypeError(
            f"{name} must be a numpy.random.Generator (got {type(rng).__name__}); "
            "create one with numpy.random.default_rng(seed) and pass it explicitly"
        )
    return rng


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def as_memory_cap(cap: Any) -> float:
    """``memory_cap`` in bytes: a positive real number, or ``None`` for the default (4 GiB)."""
    if cap is None:
        return float(DEFAULT_MEMORY_CAP_BYTES)
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not cap > 0:
        raise InvalidOptionError(
            f"memory_cap must be a positive number of bytes or None (got {cap!r}); pass e.g. 8 * 1024**3, or None for the default"
        )
    return float(cap)


def check_memory(estimate_bytes: float, cap: float | None, what: str, hint: str) -> None:
    """Refuse, before allocating, a computation whose estimated peak memory exceeds ``cap``."""
    cap = as_memory_cap(cap)
    if estimate_bytes > cap:
        raise ProblemTooLargeError(
            f"{what} would need about {format_bytes(estimate_bytes)}, above the memory cap of {format_bytes(cap)}; {hint}"
        )

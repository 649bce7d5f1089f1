"""Reading distributions from files: ``.npy``, ``.npz``, ``.safetensors``, ``.txt``/``.csv``.

A file holds one vector (of probabilities, or of logits with ``logits=True``). ``.npz`` and
``.safetensors`` files must hold exactly one array, or name it with ``key``.
"""

from __future__ import annotations

import os

import numpy as np

from otspec._validation import as_distribution
from otspec.errors import InputFileError
from otspec.synthetic import softmax

__all__ = ["load_distribution", "SUFFIXES"]

SUFFIXES = (".npy", ".npz", ".safetensors", ".txt", ".csv")


def _pick(arrays: dict, path: str, key: str | None, name: str = "p") -> np.ndarray:
    if key is not None:
        if key not in arrays:
            raise InputFileError(f"{name} file {path!r} has no array named {key!r} (it has {sorted(arrays)}); pass one of those names")
        return arrays[key]
    if len(arrays) != 1:
        raise InputFileError(
            f"{name} file {path!r} holds {len(arrays)} arrays ({sorted(arrays)[:5]}); it must hold exactly one, or name it with key="
        )
    return next(iter(arrays.values()))


def load_distribution(path: str, *, name: str = "p", logits: bool = False, key: str | None = None) -> np.ndarray:
    """Load a (V,) distribution from ``path`` and validate it (never renormalised).

    With ``logits=True`` the file holds logits and a float64 softmax is applied.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputFileError(f"{name} file {path!r} is a directory, not a file; pass the path of the file inside it")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise InputFileError(f"{name} file {path!r} has an unsupported extension {suffix or '(none)'!r}; use one of {', '.join(SUFFIXES)}")
    if not os.path.isfile(path):
        raise InputFileError(f"{name} file {path!r} does not exist; check the path")
    try:
        if suffix == ".npy":
            arr = np.load(path, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                arr = _pick({k: z[k] for k in z.files}, path, key, name)
        elif suffix == ".safetensors":
            from safetensors.numpy import load_file

            arr = _pick(load_file(path), path, key, name)
        else:
            arr = np.loadtxt(path, delimiter="," if suffix == ".csv" else None, dtype=np.float64, ndmin=1)
    except InputFileError:
        raise
    except Exception as exc:  # any parser failure is an unreadable file for the user
        raise InputFileError(f"{name} file {path!r} cannot be read as {suffix} ({type(exc).__name__}: {exc}); check its format") from None
    arr = np.asarray(arr)
    if arr.dtype.kind not in "fiu":
        raise InputFileError(f"{name} file {path!r} holds {arr.dtype} data; it must hold real numbers")
    # squeeze singleton axes (a (1, V) row is one vector), but a one-token file stays shape (1,)
    arr = np.squeeze(arr.astype(np.float64)).reshape(-1) if arr.size == 1 else np.squeeze(arr.astype(np.float64))
    if arr.ndim != 1:
        raise InputFileError(f"{name} file {path!r} holds an array of shape {arr.shape}; it must hold one vector of shape (V,)")
    if logits:
        if not np.all(np.isfinite(arr) | (arr == -np.inf)):
            raise InputFileError(f"{name} logits in {path!r} contain NaN or +inf; fix the file")
        arr = softmax(arr)
    return as_distribution(arr, name)

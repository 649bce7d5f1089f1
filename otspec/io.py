r"""Files otspec reads and writes, with numpy only (never torch).

**Distributions** (:func:`load_distribution`): ``.npy``, ``.npz``, ``.safetensors``,
``.txt``/``.csv``. A file holds one vector (of probabilities, or of logits with ``logits=True``).
``.npz`` and ``.safetensors`` files must hold exactly one array, or name it with ``key``.

**Decoding traces** (:class:`Trace`, :func:`load_trace`, :func:`save_trace`): the per-round
records of a decoding run (written by :func:`otspec_gpu.decode`). A :class:`Trace` is columnar:
one **record** per (round, prompt) and a few per-round columns. It is stored with
``safetensors.numpy`` as one file whose metadata holds the run's configuration as JSON (key
:data:`TRACE_METADATA_KEY`), so it is read back without torch.

Record columns (``n`` records; ``k`` drafts, ``gamma`` block length, ``K`` kept probabilities):

============================  ====================  ==============================================
name                          shape / dtype         meaning
============================  ====================  ==============================================
``round``, ``prompt``         (n,) int64            round index, prompt index in the batch
``tau``                       (n,) int64            accepted draft tokens (single-step: 0 or 1)
``n_emit``                    (n,) int64            tokens this record added to the output
``next_token``                (n,) int64            correction or bonus token
``path``                      (n,) int64            the draft row that was followed (0 for chains)
``drafts``                    (n, k, gamma) int64   every drafted token
``p_top_ids``, ``p_top``      (n, gamma+1, K)       the K largest target probabilities along the path
``p_tail``                    (n, gamma+1) float64  target mass outside them
``q_top_ids``, ``q_top``      (n, gamma, K)         the same for the draft
``q_tail``                    (n, gamma) float64
``th_<name>``                 (n,) float64          exact theory (:mod:`otspec_gpu.theory`)
``round_t_<phase>``           (rounds,) float64     seconds of each phase of each round: draft,
                                                    target, verify, rollback, theory
============================  ====================  ==============================================

A run that recorded nothing (no round had a live prompt) has every record column above, except the
``th_<name>`` ones, with ``n = 0`` rows; it is written and read back like any other trace.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from otspec._validation import as_distribution
from otspec.errors import InputFileError
from otspec.synthetic import softmax

__all__ = ["load_distribution", "SUFFIXES", "Trace", "load_trace", "save_trace", "TRACE_METADATA_KEY", "TRACE_PHASES"]

SUFFIXES = (".npy", ".npz", ".safetensors", ".txt", ".csv")
#: Metadata key of a trace file: the run configuration as JSON.
TRACE_METADATA_KEY = "otspec_trace"
#: Phases of a decoding round whose seconds a trace keeps (columns ``round_t_<phase>``).
TRACE_PHASES = ("draft", "target", "verify", "rollback", "theory")


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

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy``, ``.npz``, ``.safetensors``, ``.txt`` or ``.csv`` file holding one vector
        (singleton axes, e.g. a ``(1, V)`` row, are squeezed).
    name : str
        The argument's name in error messages (``"p"``, ``"q"``).
    logits : bool
        The file holds logits (``-inf`` allowed) instead of probabilities.
    key : str, optional
        Array name inside a ``.npz`` / ``.safetensors`` file that holds several.

    Returns
    -------
    ndarray, shape (V,)
        A float64 distribution (validated, never renormalised).

    Raises
    ------
    InputFileError
        If the path is a directory, missing, of an unsupported type, unreadable, or does not hold
        exactly one real vector (or ``key`` is missing), or logits contain NaN / +inf.
    InvalidDistributionError
        If the vector is not a distribution (negative, non-finite, or not summing to 1).
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


# ------------------------------------------------------------------------------------------------
# Decoding traces
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Trace:
    """The records of one decoding run: columns (``name -> ndarray``) and the run configuration.

    Attributes
    ----------
    columns : dict of str to ndarray
        The record and per-round columns (module docstring); ``"tau"`` is always present.
    config : dict
        The run configuration (JSON-able: mode, verifier, gamma, k, seed, ...).

    Examples
    --------
    >>> import numpy as np
    >>> t = Trace({"tau": np.array([1, 2]), "th_expected": np.array([0.5, 1.5])}, {"mode": "chain"})
    >>> t.n_records, t.theory_columns(), t["tau"].tolist()
    (2, ['expected'], [1, 2])
    """

    columns: dict
    config: dict = field(default_factory=dict)

    @property
    def n_records(self) -> int:
        """Number of records (rows of the ``tau`` column)."""
        return int(self.columns["tau"].shape[0])

    def theory_columns(self) -> list[str]:
        """Names ``<name>`` of the ``th_<name>`` theory columns, sorted.

        Returns
        -------
        list of str
            E.g. ``["expected", "exp_block", ...]`` (without the ``th_`` prefix).
        """
        return sorted(c[3:] for c in self.columns if c.startswith("th_"))

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def save(self, path: str | Path) -> Path:
        """Write this trace to ``path`` (:func:`save_trace`).

        Parameters
        ----------
        path : str or pathlib.Path
            Destination file (overwritten if it exists).

        Returns
        -------
        pathlib.Path
            ``path``.
        """
        return save_trace(self, path)

    def __repr__(self) -> str:
        return f"Trace(records={self.n_records}, mode={self.config.get('mode')!r}, verifier={self.config.get('verifier')!r}, columns={len(self.columns)})"


def _jsonable(x: Any):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def save_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as one safetensors file: contiguous arrays, the config as JSON metadata.

    Parameters
    ----------
    trace : Trace
        The trace to write.
    path : str or Path
        Destination file (conventionally ``*.safetensors``); overwritten if it exists.

    Returns
    -------
    Path
        ``path``.

    Examples
    --------
    >>> import numpy as np, os, tempfile
    >>> f = os.path.join(tempfile.mkdtemp(), "run.safetensors")
    >>> _ = save_trace(Trace({"tau": np.array([0, 3])}, {"mode": "chain", "gamma": 3}), f)
    >>> load_trace(f).config
    {'mode': 'chain', 'gamma': 3}
    """
    from safetensors.numpy import save_file

    path = Path(path)
    arrays = {k: np.ascontiguousarray(v) for k, v in trace.columns.items()}
    save_file(arrays, str(path), metadata={TRACE_METADATA_KEY: json.dumps(trace.config, default=_jsonable)})
    return path


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by :func:`save_trace` (numpy and safetensors only; no torch).

    Parameters
    ----------
    path : str or Path
        A file written by :func:`save_trace` (e.g. ``otspec decode --trace FILE``).

    Returns
    -------
    Trace
        Its columns (numpy arrays, dtypes as written) and configuration.

    Raises
    ------
    InputFileError
        If the file does not exist, cannot be read as safetensors, or is not an otspec trace
        (no :data:`TRACE_METADATA_KEY` metadata or no ``tau`` column).
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise InputFileError(f"trace file {str(path)!r} does not exist; write one with `otspec decode --trace FILE`")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            cols = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    except Exception as exc:  # safetensors raises its own error types
        raise InputFileError(f"cannot read trace {str(path)!r} ({exc}); pass a file written by otspec decode --trace") from None
    if TRACE_METADATA_KEY not in meta or "tau" not in cols:
        raise InputFileError(f"{str(path)!r} is a safetensors file but not an otspec decoding trace (no {TRACE_METADATA_KEY!r} metadata)")
    return Trace(cols, json.loads(meta[TRACE_METADATA_KEY]))

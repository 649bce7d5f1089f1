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
``n_drafts`` (optional)       (n,) int64            drafts really drafted (k; fewer when q's support is
                                                    smaller than k)
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

**Format version.** A trace file carries :data:`TRACE_FORMAT_VERSION` (``"MAJOR.MINOR"``) under
the metadata key :data:`TRACE_VERSION_KEY`; a file without it was written before versions existed
and reads as ``"1.0"``. A newer MINOR only adds columns or config keys, so it is read; a newer MAJOR
is refused (upgrade otspec). :func:`save_trace` and :func:`load_trace` check the schema above (every
record column present, the dtypes and trailing shapes of the table, one length ``n`` for every
record column and one ``rounds`` for every per-round column, non-negative counts) and the
configuration (a JSON object whose ``mode`` is one of :data:`TRACE_MODES`); each defect raises
:class:`~otspec.errors.InvalidTraceError` naming the column or key.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from otspec._validation import as_distribution
from otspec.errors import InputFileError, InvalidTraceError
from otspec.synthetic import softmax

__all__ = [
    "load_distribution",
    "SUFFIXES",
    "Trace",
    "load_trace",
    "save_trace",
    "TRACE_FORMAT_VERSION",
    "TRACE_METADATA_KEY",
    "TRACE_MODES",
    "TRACE_PHASES",
    "TRACE_VERSION_KEY",
]

SUFFIXES = (".npy", ".npz", ".safetensors", ".txt", ".csv")
#: Metadata key of a trace file: the run configuration as JSON.
TRACE_METADATA_KEY = "otspec_trace"
#: Phases of a decoding round whose seconds a trace keeps (columns ``round_t_<phase>``).
TRACE_PHASES = ("draft", "target", "verify", "rollback", "theory")
#: Metadata key of a trace file's format version (``"MAJOR.MINOR"``); absent in files written
#: before versions existed, which read as ``"1.0"``.
TRACE_VERSION_KEY = "otspec_trace_version"
#: The format this otspec writes; it reads every ``1.x`` (a newer minor only adds columns or keys).
TRACE_FORMAT_VERSION = "1.0"
#: Decoding modes a trace may record (``config["mode"]``, see :class:`otspec_gpu.decoding` plans).
TRACE_MODES = ("chain", "single", "tree")


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

    The constructor does not check the columns (a trace is built round by round);
    :func:`save_trace` and :func:`load_trace` check the format (module docstring).

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

        Raises
        ------
        InvalidTraceError
            As :func:`save_trace`.
        """
        return save_trace(self, path)

    def __repr__(self) -> str:
        records = self.columns["tau"].shape[0] if "tau" in self.columns else "?"
        return f"Trace(records={records}, mode={self.config.get('mode')!r}, verifier={self.config.get('verifier')!r}, columns={len(self.columns)})"


#: Record columns of integer dtype and their number of dimensions (the first is the record).
_INT_RECORD = {"round": 1, "prompt": 1, "tau": 1, "n_emit": 1, "next_token": 1, "path": 1, "drafts": 3, "p_top_ids": 3, "q_top_ids": 3}
#: Record columns of float dtype and their number of dimensions.
_FLOAT_RECORD = {"p_top": 3, "p_tail": 2, "q_top": 3, "q_tail": 2}
#: Record columns a trace may lack (written by later versions of the decoder), checked when present.
_OPTIONAL_INT_RECORD = ("n_drafts",)
#: Record columns whose values are counts or indices: never negative.
_NON_NEGATIVE = ("round", "prompt", "tau", "n_emit", "next_token", "path", "drafts") + _OPTIONAL_INT_RECORD


def _json_value(x: Any) -> Any:
    """numpy scalars and arrays as the exact Python values (``json.dumps`` ``default`` hook)."""
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray) and x.dtype.kind in "biuf":
        return x.tolist()
    raise TypeError(type(x).__name__)


def _config_json(config: Any) -> str:
    if not isinstance(config, dict):
        raise InvalidTraceError(f"a trace's config must be a dict (got {type(config).__name__}); pass the run configuration as a dict")
    try:
        return json.dumps(config, default=_json_value)
    except (TypeError, ValueError) as exc:
        bad = next((k for k, v in config.items() if not _is_json(v)), "?")
        raise InvalidTraceError(
            f"trace config value {bad!r} = {config.get(bad)!r} is not JSON ({exc}); "
            "store it as a str, int, float, bool, None, list or dict (numpy scalars and arrays are converted)"
        ) from None


def _is_json(v: Any) -> bool:
    try:
        json.dumps(v, default=_json_value)
    except (TypeError, ValueError):
        return False
    return True


def _check_config(config: Any, where: str) -> dict:
    if not isinstance(config, dict):
        raise InvalidTraceError(f"{where}: the config must be a JSON object (got a {type(config).__name__}); write traces with save_trace")
    mode = config.get("mode")
    if mode not in TRACE_MODES:
        raise InvalidTraceError(f"{where}: config mode is {mode!r}; it must be one of {list(TRACE_MODES)} (the decoding mode of the run)")
    return config


def _check_column_types(columns: Any, where: str) -> None:
    if not isinstance(columns, dict) or not columns:
        raise InvalidTraceError(f"{where}: columns must be a non-empty dict of name -> numpy array; build traces with otspec_gpu.decode")
    for name, arr in columns.items():
        if not isinstance(name, str) or not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
            kind = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
            raise InvalidTraceError(
                f"{where}: column {name!r} holds {kind}; every column must be a numpy array of numbers (bool, int or float)"
            )


def _check_record_shapes(cols: dict, where: str) -> None:
    """Dtypes, dimensions and the shared record length of the record columns (present by now)."""
    n = cols["tau"].shape[0] if cols["tau"].ndim else None
    for name, ndim in sorted({**_INT_RECORD, **_FLOAT_RECORD}.items(), key=lambda item: item[0] != "tau"):  # tau first
        arr = cols[name]
        kinds = "iu" if name in _INT_RECORD else "f"
        if arr.dtype.kind not in kinds or arr.ndim != ndim:
            want = "an integer" if kinds == "iu" else "a float"
            raise InvalidTraceError(
                f"{where}: column {name!r} has dtype {arr.dtype} and shape {arr.shape}; it must be {want} array with {ndim} dimension(s)"
            )
        if arr.shape[0] != n:
            raise InvalidTraceError(
                f"{where}: column {name!r} has {arr.shape[0]} records but 'tau' has {n}; every record column has one row per record"
            )
    g = cols["drafts"].shape[2]
    for side, rows in (("p", g + 1), ("q", g)):
        ids, top, tail = cols[f"{side}_top_ids"], cols[f"{side}_top"], cols[f"{side}_tail"]
        if ids.shape[1] != rows or top.shape != ids.shape or tail.shape != ids.shape[:2]:
            raise InvalidTraceError(
                f"{where}: {side}_top_ids {ids.shape}, {side}_top {top.shape}, {side}_tail {tail.shape} do not match drafts "
                f"{cols['drafts'].shape}; they must be (n, {rows}, K), (n, {rows}, K), (n, {rows})"
            )
    for name in _OPTIONAL_INT_RECORD:
        if name in cols and (cols[name].dtype.kind not in "iu" or cols[name].shape != (n,)):
            raise InvalidTraceError(
                f"{where}: column {name!r} has dtype {cols[name].dtype} and shape {cols[name].shape}; it must be an integer array of shape ({n},)"
            )
    for name in _NON_NEGATIVE:
        if name in cols and cols[name].size and cols[name].min() < 0:
            raise InvalidTraceError(f"{where}: column {name!r} has a negative entry ({cols[name].min()}); counts and token ids are >= 0")


def _check_columns(cols: dict, where: str) -> None:
    """The schema of the module docstring; raises :class:`InvalidTraceError` at the first defect."""
    required = list(_INT_RECORD) + list(_FLOAT_RECORD) + [f"round_t_{p}" for p in TRACE_PHASES]
    missing = [c for c in required if c not in cols]
    if missing:
        raise InvalidTraceError(
            f"{where} lacks the column(s) {missing}; a trace has every column of otspec.io's table (write it with otspec decode --trace)"
        )
    _check_record_shapes(cols, where)
    n = cols["tau"].shape[0]
    for name, arr in cols.items():
        if name.startswith("th_") and (arr.dtype.kind != "f" or arr.shape != (n,)):
            raise InvalidTraceError(f"{where}: theory column {name!r} has dtype {arr.dtype} and shape {arr.shape}; it must be float ({n},)")
    rounds = cols["round_t_draft"].shape
    for p in TRACE_PHASES:
        arr = cols[f"round_t_{p}"]
        if arr.dtype.kind != "f" or arr.ndim != 1 or arr.shape != rounds:
            raise InvalidTraceError(
                f"{where}: column 'round_t_{p}' has dtype {arr.dtype} and shape {arr.shape}; every round_t_<phase> is float of shape {rounds}"
            )


def _check_version(meta: dict, where: str) -> str:
    version = meta.get(TRACE_VERSION_KEY, "1.0")
    m = re.fullmatch(r"(\d+)\.(\d+)", version)
    if m is None:
        raise InvalidTraceError(f"{where}: format version {version!r} is not MAJOR.MINOR; the file is damaged or not an otspec trace")
    major = int(m.group(1))
    ours = int(TRACE_FORMAT_VERSION.split(".")[0])
    if major > ours:
        raise InvalidTraceError(
            f"{where} has trace format {version}, newer than the {TRACE_FORMAT_VERSION} this otspec reads; upgrade otspec to read it"
        )
    if major < 1:
        raise InvalidTraceError(
            f"{where}: trace format {version} is not one otspec ever wrote; pass a file written by otspec decode --trace"
        )
    return version


def save_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as one safetensors file: contiguous arrays, the config as JSON metadata.

    The trace is checked first (the schema of the module docstring), so every file written reads
    back with :func:`load_trace`. numpy scalars and arrays in the config are stored as the exact
    Python values (``np.bool_`` as a bool, ``np.int64`` as an int, ``np.float64`` as a float);
    any other value that is not JSON is refused, never stringified. The file records
    :data:`TRACE_FORMAT_VERSION`.

    Parameters
    ----------
    trace : Trace
        The trace to write.
    path : str or Path
        Destination file (conventionally ``*.safetensors``); overwritten if it exists. Its folder
        must exist.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    InvalidTraceError
        If a column is missing or malformed (wrong dtype, shape or length, object dtype), the
        config has no known ``mode`` or holds a value that is not JSON.
    InputFileError
        If the folder of ``path`` does not exist or the file cannot be written.

    Examples
    --------
    >>> import os, tempfile
    >>> from otspec.io import load_trace
    >>> f = os.path.join(tempfile.mkdtemp(), "run.safetensors")
    >>> t = load_trace(save_trace(_example_trace(), f))
    >>> t.config, t.n_records, t.theory_columns()
    ({'mode': 'chain', 'gamma': 2, 'greedy': True}, 2, ['expected'])
    """
    from safetensors.numpy import save_file

    path = Path(path)
    where = f"trace to write to {str(path)!r}"
    _check_column_types(trace.columns, where)
    _check_columns(trace.columns, where)
    _check_config(json.loads(_config_json(trace.config)), where)
    if not path.parent.is_dir():
        raise InputFileError(f"cannot write trace {str(path)!r}: the folder {str(path.parent)!r} does not exist; create it first")
    arrays = {k: np.ascontiguousarray(v) for k, v in trace.columns.items()}
    metadata = {TRACE_METADATA_KEY: _config_json(trace.config), TRACE_VERSION_KEY: TRACE_FORMAT_VERSION}
    try:
        save_file(arrays, str(path), metadata=metadata)
    except Exception as exc:  # safetensors raises its own error types (a folder, no permission, ...)
        raise InputFileError(f"cannot write trace {str(path)!r} ({type(exc).__name__}: {exc}); pass a writable file path") from None
    return path


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by :func:`save_trace` (numpy and safetensors only; no torch).

    The file is checked against the format (module docstring): version, metadata, every column.

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
        If the file does not exist, cannot be read as safetensors, or is not an otspec trace (no
        :data:`TRACE_METADATA_KEY` metadata).
    InvalidTraceError
        (an ``InputFileError``) If it is an otspec trace that breaks the format: a newer major
        version, metadata that is not a JSON object, an unknown mode, a missing or malformed column.
    """
    from safetensors import safe_open

    path = Path(path)
    where = f"trace {str(path)!r}"
    if not path.is_file():
        raise InputFileError(f"trace file {str(path)!r} does not exist; write one with `otspec decode --trace FILE`")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            cols = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    except Exception as exc:  # safetensors raises its own error types
        raise InputFileError(f"cannot read trace {str(path)!r} ({exc}); pass a file written by otspec decode --trace") from None
    if TRACE_METADATA_KEY not in meta:
        raise InputFileError(
            f"{str(path)!r} is a safetensors file but not an otspec decoding trace (no {TRACE_METADATA_KEY!r} metadata); "
            "pass a file written by otspec decode --trace"
        )
    _check_version(meta, where)
    try:
        config = json.loads(meta[TRACE_METADATA_KEY])
    except json.JSONDecodeError as exc:
        raise InvalidTraceError(f"{where}: its {TRACE_METADATA_KEY!r} metadata is not valid JSON ({exc}); the file is damaged") from None
    _check_config(config, where)
    _check_column_types(cols, where)
    _check_columns(cols, where)
    return Trace(cols, config)


def _example_trace() -> Trace:
    """A two-record chain trace (gamma = 2, K = 1) for the examples."""
    cols = {name: np.zeros((2,) + (1,) * (ndim - 1), dtype=np.int64) for name, ndim in _INT_RECORD.items()}
    cols.update(drafts=np.zeros((2, 1, 2), np.int64), p_top_ids=np.zeros((2, 3, 1), np.int64), q_top_ids=np.zeros((2, 2, 1), np.int64))
    cols.update(p_top=np.ones((2, 3, 1)), p_tail=np.zeros((2, 3)), q_top=np.ones((2, 2, 1)), q_tail=np.zeros((2, 2)))
    cols.update({f"round_t_{p}": np.zeros(2) for p in TRACE_PHASES}, th_expected=np.array([1.5, 2.0]))
    return Trace(cols, {"mode": "chain", "gamma": np.int64(2), "greedy": np.bool_(True)})

"""The output folder of a corpus run: Parquet shards, written atomically, checked on resume.

Layout of ``OUT/``:

``corpus.json``
    The manifest: the run's configuration (models, processing, laws, k, verifiers, the inputs'
    fingerprint, shard size) and, under the key ``"shards"``, the number of shards and, for each
    finished shard, its row count and the SHA-256 of its file. Engines and worker counts are not
    part of it: they do not change the numbers. It is replaced atomically (temporary file, then
    rename) after every shard.
``shard-00000.parquet``, ``shard-00001.parquet``, ...
    One row per position of the documents ``[i * S, (i + 1) * S)`` (``S`` documents per shard), in
    document then position order. A shard is written to a temporary name and renamed when
    complete, so a file under its final name was whole when written.

A run started on a folder that holds the same configuration keeps the finished shards and computes
only the missing ones (a killed run resumes where it stopped and gives the same result). A shard
is kept only if it is intact: its checksum is the one recorded when it was written, or, for a
shard written just before a kill (renamed, not yet recorded), it reads as Parquet with this run's
columns and row count. A damaged shard (truncated, emptied, rewritten) is deleted and recomputed
with a :class:`DamagedShardWarning`. What cannot belong to the run is refused with a
:class:`~otspec.errors.CorpusInputError` before any work: a manifest that is not otspec's JSON, a
file named ``shard-*.parquet`` that is not a shard name of the run, a different configuration.
``overwrite=True`` starts afresh. :func:`check_output` checks ``--out`` itself (a folder, or
creatable; writable) before the inputs are read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from otspec.errors import CorpusInputError
from otspec.plugin import require

__all__ = [
    "MANIFEST",
    "CORPUS_INSTALL",
    "HEAD_COLUMNS",
    "DamagedShardWarning",
    "require_pyarrow",
    "shard_path",
    "check_output",
    "prepare_output",
    "write_shard",
    "kept_shards",
    "read_results",
]

MANIFEST = "corpus.json"
CORPUS_INSTALL = 'pip install "otspec[corpus]"'
#: The columns every shard starts with; the quantity columns (:func:`~otspec_gpu.corpus.solvers.columns_for`) follow.
HEAD_COLUMNS = ("doc", "domain", "doc_index", "position", "token")
_SHARD_NAME = re.compile(r"^shard-(\d+)\.parquet$")
_STATE = "shards"  # the manifest key of the shard records (the rest is the configuration)


class DamagedShardWarning(UserWarning):
    """A finished shard found damaged on resume (unreadable, wrong columns or rows, checksum
    changed); it is deleted and computed again."""


def require_pyarrow() -> Any:
    """Import pyarrow (and pyarrow.parquet), or say how to install it.

    Returns
    -------
    module
        ``pyarrow``.

    Raises
    ------
    ImportError
        If pyarrow is not installed (the message has the install command).
    """
    require("pyarrow.parquet", "corpus", needed_by="otspec corpus (Parquet shards)", install=CORPUS_INSTALL)
    import pyarrow

    return pyarrow


def shard_path(out: str | Path, i: int) -> Path:
    """The path of shard ``i`` in ``out``.

    Parameters
    ----------
    out : str or Path
        The output folder.
    i : int
        Shard index.

    Returns
    -------
    Path
        ``out / "shard-{i:05d}.parquet"``.

    Examples
    --------
    >>> shard_path("runs/he", 3).name
    'shard-00003.parquet'
    """
    return Path(out) / f"shard-{i:05d}.parquet"


def _shard_index(f: Path) -> int | None:
    """The index of a canonical shard name (``shard-00003.parquet`` -> 3), else None."""
    m = _SHARD_NAME.match(f.name)
    if m is None or shard_path(f.parent, int(m.group(1))).name != f.name:
        return None
    return int(m.group(1))


def _redo(out: Path) -> str:
    return f"pass a new --out, or --overwrite to replace the run in {str(out)!r}"


def _read_manifest(out: Path) -> dict | None:
    """The manifest of ``out`` (None when absent), or :class:`CorpusInputError` if it is not one."""
    man = out / MANIFEST
    if not man.exists():
        return None
    try:
        obj = json.loads(man.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusInputError(f"{man}: cannot be read ({type(exc).__name__}: {exc}); {_redo(out)}") from None
    except json.JSONDecodeError as exc:
        raise CorpusInputError(
            f"{man}: not valid JSON ({exc.msg} at line {exc.lineno}): damaged, or not written by otspec corpus, so its "
            f"shards cannot be matched to a configuration; {_redo(out)}"
        ) from None
    state = obj.get(_STATE, {}) if isinstance(obj, dict) else None
    if not isinstance(state, dict) or not isinstance(state.get("written", {}), dict):
        raise CorpusInputError(
            f"{man}: not an otspec corpus manifest (a JSON object with a {_STATE!r} object is required, got {str(obj)[:60]}); {_redo(out)}"
        )
    return obj


def _foreign(out: Path) -> list[Path]:
    """Files named like shards (``shard-*.parquet``) whose name is not a shard name."""
    return [f for f in sorted(out.glob("shard-*.parquet")) if _shard_index(f) is None]


def check_output(out: str | Path, *, overwrite: bool = False) -> Path:
    """Check an output folder before any work: a folder (or creatable), writable, and, unless
    ``overwrite``, holding nothing that cannot belong to a corpus run.

    Parameters
    ----------
    out : str or Path
        The folder (it need not exist yet).
    overwrite : bool
        The run will replace what the folder holds (its manifest and shards are not checked).

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    CorpusInputError
        If ``out`` is a file, cannot be created (an ancestor is a file or not writable), is not
        writable, holds a manifest that is not valid JSON or not otspec's, or holds a file named
        ``shard-*.parquet`` that is not a shard name (``shard-00000.parquet``...).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CorpusInputError(f"--out {str(out)!r} is a file; --out must be a folder (created if missing): pass a folder path")
    if not out.exists():
        anc = next((a for a in out.absolute().parents if a.exists()), None)
        if anc is None or not anc.is_dir():
            raise CorpusInputError(
                f"--out {str(out)!r} cannot be created: {str(anc)!r} is a file, not a folder; pass a path under a folder"
            )
        if not os.access(anc, os.W_OK | os.X_OK):
            raise CorpusInputError(f"--out {str(out)!r} cannot be created: {str(anc)!r} is not writable; pass a folder you can write to")
        return out
    if not os.access(out, os.W_OK | os.X_OK):
        raise CorpusInputError(f"--out {str(out)!r} is not writable; pass a folder you can write to")
    if not overwrite:
        _read_manifest(out)
        stray = _foreign(out)
        if stray:
            raise CorpusInputError(
                f"{stray[0]}: not a shard of otspec corpus (shards are named shard-00000.parquet, shard-00001.parquet, ...), "
                f"so the folder holds something else; move it out of {str(out)!r}, or pass a new --out"
            )
    return out


def _differences(a: dict, b: dict) -> list[str]:
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_manifest(out: Path, manifest: dict) -> None:
    """Replace the manifest atomically (a kill leaves the old one or the new one, never half)."""
    man = out / MANIFEST
    tmp = man.with_name(f".{MANIFEST}.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, man)


def _damage(path: Path, rows: int, columns: Sequence[str], record: Any) -> tuple[str | None, str]:
    """Why shard ``path`` cannot be kept (None when intact), and its SHA-256: a recorded shard is
    checked by its checksum, an unrecorded one by reading it."""
    digest = _sha256(path)
    if isinstance(record, dict) and "sha256" in record:
        if record.get("rows") != rows:
            return f"its record says {record.get('rows')!r} rows where this run's shard has {rows}", digest
        if digest != record["sha256"]:
            return f"its SHA-256 {digest[:12]}... differs from {str(record['sha256'])[:12]}... recorded when it was written", digest
        return None, digest
    import pyarrow.parquet as pq

    try:  # written just before a kill (renamed, not recorded), or by an older otspec: read it whole
        tab = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 -- pyarrow raises several types for a damaged file; each means "damaged"
        return f"cannot be read as Parquet ({type(exc).__name__}: {str(exc)[:80]})", digest
    if tab.column_names != list(columns):
        miss = [c for c in columns if c not in tab.column_names]
        extra = [c for c in tab.column_names if c not in columns]
        return f"its columns are not this run's (missing {miss[:4]}, extra {extra[:4]})", digest
    if tab.num_rows != rows:
        return f"it has {tab.num_rows} rows where this run's shard has {rows}", digest
    return None, digest


def prepare_output(out: str | Path, config: dict, rows: Sequence[int], columns: Sequence[str], *, overwrite: bool = False) -> set[int]:
    """Create (or reopen) the output folder and return the shards already finished and intact.

    Parameters
    ----------
    out : str or Path
        The folder (created if missing).
    config : dict
        The run configuration (JSON-able); stored in ``corpus.json``.
    rows : sequence of int
        Rows of each shard of the run (its length is the number of shards).
    columns : sequence of str
        The columns of every shard, in order.
    overwrite : bool
        Delete the shards of an earlier run first (any configuration).

    Returns
    -------
    set of int
        Indices of the shards already written under this configuration and intact (skip them).
        A damaged one is deleted with a :class:`DamagedShardWarning` and is not in the set.

    Raises
    ------
    CorpusInputError
        What :func:`check_output` refuses; a run with another configuration, shards without a
        manifest, or a shard index beyond the run's shards (and not ``overwrite``); a folder that
        cannot be created.

    Warns
    -----
    DamagedShardWarning
        For each finished shard that is unreadable, has other columns or rows than the run's, or
        whose checksum differs from the recorded one (it is computed again).
    """
    out = check_output(out, overwrite=overwrite)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CorpusInputError(
            f"--out {str(out)!r} cannot be created ({type(exc).__name__}: {exc}); pass a folder you can write to"
        ) from None
    config = json.loads(json.dumps(config))
    n = len(rows)
    for tmp in out.glob(".shard-*.tmp"):  # a shard being written when the run was killed
        tmp.unlink()
    existing = sorted(out.glob("shard-*.parquet"))
    old = None if overwrite else _read_manifest(out)
    if overwrite:
        for f in existing:
            f.unlink()
        existing = []
    elif old is not None:
        old_config = {k: v for k, v in old.items() if k != _STATE}
        if old_config != config:
            diff = "; ".join(_differences(old_config, config))[:400]
            raise CorpusInputError(f"{out / MANIFEST}: the folder holds a run with another configuration ({diff}); {_redo(out)}")
    elif existing:
        raise CorpusInputError(f"{out}: holds shards but no {MANIFEST}, so they cannot be matched to a configuration; {_redo(out)}")
    beyond = [f for f in existing if _shard_index(f) >= n]
    if beyond:
        raise CorpusInputError(
            f"{beyond[0]}: shard index {_shard_index(beyond[0])} is beyond this run's {n} shards (0..{n - 1}), so it is not "
            f"from this run; move it out of {str(out)!r}, or {_redo(out)}"
        )
    recorded = (old or {}).get(_STATE, {}).get("written", {})
    written: dict[str, dict] = {}
    done = set()
    for f in existing:
        i = _shard_index(f)
        why, digest = _damage(f, int(rows[i]), columns, recorded.get(f"{i:05d}"))
        if why is None:
            done.add(i)
            written[f"{i:05d}"] = {"rows": int(rows[i]), "sha256": digest}
        else:
            warnings.warn(f"{f}: damaged shard, {why}; computing it again", DamagedShardWarning, stacklevel=3)
            f.unlink()
    _write_manifest(out, {**config, _STATE: {"total": n, "written": written}})
    return done


def write_shard(out: str | Path, i: int, columns: dict) -> Path:
    """Write shard ``i`` atomically (temporary file, then rename) and record it in the manifest.

    Parameters
    ----------
    out : str or Path
        The output folder.
    i : int
        Shard index.
    columns : dict of str to array_like
        Equal-length columns.

    Returns
    -------
    Path
        The shard's path.

    Notes
    -----
    The shard's row count and SHA-256 go into ``corpus.json`` after the rename (when the folder
    has one); a kill between the two leaves an unrecorded shard, which the next run checks by
    reading it (:func:`prepare_output`).
    """
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    final = shard_path(out, i)
    tmp = final.with_name(f".{final.stem}.tmp")
    table = pa.table(columns)
    pq.write_table(table, tmp)
    digest = _sha256(tmp)
    os.replace(tmp, final)
    man = _read_manifest(Path(out))
    if man is not None:
        man.setdefault(_STATE, {}).setdefault("written", {})[f"{i:05d}"] = {"rows": table.num_rows, "sha256": digest}
        _write_manifest(Path(out), man)
    return final


def kept_shards(out: str | Path) -> tuple[list[int], int | None]:
    """The shards of the run in ``out`` that are recorded as finished, and the run's shard count.

    Parameters
    ----------
    out : str or Path
        The output folder.

    Returns
    -------
    list of int
        Recorded shards whose file exists, in order (empty if there is no readable manifest).
    int or None
        The run's number of shards (None without a readable manifest).
    """
    try:
        man = _read_manifest(Path(out))
    except CorpusInputError:
        return [], None
    if man is None:
        return [], None
    state = man.get(_STATE, {})
    idx = sorted(int(k) for k in state.get("written", {}) if k.isdigit() and shard_path(out, int(k)).exists())
    total = state.get("total")
    return idx, total if isinstance(total, int) else None


def read_results(out: str | Path) -> Any:
    """Every shard of a run as one table, in shard order.

    Parameters
    ----------
    out : str or Path
        The output folder.

    Returns
    -------
    pyarrow.Table
        All rows.

    Raises
    ------
    CorpusInputError
        If the folder holds no shard, a file named ``shard-*.parquet`` that is not a shard name, a
        shard whose checksum differs from the recorded one, or one that cannot be read.
    """
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    out = Path(out)
    stray = _foreign(out)
    if stray:
        raise CorpusInputError(
            f"{stray[0]}: not a shard of otspec corpus (shards are named shard-00000.parquet, ...); move it out of {str(out)!r}"
        )
    files = sorted(out.glob("shard-*.parquet"), key=_shard_index)
    if not files:
        raise CorpusInputError(f"{out}: no shard-*.parquet file; run otspec corpus with --out {out} first")
    man = _read_manifest(out) or {}
    recorded = man.get(_STATE, {}).get("written", {})
    tables = []
    for f in files:
        rec = recorded.get(f"{_shard_index(f):05d}")
        if isinstance(rec, dict) and rec.get("sha256") not in (None, _sha256(f)):
            raise CorpusInputError(
                f"{f}: damaged (its checksum differs from the one recorded when it was written); run the same otspec corpus command again to recompute it"
            )
        try:
            tables.append(pq.read_table(f))
        except Exception as exc:  # noqa: BLE001 -- any pyarrow failure on a shard means it is damaged
            raise CorpusInputError(
                f"{f}: cannot be read as Parquet ({type(exc).__name__}: {str(exc)[:80]}); run the same otspec corpus command again to recompute it"
            ) from None
    return pa.concat_tables(tables)

"""The output folder of a corpus run: Parquet shards, written atomically, and resuming from them.

Layout of ``OUT/``:

``corpus.json``
    The run's configuration (models, processing, laws, k, verifiers, the inputs' fingerprint,
    shard size). Engines and worker counts are not part of it: they do not change the numbers.
``shard-00000.parquet``, ``shard-00001.parquet``, ...
    One row per position of the documents ``[i * S, (i + 1) * S)`` (``S`` documents per shard), in
    document then position order. A shard is written to a temporary name and renamed when
    complete, so a file under its final name is always whole.

A run started on a folder that holds the same configuration keeps the finished shards and computes
only the missing ones (a killed run resumes where it stopped and gives the same result); a
different configuration is refused rather than mixed, and ``overwrite=True`` starts afresh.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from otspec.errors import CorpusInputError

__all__ = ["MANIFEST", "CORPUS_INSTALL", "require_pyarrow", "shard_path", "prepare_output", "write_shard", "read_results"]

MANIFEST = "corpus.json"
CORPUS_INSTALL = 'pip install "otspec[corpus]"'


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
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ImportError(f"otspec corpus writes Parquet with pyarrow; install it with `{CORPUS_INSTALL}`") from None
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
    """
    return Path(out) / f"shard-{i:05d}.parquet"


def _differences(a: dict, b: dict) -> list[str]:
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


def prepare_output(out: str | Path, config: dict, n_shards: int, *, overwrite: bool = False) -> set[int]:
    """Create (or reopen) the output folder and return the shards already finished.

    Parameters
    ----------
    out : str or Path
        The folder (created if missing).
    config : dict
        The run configuration (JSON-able); stored as ``corpus.json``.
    n_shards : int
        Number of shards of the run.
    overwrite : bool
        Delete the shards of an earlier run first (any configuration).

    Returns
    -------
    set of int
        Indices of the shards already written under this configuration (skip them).

    Raises
    ------
    CorpusInputError
        If ``out`` is a file, or holds a run with another configuration (and not ``overwrite``).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CorpusInputError(f"--out {str(out)!r} is a file; pass a folder")
    out.mkdir(parents=True, exist_ok=True)
    man = out / MANIFEST
    existing = sorted(out.glob("shard-*.parquet"))
    for tmp in out.glob(".shard-*.tmp"):  # a shard being written when the run was killed
        tmp.unlink()
    if man.exists() and not overwrite:
        old = json.loads(man.read_text())
        if old != json.loads(json.dumps(config)):
            diff = "; ".join(_differences(old, json.loads(json.dumps(config))))[:400]
            raise CorpusInputError(
                f"{man}: the folder holds a run with another configuration ({diff}); pass a new --out, or --overwrite to replace it"
            )
    elif existing and not overwrite:
        raise CorpusInputError(f"{out}: holds shards but no {MANIFEST}; pass a new --out, or --overwrite to replace them")
    if overwrite:
        for f in existing:
            f.unlink()
        existing = []
    man.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    done = set()
    for f in existing:
        i = int(f.stem.split("-")[1])
        if i < n_shards:
            done.add(i)
    return done


def write_shard(out: str | Path, i: int, columns: dict) -> Path:
    """Write shard ``i`` atomically (temporary file, then rename).

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
    """
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    final = shard_path(out, i)
    tmp = final.with_name(f".{final.stem}.tmp")
    pq.write_table(pa.table(columns), tmp)
    os.replace(tmp, final)
    return final


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
        If the folder holds no shard.
    """
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    files = sorted(Path(out).glob("shard-*.parquet"))
    if not files:
        raise CorpusInputError(f"{out}: no shard-*.parquet file; run otspec corpus with --out {out} first")
    return pa.concat_tables([pq.read_table(f) for f in files])

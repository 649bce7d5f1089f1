"""The corpus's Parquet shards and manifest: :mod:`otspec.corpus_shards` (torch-free, in the core so
that ``otspec speedup --corpus`` reads a run without the torch side); this name stays for the corpus package."""

from otspec.corpus_shards import (
    CORPUS_INSTALL,
    HEAD_COLUMNS,
    MANIFEST,
    DamagedShardWarning,
    check_output,
    kept_shards,
    prepare_output,
    read_results,
    require_pyarrow,
    shard_path,
    write_shard,
)

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

r"""Dataset-level bounds: the optimal acceptance and the verifiers' at every position of a corpus.

Given texts and a target/draft pair (:mod:`otspec_gpu.models`), every document is scored once per
model with teacher forcing (:mod:`~otspec_gpu.corpus.scoring`), and at every position the exact
optima for the requested draft laws and numbers of drafts, each verifier's acceptance and
:math:`1 - d_{TV}` are computed (:mod:`~otspec_gpu.corpus.solvers`). Logged top-K traces of other
engines (and otspec's own decoding traces) get certified intervals instead
(:mod:`otspec.truncation`). Results are Parquet shards, one row per position
(:mod:`~otspec_gpu.corpus.shards`, resumable), summarized per domain with document-clustered
bootstrap intervals (:mod:`~otspec_gpu.corpus.summary`). Engines: one local process
(:mod:`~otspec_gpu.corpus.local_engine`) or Ray Data (:mod:`~otspec_gpu.corpus.ray_engine`).
The command line is ``otspec corpus`` (:doc:`corpus`).

Modules: :mod:`~otspec_gpu.corpus.inputs` (texts, JSONL, HumanEval, logged traces),
:mod:`~otspec_gpu.corpus.scoring`, :mod:`~otspec_gpu.corpus.solvers`,
:mod:`~otspec_gpu.corpus.local_engine`, :mod:`~otspec_gpu.corpus.ray_engine`,
:mod:`~otspec_gpu.corpus.shards`, :mod:`~otspec_gpu.corpus.summary`, :mod:`~otspec_gpu.corpus.run`.
"""

from otspec_gpu.corpus.inputs import Document, LoggedStep, read_logged, read_source, read_sources
from otspec_gpu.corpus.run import ENGINES, RunResult, run_corpus, run_logged
from otspec_gpu.corpus.scoring import Processing, score_document
from otspec_gpu.corpus.shards import read_results
from otspec_gpu.corpus.solvers import SolverSpec, columns_for, solve_logged, solve_rows
from otspec_gpu.corpus.summary import CorpusSummary, plot_summary, summarize

__all__ = [
    "Document",
    "LoggedStep",
    "read_source",
    "read_sources",
    "read_logged",
    "Processing",
    "score_document",
    "SolverSpec",
    "solve_rows",
    "solve_logged",
    "columns_for",
    "ENGINES",
    "RunResult",
    "run_corpus",
    "run_logged",
    "read_results",
    "CorpusSummary",
    "summarize",
    "plot_summary",
]

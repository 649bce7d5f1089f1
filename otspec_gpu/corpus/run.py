"""A corpus run end to end: read and tokenize, plan the shards, run an engine, report.

:func:`run_corpus` scores texts with a target/draft pair; :func:`run_logged` bounds logged top-K
traces (no model). Both write the same shard layout (:mod:`otspec_gpu.corpus.shards`) and resume
from it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from otspec.errors import CorpusInputError, InvalidOptionError
from otspec_gpu.corpus.inputs import Document, read_logged_files, read_sources
from otspec_gpu.corpus.scoring import Processing, check_pair, load_model, tokenize
from otspec_gpu.corpus.shards import HEAD_COLUMNS, check_output, kept_shards, prepare_output, require_pyarrow, write_shard
from otspec_gpu.corpus.solvers import SolverSpec, columns_for, solve_logged

__all__ = ["ENGINES", "RunPlan", "RunResult", "CorpusInterrupted", "run_corpus", "run_logged", "DEFAULT_SHARD_DOCS"]

ENGINES = ("local", "ray")
#: Documents per shard: the unit of resumption (a killed run loses at most one shard's work per worker).
DEFAULT_SHARD_DOCS = 16


@dataclass
class RunPlan:
    """What a run computes: the documents, their tokens, the shards and what is done already.

    Attributes
    ----------
    documents : list of Document
        The corpus, in order (document index = position in this list).
    token_ids : list of list of int
        Each document's tokens.
    shard_docs : int
        Documents per shard.
    done : set of int
        Shards already written.
    out : Path
        The output folder.
    spec : SolverSpec
        What is solved at each position.
    processing : Processing
        Logits processing of both models.
    tree : otspec_gpu.corpus.trees.TreeSpec or None
        Tree mode: the certified interval for the tree optimum at the evaluated positions.
    """

    documents: list
    token_ids: list
    shard_docs: int
    done: set
    out: Path
    spec: SolverSpec
    processing: Processing = field(default_factory=Processing)
    tree: Any = None

    @property
    def n_shards(self) -> int:
        """Number of shards."""
        return -(-len(self.documents) // self.shard_docs)

    def shard_documents(self, s: int) -> range:
        """Document indices of shard ``s``.

        Parameters
        ----------
        s : int
            Shard index.

        Returns
        -------
        range
            ``[s * shard_docs, min((s + 1) * shard_docs, n))``.
        """
        return range(s * self.shard_docs, min((s + 1) * self.shard_docs, len(self.documents)))

    def shard_positions(self, s: int) -> int:
        """Positions (rows) of shard ``s``.

        Parameters
        ----------
        s : int
            Shard index.

        Returns
        -------
        int
            Sum of ``len(tokens) - 1`` over its documents.
        """
        return sum(len(self.token_ids[i]) - 1 for i in self.shard_documents(s))

    def todo_shards(self) -> list[int]:
        """Shards still to compute, in order.

        Returns
        -------
        list of int
            Indices not in :attr:`done`.
        """
        return [s for s in range(self.n_shards) if s not in self.done]


@dataclass(frozen=True)
class RunResult:
    """What a run did.

    Attributes
    ----------
    out : Path
        The output folder.
    n_documents, n_positions : int
        Corpus size.
    n_shards, shards_computed : int
        Shards of the run and how many this call computed (the rest were resumed).
    seconds : float
        Wall-clock time of the call.
    engine : str
        ``"local"``, ``"ray"``, ``"logged"`` or ``"logged-ray"``.
    timings : dict
        Engine timings (local: ``score_s``, ``solve_s``).
    """

    out: Path
    n_documents: int
    n_positions: int
    n_shards: int
    shards_computed: int
    seconds: float
    engine: str
    timings: dict = field(default_factory=dict)


class CorpusInterrupted(KeyboardInterrupt):
    """A corpus run stopped by Ctrl-C (a ``KeyboardInterrupt``) while computing shards: what it kept.

    The finished shards are recorded in the manifest, so the same call again (without
    ``overwrite``) resumes exactly where the run stopped.

    Parameters
    ----------
    out : Path
        The output folder.
    kept : list of int
        Shards finished and recorded (this call's and earlier ones), in order.
    n_shards : int or None
        The run's number of shards.

    Examples
    --------
    >>> exc = CorpusInterrupted(Path("runs/he"), [0, 1], 4)
    >>> isinstance(exc, KeyboardInterrupt), str(exc)
    (True, "interrupted: 2 of 4 shards kept in 'runs/he'; the same call resumes from them")
    """

    def __init__(self, out: Path, kept: list[int], n_shards: int | None):
        self.out, self.kept, self.n_shards = out, list(kept), n_shards
        total = "?" if n_shards is None else n_shards
        super().__init__(f"interrupted: {len(self.kept)} of {total} shards kept in {str(out)!r}; the same call resumes from them")


def _fingerprint(items: Sequence[Any]) -> str:
    h = hashlib.sha256()
    for it in items:
        h.update(json.dumps(it, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def _spec_config(spec: SolverSpec) -> dict:
    return dict(laws=list(spec.laws), ks=list(spec.ks), verifiers=list(spec.verifiers), mc_samples=spec.mc_samples, seed=spec.seed)


# long-function: the public entry: validation, resume checks and the engine call in order
def run_corpus(
    sources: Sequence[str] | Sequence[Document],
    *,
    target: Any,
    draft: Any,
    out: str | Path,
    spec: SolverSpec | None = None,
    processing: Processing | None = None,
    engine: str = "local",
    shard_docs: int = DEFAULT_SHARD_DOCS,
    max_tokens: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    ray_address: str | None = None,
    workers: int | None = None,
    field: str = "text",
    after_shard: Callable[[int], None] | None = None,
    tree: Any = None,
) -> RunResult:
    """Score a corpus with a target/draft pair and solve every position; write Parquet shards.

    Parameters
    ----------
    sources : sequence of str or of Document
        Sources (:func:`~otspec_gpu.corpus.inputs.read_source`: files, ``humaneval``, ``prompts``)
        or documents.
    target, draft : str or otspec_gpu.models.LM
        Model names (:func:`otspec_gpu.models.load`) or loaded models (same vocabulary).
    out : str or Path
        Output folder (:mod:`~otspec_gpu.corpus.shards`); a run there with the same configuration
        is resumed.
    spec : SolverSpec, optional
        Laws, k, verifiers (default :class:`SolverSpec`).
    processing : Processing, optional
        Temperature / top-k / top-p of both models (default: temperature 1).
    engine : {"local", "ray"}
        One process, or Ray Data (:mod:`~otspec_gpu.corpus.ray_engine`).
    shard_docs : int
        Documents per shard.
    max_tokens : int, optional
        Keep only the first ``max_tokens`` tokens of each document.
    overwrite : bool
        Replace an earlier run in ``out``.
    progress : bool
        Progress bar on stderr (local engine).
    ray_address : str, optional
        Ray engine: join this cluster (``"auto"`` or ``"ray://host:10001"``); default: start a
        local Ray with the machine's cores.
    workers : int, optional
        Ray engine: scoring actors (default: one per GPU of the cluster, else one per CPU but one).
    field : str
        JSONL key of the text.
    after_shard : callable, optional
        Called with each shard index once written (local engine).
    tree : otspec_gpu.corpus.trees.TreeSpec, optional
        Tree mode (local engine): at every ``stride``-th position draft ``k`` sequences of length
        ``gamma``, and add the certified interval for the tree optimum there (the columns
        :data:`~otspec_gpu.corpus.trees.TREE_COLUMNS`; :doc:`corpus`).

    Returns
    -------
    RunResult
        Sizes, shards computed, seconds, timings.

    Raises
    ------
    CorpusInputError
        Bad input (names the file and line); ``out`` is a file, cannot be created or is not
        writable (checked before the models load); ``out`` holds a run with another configuration,
        a manifest that is not otspec's JSON, or a file named like a shard that is not one of the
        run's. Raised before anything is written, so finished shards are never lost.

    IncompatibleModelsError
        If the models' vocabularies differ.
    InvalidOptionError
        If ``engine``, ``shard_docs`` or ``max_tokens`` is invalid.
    ImportError
        If pyarrow (or, for ``engine="ray"``, Ray) is missing (the message has the install command).
    CorpusInterrupted
        On Ctrl-C while shards are computed (a ``KeyboardInterrupt`` saying which shards were kept).

    Warns
    -----
    DamagedShardWarning
        When resuming, for each finished shard found damaged (it is computed again;
        :func:`~otspec_gpu.corpus.shards.prepare_output`).
    """
    # Over 80 lines only through this docstring (every option and the output layout).
    t0 = time.perf_counter()
    if engine not in ENGINES:
        raise InvalidOptionError(f"engine must be one of {ENGINES} (got {engine!r}); pick one of those")
    if int(shard_docs) != shard_docs or shard_docs < 1:
        raise InvalidOptionError(f"shard_docs must be an integer >= 1 (got {shard_docs!r}); pass e.g. {DEFAULT_SHARD_DOCS}")
    if max_tokens is not None and (int(max_tokens) != max_tokens or max_tokens < 2):
        raise InvalidOptionError(f"max_tokens must be an integer >= 2 (got {max_tokens!r}); pass e.g. 512")
    if tree is not None and engine != "local":
        raise InvalidOptionError(f"the tree mode runs on the local engine (got engine={engine!r}); use engine='local'")
    require_pyarrow()
    check_output(out, overwrite=overwrite)  # before the models load and the inputs are read
    spec = spec or SolverSpec()
    processing = processing or Processing()
    docs = list(sources) if sources and isinstance(sources[0], Document) else read_sources(list(sources), field=field)
    tgt, drf = load_model(target), load_model(draft)
    check_pair(tgt, drf)
    ids = [tokenize(d, tgt)[: max_tokens or None] for d in docs]
    config = dict(
        kind="models",
        target=tgt.name,
        draft=drf.name,
        processing=dict(temperature=processing.temperature, top_k=processing.top_k, top_p=processing.top_p),
        spec=_spec_config(spec),
        shard_docs=int(shard_docs),
        max_tokens=max_tokens,
        inputs=_fingerprint([(d.doc_id, d.domain, t) for d, t in zip(docs, ids, strict=True)]),
        n_documents=len(docs),
    )
    tree_cols: list = []
    if tree is not None:  # only then: a run without the tree mode keeps its configuration and columns
        from otspec_gpu.corpus.trees import TREE_COLUMNS

        config["tree"] = tree.config()
        tree_cols = list(TREE_COLUMNS)
    plan = RunPlan(docs, ids, int(shard_docs), set(), Path(out), spec, processing, tree)
    rows = [plan.shard_positions(s) for s in range(plan.n_shards)]
    plan.done = prepare_output(out, config, rows, [*HEAD_COLUMNS, *columns_for(spec), *tree_cols], overwrite=overwrite)
    todo = len(plan.todo_shards())
    try:
        if engine == "local":
            from otspec_gpu.corpus.local_engine import run_local

            timings = run_local(plan, tgt, drf, progress=progress, after_shard=after_shard)
        else:
            from otspec_gpu.corpus.ray_engine import run_ray

            tgt_arg, drf_arg = (target if isinstance(target, str) else tgt), (draft if isinstance(draft, str) else drf)
            timings = run_ray(plan, tgt_arg, drf_arg, address=ray_address, workers=workers)
    except KeyboardInterrupt as exc:
        raise CorpusInterrupted(Path(out), *kept_shards(out)) from exc
    n_pos = sum(len(t) - 1 for t in ids)
    return RunResult(Path(out), len(docs), n_pos, plan.n_shards, todo, time.perf_counter() - t0, engine, timings)


# long-function: the public entry: validation, resume checks and the solver call in order
def run_logged(
    paths: Sequence[str | Path],
    *,
    out: str | Path,
    spec: SolverSpec | None = None,
    shard_steps: int = 4096,
    vocab_size: int | None = None,
    overwrite: bool = False,
    engine: str = "local",
    ray_address: str | None = None,
) -> RunResult:
    """Certified intervals for logged top-K traces (no model): JSONL logs of serving engines or
    otspec decoding traces (:func:`~otspec_gpu.corpus.inputs.read_logged`).

    Parameters
    ----------
    paths : sequence of str or Path
        The logs.
    out : str or Path
        Output folder (resumed like :func:`run_corpus`).
    spec : SolverSpec, optional
        Its ``iid`` / ``greedy`` laws and ``ks`` are bounded.
    shard_steps : int
        Steps per shard.
    vocab_size : int, optional
        Check every logged id against it.
    overwrite : bool
        Replace an earlier run in ``out``.
    engine : {"local", "ray"}
        Solve in this process, or on Ray Data (the steps as a Ray dataset, the intervals in
        ``map_batches``: :func:`~otspec_gpu.corpus.ray_engine.run_ray_logged`); rows are
        bit-identical.
    ray_address : str, optional
        Ray engine: join this cluster; default: start a local Ray with the machine's cores.

    Returns
    -------
    RunResult
        With ``engine="logged"`` or ``"logged-ray"`` (documents = distinct ``doc`` values).

    Raises
    ------
    CorpusInputError
        A malformed log (file, line and field named), or ``out`` is unusable or holds another run
        (as for :func:`run_corpus`); raised before anything is written.

    InvalidOptionError
        If ``shard_steps`` is not a positive integer or ``engine`` is not one of :data:`ENGINES`.
    ImportError
        If ``engine="ray"`` and Ray is missing (the message has the install command).
    CorpusInterrupted
        On Ctrl-C while shards are computed.

    Warns
    -----
    DamagedShardWarning
        When resuming, for each finished shard found damaged (it is computed again).
    """
    # Over 80 lines only through this docstring (every option and the output layout).
    t0 = time.perf_counter()
    if int(shard_steps) != shard_steps or shard_steps < 1:
        raise InvalidOptionError(f"shard_steps must be an integer >= 1 (got {shard_steps!r}); pass e.g. 4096")
    if engine not in ENGINES:
        raise InvalidOptionError(f"engine must be one of {ENGINES} (got {engine!r}); pick one of those")
    require_pyarrow()
    check_output(out, overwrite=overwrite)  # before the logs are read
    spec = spec or SolverSpec(verifiers=())
    if not paths:
        raise CorpusInputError("no input: pass at least one logged-trace file")
    steps = read_logged_files(paths, V=vocab_size)
    config = dict(
        kind="logged",
        spec=_spec_config(spec),
        shard_steps=int(shard_steps),
        inputs=_fingerprint(
            [
                (
                    s.doc_id,
                    s.domain,
                    s.position,
                    s.pair.p_ids.tolist(),
                    s.pair.p_vals.tolist(),
                    s.pair.q_ids.tolist(),
                    s.pair.q_vals.tolist(),
                )
                for s in steps
            ]
        ),
        n_steps=len(steps),
    )
    n_shards = -(-len(steps) // shard_steps)
    rows = [min(shard_steps, len(steps) - sh * shard_steps) for sh in range(n_shards)]
    done = prepare_output(out, config, rows, [*HEAD_COLUMNS, *columns_for(spec, logged=True)], overwrite=overwrite)
    doc_index = {d: i for i, d in enumerate(dict.fromkeys(s.doc_id for s in steps))}
    todo = [sh for sh in range(n_shards) if sh not in done]
    timings: dict = {}
    try:
        if engine == "ray":  # the driver writes each shard once Ray has solved all its steps
            from otspec_gpu.corpus.ray_engine import run_ray_logged

            def write(sh: int, part: list, cols: dict) -> None:
                write_shard(out, sh, {**_logged_head(part, doc_index), **cols})

            timings = run_ray_logged(steps, todo, shard_steps, spec, write, address=ray_address)
        else:
            for sh in todo:
                part = steps[sh * shard_steps : (sh + 1) * shard_steps]
                write_shard(out, sh, {**_logged_head(part, doc_index), **solve_logged([s.pair for s in part], spec)})
    except KeyboardInterrupt as exc:
        raise CorpusInterrupted(Path(out), *kept_shards(out)) from exc
    name = "logged" if engine == "local" else "logged-ray"
    return RunResult(Path(out), len(doc_index), len(steps), n_shards, len(todo), time.perf_counter() - t0, name, timings)


def _logged_head(part: Sequence[Any], doc_index: dict) -> dict:
    """The head columns of a shard of logged steps (no teacher-forced token: ``token`` is -1)."""
    return {
        "doc": np.array([s.doc_id for s in part], dtype=object),
        "domain": np.array([s.domain for s in part], dtype=object),
        "doc_index": np.array([doc_index[s.doc_id] for s in part], dtype=np.int64),
        "position": np.array([s.position for s in part], dtype=np.int64),
        "token": np.full(len(part), -1, dtype=np.int64),
    }

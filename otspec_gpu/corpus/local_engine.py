"""The local engine: one process, documents in order, a progress bar, no server.

For each unfinished shard: score every document (:func:`~otspec_gpu.corpus.scoring.score_document`),
solve every position (:func:`~otspec_gpu.corpus.solvers.solve_rows`, the function the Ray engine
maps too), write the shard (:func:`~otspec_gpu.corpus.shards.write_shard`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from otspec_gpu.corpus.scoring import score_document
from otspec_gpu.corpus.shards import write_shard
from otspec_gpu.corpus.solvers import solve_rows

__all__ = ["run_local", "shard_columns"]


def shard_columns(plan: Any, parts: list[dict]) -> dict:
    """One shard's columns from per-document solver outputs (each with ``doc_index``, ``position``,
    ``token`` and the quantities), sorted by document then position, with ``doc`` and ``domain``.

    Parameters
    ----------
    plan : otspec_gpu.corpus.run.RunPlan
        The run (document ids and domains).
    parts : list of dict of str to ndarray
        Solver outputs.

    Returns
    -------
    dict of str to ndarray
        ``doc``, ``domain``, ``doc_index``, ``position``, ``token`` and the quantity columns.
    """
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.lexsort((cols["position"], cols["doc_index"]))
    cols = {k: v[order] for k, v in cols.items()}
    di = cols["doc_index"]
    head = {
        "doc": np.array([plan.documents[i].doc_id for i in di], dtype=object),
        "domain": np.array([plan.documents[i].domain for i in di], dtype=object),
        "doc_index": di.astype(np.int64),
        "position": cols.pop("position").astype(np.int64),
        "token": cols.pop("token").astype(np.int64),
    }
    cols.pop("doc_index")
    return {**head, **cols}


def score_and_solve(target: Any, draft: Any, plan: Any, i: int, timings: dict) -> dict:
    """Score document ``i`` and solve its positions (the local engine's unit of work).

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        The pair.
    plan : otspec_gpu.corpus.run.RunPlan
        The run.
    i : int
        Document index.
    timings : dict
        ``score_s`` and ``solve_s`` accumulators (seconds), updated in place.

    Returns
    -------
    dict of str to ndarray
        ``doc_index``, ``position``, ``token`` and the quantity columns of its positions.
    """
    ids = plan.token_ids[i]
    t0 = time.perf_counter()
    P, Q = score_document(target, draft, ids, plan.processing)
    t1 = time.perf_counter()
    n = P.shape[0]
    pos = np.arange(n, dtype=np.int64)
    cols = solve_rows(P, Q, plan.spec, docs=np.full(n, i), positions=pos)
    t2 = time.perf_counter()
    timings["score_s"] = timings.get("score_s", 0.0) + (t1 - t0)
    timings["solve_s"] = timings.get("solve_s", 0.0) + (t2 - t1)
    if getattr(plan, "tree", None) is not None:  # tree mode: drafted trees and their certified intervals
        from otspec_gpu.corpus.trees import tree_columns

        cols.update(tree_columns(target, draft, ids, plan.tree, plan.processing, i))
        timings["tree_s"] = timings.get("tree_s", 0.0) + (time.perf_counter() - t2)
    return {"doc_index": np.full(n, i, dtype=np.int64), "position": pos, "token": np.asarray(ids[1:], dtype=np.int64), **cols}


def run_local(plan: Any, target: Any, draft: Any, *, progress: bool = False, after_shard: Callable[[int], None] | None = None) -> dict:
    """Compute and write every unfinished shard of ``plan`` in this process.

    Parameters
    ----------
    plan : otspec_gpu.corpus.run.RunPlan
        The run (documents, tokens, shards to do).
    target, draft : otspec_gpu.models.LM
        The loaded pair.
    progress : bool
        Show a progress bar (positions) on stderr.
    after_shard : callable, optional
        Called with each shard index once it is written (tests use it to stop a run midway).

    Returns
    -------
    dict
        ``score_s`` and ``solve_s``: seconds spent in model forwards and in the solvers.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    timings: dict = {"score_s": 0.0, "solve_s": 0.0}
    todo = plan.todo_shards()
    total = sum(plan.shard_positions(s) for s in todo)
    bar = Progress(
        TextColumn("otspec corpus"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} positions"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not progress,
        transient=True,
    )
    with bar:
        task = bar.add_task("positions", total=total)
        for s in todo:
            parts = []
            for i in plan.shard_documents(s):
                parts.append(score_and_solve(target, draft, plan, i, timings))
                bar.advance(task, parts[-1]["position"].size)
            write_shard(plan.out, s, shard_columns(plan, parts))
            if after_shard is not None:
                after_shard(s)
    return timings

"""The Ray engine: the same per-document scoring and per-position solvers on Ray Data.

Pipeline (streaming; each stage runs as soon as its input blocks exist)::

    from_items(documents not yet in a finished shard)
      -> map_batches(_Scorer, ActorPoolStrategy(size=workers), batch_size=1)   # actors hold the models
      -> map_batches(solve_batch, TaskPoolStrategy, num_cpus=1)                # exact solvers on CPU tasks
      -> iter_batches on the driver -> write_shard when a shard's documents are all in

Each scoring actor loads one replica of the target and the draft (by name, or unpickled from the
driver's objects) and takes a GPU when the cluster has one. The solver stage calls
:func:`~otspec_gpu.corpus.solvers.solve_rows` -- the local engine's function -- so results are
bit-identical to the local engine. The driver writes the shards itself (atomically, with
:func:`~otspec_gpu.corpus.shards.write_shard`) rather than through ``Dataset.write_parquet``:
a shard is renamed into place only once whole, which keeps resumption exact after a kill, and the
rows (a few dozen numbers per position) are small next to the distributions the stages exchange.

Starting Ray: with ``address=None`` a local instance is started with ``workers`` CPUs (default:
every core of the machine); ``address="auto"`` joins the cluster this machine belongs to (``ray
start --head`` on one node, ``ray start --address HEAD:6379`` on the others), and
``"ray://HEAD:10001"`` connects a client. Every node needs otspec (with the ``ray`` extra) and the
model packages installed.

Logged runs (:func:`run_ray_logged`, no model): the driver reads and validates the logs (the run's
fingerprint and the cross-file checks need every step), the steps become a Ray dataset (one row per
step, its validated top-K pair pickled), :func:`solve_logged_batch` computes the certified
intervals in ``map_batches`` tasks through the local engine's
:func:`~otspec_gpu.corpus.solvers.solve_logged` -- a per-step function, so rows are bit-identical
-- and the driver writes each shard once all its steps are in.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from otspec.plugin import require
from otspec_gpu.corpus.local_engine import shard_columns
from otspec_gpu.corpus.shards import write_shard
from otspec_gpu.corpus.solvers import SolverSpec, solve_logged, solve_rows

__all__ = ["RAY_INSTALL", "require_ray", "solve_batch", "run_ray", "solve_logged_batch", "run_ray_logged"]

RAY_INSTALL = 'pip install "otspec[ray]"  (ray[data]==2.60.0)'


def require_ray() -> Any:
    """Import Ray Data, or say how to install it.

    Returns
    -------
    module
        ``ray``.

    Raises
    ------
    ImportError
        If Ray is not installed (the message has the install command).
    """
    require("ray.data", "ray", needed_by="--engine ray", install=RAY_INSTALL)
    import ray

    return ray


class _Scorer:
    """A Ray actor holding one replica of the pair; maps a batch of documents to their positions' p, q."""

    def __init__(self, target: Any, draft: Any, processing: Any):
        import torch

        from otspec_gpu.corpus.scoring import load_model

        self.target, self.draft, self.processing = load_model(target), load_model(draft), processing
        if torch.cuda.is_available():  # the actor was given a GPU
            for lm in (self.target, self.draft):
                try:
                    lm.model.to("cuda")
                except (RuntimeError, NotImplementedError):  # e.g. dynamic int8 layers are CPU-only
                    lm.model.to("cpu")

    def __call__(self, batch: dict) -> dict:
        from otspec_gpu.corpus.scoring import score_document

        out: dict[str, list] = {"doc_index": [], "position": [], "token": [], "p": [], "q": [], "score_s": []}
        for i, ids in zip(batch["doc_index"], batch["ids"], strict=True):
            ids = [int(x) for x in ids]
            t0 = time.perf_counter()
            P, Q = score_document(self.target, self.draft, ids, self.processing)
            n = P.shape[0]
            out["doc_index"].append(np.full(n, int(i), dtype=np.int64))
            out["position"].append(np.arange(n, dtype=np.int64))
            out["token"].append(np.asarray(ids[1:], dtype=np.int64))
            out["p"].append(P)
            out["q"].append(Q)
            out["score_s"].append(np.full(n, (time.perf_counter() - t0) / n))
        return {k: np.concatenate(v) for k, v in out.items()}


def solve_batch(batch: dict, spec: SolverSpec) -> dict:
    """The solver stage: :func:`~otspec_gpu.corpus.solvers.solve_rows` on a batch of scored positions.

    Parameters
    ----------
    batch : dict of str to ndarray
        ``doc_index``, ``position``, ``token``, ``p`` and ``q`` (``(n, V)``), ``score_s``.
    spec : SolverSpec
        What to solve.

    Returns
    -------
    dict of str to ndarray
        ``doc_index``, ``position``, ``token``, ``score_s``, ``solve_s`` and the quantity columns.
    """
    P = np.asarray(batch["p"], dtype=np.float64)
    Q = np.asarray(batch["q"], dtype=np.float64)
    t0 = time.perf_counter()
    cols = solve_rows(P, Q, spec, docs=batch["doc_index"], positions=batch["position"])
    n = P.shape[0]
    return {
        "doc_index": np.asarray(batch["doc_index"]),
        "position": np.asarray(batch["position"]),
        "token": np.asarray(batch["token"]),
        "score_s": np.asarray(batch["score_s"]),
        "solve_s": np.full(n, (time.perf_counter() - t0) / max(n, 1)),
        **cols,
    }


def run_ray(plan: Any, target: Any, draft: Any, *, address: str | None = None, workers: int | None = None) -> dict:
    """Compute and write every unfinished shard of ``plan`` with Ray Data.

    Parameters
    ----------
    plan : otspec_gpu.corpus.run.RunPlan
        The run.
    target, draft : str or otspec_gpu.models.LM
        Model names (each actor loads them) or loaded models (pickled to the actors).
    address : str, optional
        Cluster to join (``"auto"``, ``"ray://host:10001"``); ``None`` starts a local Ray.
    workers : int, optional
        Scoring actors (default: one per GPU of the cluster, else one per CPU but one). A local Ray
        gets the machine's cores, raised to ``workers + 1`` so that a solver task can run beside
        the actors.

    Returns
    -------
    dict
        ``score_s`` and ``solve_s`` (summed over positions, seconds), ``wall_s``, ``actors``.

    Raises
    ------
    ImportError
        If Ray is not installed.
    """
    ray = require_ray()
    todo = plan.todo_shards()
    if not todo:
        return {"score_s": 0.0, "solve_s": 0.0, "wall_s": 0.0, "actors": 0}
    t0 = time.perf_counter()
    # the machine's cores, and at least one CPU slot for the solver tasks beside the actors
    started = _start(ray, address, max(os.cpu_count() or 1, (workers or 0) + 1))
    try:
        return _pipeline(ray, plan, target, draft, workers, t0)
    finally:
        if started:  # a Ray this call started is stopped again; one the caller started is left running
            ray.shutdown()


def _start(ray: Any, address: str | None, cpus: int) -> bool:
    """Start (or join) Ray unless the caller did; True when this call started it."""
    if ray.is_initialized():
        return False
    if address is None:
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    else:
        ray.init(address=address, log_to_driver=False)
    return True


def _pipeline(ray: Any, plan: Any, target: Any, draft: Any, workers: int | None, t0: float) -> dict:
    """Build and drain the Ray Data pipeline of :func:`run_ray` (Ray initialised)."""
    todo = plan.todo_shards()
    gpus = int(ray.cluster_resources().get("GPU", 0))
    cpus = int(ray.cluster_resources().get("CPU", 1))
    n_actors = workers or (gpus if gpus else max(1, cpus - 1))
    from ray.data import ActorPoolStrategy, DataContext, TaskPoolStrategy

    DataContext.get_current().enable_progress_bars = False
    items = [{"doc_index": i, "ids": np.asarray(plan.token_ids[i], dtype=np.int64)} for s in todo for i in plan.shard_documents(s)]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    scored = ds.map_batches(
        _Scorer,
        fn_constructor_kwargs={"target": target, "draft": draft, "processing": plan.processing},
        batch_size=1,
        compute=ActorPoolStrategy(size=n_actors),
        num_cpus=1,
        num_gpus=1 if gpus else 0,
    )
    solved = scored.map_batches(solve_batch, fn_kwargs={"spec": plan.spec}, batch_size=None, compute=TaskPoolStrategy(), num_cpus=1)
    expected = {s: plan.shard_positions(s) for s in todo}
    pending: dict[int, list] = {s: [] for s in todo}
    have = dict.fromkeys(todo, 0)
    score_s = solve_s = 0.0
    for batch in solved.iter_batches(batch_size=None, batch_format="numpy"):
        score_s += float(np.sum(batch.pop("score_s")))
        solve_s += float(np.sum(batch.pop("solve_s")))
        shard_of = batch["doc_index"] // plan.shard_docs
        for s in np.unique(shard_of):
            m = shard_of == s
            pending[int(s)].append({k: v[m] for k, v in batch.items()})
            have[int(s)] += int(m.sum())
            if have[int(s)] == expected[int(s)]:
                write_shard(plan.out, int(s), shard_columns(plan, pending.pop(int(s))))
    return {"score_s": score_s, "solve_s": solve_s, "wall_s": time.perf_counter() - t0, "actors": n_actors}


def solve_logged_batch(batch: dict, spec: SolverSpec) -> dict:
    """The logged solver stage: :func:`~otspec_gpu.corpus.solvers.solve_logged` on a batch of steps.

    Parameters
    ----------
    batch : dict of str to ndarray
        ``index`` (the step's rank in the run) and ``pair`` (its pickled
        :class:`~otspec.truncation.TruncatedPair`).
    spec : SolverSpec
        What to bound.

    Returns
    -------
    dict of str to ndarray
        ``index``, ``solve_s`` and the interval columns (``columns_for(spec, logged=True)``).
    """
    pairs = [pickle.loads(b) for b in batch["pair"]]
    t0 = time.perf_counter()
    cols = solve_logged(pairs, spec)
    n = len(pairs)
    return {"index": np.asarray(batch["index"], dtype=np.int64), "solve_s": np.full(n, (time.perf_counter() - t0) / max(n, 1)), **cols}


def run_ray_logged(
    steps: Sequence[Any],
    todo: Sequence[int],
    shard_steps: int,
    spec: SolverSpec,
    write: Callable[[int, list, dict], None],
    *,
    address: str | None = None,
) -> dict:
    """Bound the steps of every unfinished shard of a logged run on Ray Data.

    Parameters
    ----------
    steps : sequence of otspec_gpu.corpus.inputs.LoggedStep
        Every step of the run, validated, in order.
    todo : sequence of int
        Shards to compute (shard ``s`` holds ``steps[s * shard_steps : (s + 1) * shard_steps]``).
    shard_steps : int
        Steps per shard.
    spec : SolverSpec
        What to bound.
    write : callable
        ``write(s, steps_of_s, columns)`` once shard ``s`` is solved (columns in step order).
    address : str, optional
        Cluster to join; ``None`` starts a local Ray with the machine's cores.

    Returns
    -------
    dict
        ``solve_s`` (summed over steps, seconds) and ``wall_s``.

    Raises
    ------
    ImportError
        If Ray is not installed.
    """
    ray = require_ray()
    if not todo:
        return {"solve_s": 0.0, "wall_s": 0.0}
    t0 = time.perf_counter()
    started = _start(ray, address, os.cpu_count() or 1)
    try:
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False
        index = [i for s in todo for i in range(s * shard_steps, min((s + 1) * shard_steps, len(steps)))]
        items = [{"index": i, "pair": pickle.dumps(steps[i].pair)} for i in index]
        ds = ray.data.from_items(items, override_num_blocks=max(1, min(len(items), 64)))
        solved = ds.map_batches(solve_logged_batch, fn_kwargs={"spec": spec}, batch_size=None, num_cpus=1)
        pending: dict[int, list] = {s: [] for s in todo}
        have = dict.fromkeys(todo, 0)
        solve_s = 0.0
        for batch in solved.iter_batches(batch_size=None, batch_format="numpy"):
            solve_s += float(np.sum(batch.pop("solve_s")))
            shard_of = batch["index"] // shard_steps
            for s in np.unique(shard_of):
                s = int(s)
                m = shard_of == s
                pending[s].append({k: v[m] for k, v in batch.items()})
                have[s] += int(m.sum())
                lo, hi = s * shard_steps, min((s + 1) * shard_steps, len(steps))
                if have[s] == hi - lo:
                    parts = pending.pop(s)
                    idx = np.concatenate([p["index"] for p in parts])
                    order = np.argsort(idx, kind="stable")
                    cols = {k: np.concatenate([p[k] for p in parts])[order] for k in parts[0] if k != "index"}
                    write(s, list(steps[lo:hi]), cols)
    finally:
        if started:
            ray.shutdown()
    return {"solve_s": solve_s, "wall_s": time.perf_counter() - t0}

r"""Tree mode of the corpus: a drafted tree at a context and the certified interval for its :math:`T^*`.

At a context :math:`x_{\le t}` the draft model drafts ``k`` i.i.d. sequences of length
:math:`\gamma` (one batched pass per depth, from one cached prefill), the target scores the drafted
rows in one batched pass, and :func:`otspec.tree_interval` bounds the tree optimum :math:`T^*` at that
context from the drafted trie plus the top-``K`` children of each drafted node. Each expansion
level scores the new nodes with both models in one batched pass (the context's cache repeated,
the nodes' suffixes right-padded: a causal model's earlier positions do not see the padding).

:func:`tree_columns` is what ``otspec corpus --tree-drafts k`` adds to every row:
``tree_lower``, ``tree_upper`` (the interval), ``tree_gap``, ``tree_nodes`` (explored nodes) and
``tree_kseq`` (K-SEQ's exact :math:`E[\tau]` given the drafted tree, for comparison), NaN at the
positions the stride skips.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec.errors import InvalidOptionError

__all__ = ["TreeSpec", "TREE_COLUMNS", "draft_tree", "NodeScorer", "tree_columns"]

#: Columns the tree mode adds to every corpus row.
TREE_COLUMNS = ("tree_lower", "tree_upper", "tree_gap", "tree_nodes", "tree_kseq")


@dataclass(frozen=True)
class TreeSpec:
    """What the tree mode computes at each evaluated position.

    Attributes
    ----------
    k, gamma : int
        Drafted sequences and their length.
    top_k : int
        ``K``: children kept per expanded node under each model.
    levels : int
        Expansion passes (each one batched forward pass of both models over the new nodes).
    stride : int
        Evaluate every ``stride``-th position of a document (the others get NaN).
    seed : int
        Seed of the drafting (one stream per document, from ``(seed, document index)``).
    max_expand : int or None
        Most nodes expanded per level (default: all).
    """

    k: int = 2
    gamma: int = 3
    top_k: int = 4
    levels: int = 0
    stride: int = 1
    seed: int = 0
    max_expand: int | None = None

    def __post_init__(self) -> None:
        for name, low in (("k", 1), ("gamma", 1), ("top_k", 1), ("levels", 0), ("stride", 1), ("seed", 0)):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, int) or val < low:
                raise InvalidOptionError(f"tree {name} must be an integer >= {low} (got {val!r}); pass e.g. {max(low, 1)}")
        if self.max_expand is not None and (not isinstance(self.max_expand, int) or self.max_expand < 1):
            raise InvalidOptionError(f"tree max_expand must be an integer >= 1 or None (got {self.max_expand!r}); pass e.g. 32")

    def config(self) -> dict:
        """JSON-ready settings (the run's manifest records them).

        Returns
        -------
        dict
        """
        return dict(
            k=self.k, gamma=self.gamma, top_k=self.top_k, levels=self.levels, stride=self.stride, seed=self.seed, max_expand=self.max_expand
        )


def _device(lm: Any):
    import torch

    param = next(iter(lm.model.parameters()), None)
    return param.device if param is not None else torch.device("cpu")


def _probs(logits, processing: Any) -> np.ndarray:
    """Float64 processed probabilities of float32 logits ``[..., V]`` (the decoder's processing)."""
    import torch

    from otspec_gpu.processing import probs_from_logits

    p = probs_from_logits(
        logits.to("cpu", torch.float64),
        temperature=processing.temperature,
        top_k=processing.top_k,
        top_p=processing.top_p,
        dtype=torch.float64,
    )
    return p.numpy()


def _prefill(lm: Any, context: list[int], batch: int):
    """The last logits ``[V]`` of the context and its cache repeated ``batch`` times."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    x = torch.tensor([list(context)], dtype=torch.long, device=_device(lm))
    last = lm.logits(x, cache=cache)[0, -1]
    if batch > 1:
        cache.batch_repeat_interleave(batch)
    return last, cache


def draft_tree(target: Any, draft: Any, context: list[int], k: int, gamma: int, processing: Any, generator: Any) -> tuple:
    r"""Draft ``k`` i.i.d. sequences of length :math:`\gamma` after ``context`` and score them with the target.

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        The pair (same vocabulary).
    context : list of int
        Token ids (at least one).
    k, gamma : int
        Sequences and their length.
    processing : otspec_gpu.corpus.scoring.Processing
        Temperature / top-k / top-p of both models.
    generator : torch.Generator
        The drafting stream (CPU).

    Returns
    -------
    X : ndarray of int64, shape (k, gamma)
        The drafts.
    P : ndarray, shape (k, gamma + 1, V)
        Target rows along each draft (``P[t, d] = p(. | context, X[t, :d])``).
    Q : ndarray, shape (k, gamma, V)
        Draft rows along each draft.
    """
    import torch

    last, cache = _prefill(draft, context, k)
    q_rows, toks = [], []
    q = _probs(last, processing)[None].repeat(k, axis=0)
    for d in range(gamma):
        q_rows.append(q)
        tok = torch.multinomial(torch.from_numpy(q), 1, generator=generator)  # [k, 1]
        toks.append(tok[:, 0].numpy())
        if d + 1 < gamma:
            q = _probs(draft.logits(tok.to(_device(draft)), cache=cache)[:, -1], processing)
    X = np.stack(toks, axis=1).astype(np.int64)
    last_p, pcache = _prefill(target, context, k)
    lt = target.logits(torch.from_numpy(X).to(_device(target)), cache=pcache)  # [k, gamma, V]
    P = np.concatenate([_probs(last_p, processing)[None].repeat(k, axis=0)[:, None], _probs(lt, processing)], axis=1)
    return X, P, np.stack(q_rows, axis=1)


class NodeScorer:
    """``expand(nodes) -> (p_rows, q_rows)`` for :func:`otspec.tree_interval` at one context, memoised.

    Nodes already scored (by an earlier level, or an earlier interval at the same context) are
    read from the memo; the others are scored in one batched pass per model.

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        The pair.
    context : list of int
        The context token ids.
    processing : otspec_gpu.corpus.scoring.Processing
        Temperature / top-k / top-p of both models.

    Attributes
    ----------
    scored, passes : int
        Nodes scored and batched passes run (per model).
    seconds : float
        Time spent in the models' forward passes.
    """

    def __init__(self, target: Any, draft: Any, context: list[int], processing: Any):
        self.target, self.draft, self.context, self.processing = target, draft, list(context), processing
        self.memo: dict[tuple, tuple] = {}
        self.scored = 0
        self.passes = 0
        self.seconds = 0.0

    def _rows(self, lm: Any, nodes: list[tuple]) -> np.ndarray:
        import torch

        L = max(len(u) for u in nodes)
        x = torch.zeros((len(nodes), L), dtype=torch.long)
        for j, u in enumerate(nodes):
            x[j, : len(u)] = torch.tensor(u, dtype=torch.long)
        _, cache = _prefill(lm, self.context, len(nodes))
        logits = lm.logits(x.to(_device(lm)), cache=cache)  # [n, L, V]; right padding unseen by earlier positions
        last = logits[torch.arange(len(nodes)), torch.tensor([len(u) - 1 for u in nodes])]
        return _probs(last, self.processing)

    def __call__(self, nodes: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        new = [u for u in dict.fromkeys(nodes) if u not in self.memo]
        if new:
            t0 = time.perf_counter()
            P, Q = self._rows(self.target, new), self._rows(self.draft, new)
            for j, u in enumerate(new):
                self.memo[u] = (P[j], Q[j])
            self.scored += len(new)
            self.passes += 1
            self.seconds += time.perf_counter() - t0
        return np.stack([self.memo[u][0] for u in nodes]), np.stack([self.memo[u][1] for u in nodes])


def tree_columns(target: Any, draft: Any, ids: list[int], spec: TreeSpec, processing: Any, doc_index: int) -> dict[str, np.ndarray]:
    """The tree-mode columns of one document's positions (``len(ids) - 1`` rows).

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        The pair.
    ids : list of int
        The document's tokens; position ``t`` has context ``ids[: t + 1]``.
    spec : TreeSpec
        k, gamma, K, levels, stride, seed.
    processing : otspec_gpu.corpus.scoring.Processing
        Temperature / top-k / top-p of both models.
    doc_index : int
        The document's index (its drafting stream).

    Returns
    -------
    dict of str to ndarray
        :data:`TREE_COLUMNS`, float64 ``[len(ids) - 1]`` (NaN where the stride skips).
    """
    import torch

    from otspec import tree_interval
    from otspec.theory import tree_expected

    n = len(ids) - 1
    out = {c: np.full(n, math.nan) for c in TREE_COLUMNS}
    seed = int(np.random.SeedSequence([spec.seed, int(doc_index)]).generate_state(1)[0])
    gen = torch.Generator().manual_seed(seed)
    for t in range(0, n, spec.stride):
        ctx = ids[: t + 1]
        X, P, Q = draft_tree(target, draft, ctx, spec.k, spec.gamma, processing, gen)
        scorer = NodeScorer(target, draft, ctx, processing)
        r = tree_interval(X, P, Q, top_k=spec.top_k, levels=spec.levels, expand=scorer if spec.levels else None, max_expand=spec.max_expand)
        out["tree_lower"][t], out["tree_upper"][t], out["tree_gap"][t] = r.lower, r.upper, r.gap
        out["tree_nodes"][t] = r.n_nodes
        out["tree_kseq"][t] = tree_expected(P, Q, X, "kseq")
    return out

r"""Multi-draft sequence (tree) verifiers: SpecTr over sequences and recursive rejection over a tree.

**Drafts.** ``k`` draft sequences of length :math:`\gamma` form a tree (the trie of their prefixes):

* ``replacement=True`` -- the k sequences are i.i.d. :math:`\sim M_s` (SpecTr, SpecInfer);
* ``replacement=False`` -- the k *first* tokens are drawn without replacement (successive sampling
  proportional to :math:`M_s(\cdot)`, as RSD / EAGLE-style trees do at a branching node); each
  draft then continues as its own chain :math:`\sim M_s(\cdot \mid x_1)`. At every node, the drafts
  that pass through it have distinct next tokens, so the tree branches only at the root.

**Verification** walks the tree top-down (:doc:`block`, trees): at depth :math:`t` the drafts that agree
with the emitted prefix :math:`y^{t-1}` propose their next tokens, whose law given the past is the
node's draft law (i.i.d. :math:`M_s(\cdot \mid y^{t-1})` with replacement; successive sampling at
the root without replacement); a single-step multi-draft verifier maps them to
:math:`Y_t \sim M_b(\cdot \mid y^{t-1})`; the drafts with :math:`X_t = Y_t` survive. The block
stops when none survives (:math:`Y_t` is then the correction token) or, after :math:`\gamma`
matched positions, with a bonus token :math:`\sim M_b(\cdot \mid y^\gamma)`. Each step is a
lossless coupling of the surviving drafts' next-token law with the target conditional, so the
losslessness criterion of :doc:`block` holds (:func:`otspec.verifiers.chain.lossless_violation` checks it).

Verifiers (``verifier=``):

* ``"kseq"`` -- K-SEQ per node (SpecTr Algorithm 2 with :math:`\rho^*`; per-node schedule from
  :func:`otspec.verifiers.step.kseq.kseq_schedule`), drafts with replacement;
* ``"rrs"`` -- recursive rejection sampling with replacement (SpecInfer MSS, :doc:`verifiers`, rrs);
* ``"rrs_wor"`` -- recursive rejection without replacement (RSD, :doc:`verifiers`, rrs_wor), drafts without
  replacement.

With ``k = 1`` all three are token verification (:mod:`otspec.verifiers.token_chain`).

Select-then-BV rules (:mod:`otspec.verifiers.tree_select`, :doc:`trees`): choose one drafted
sequence, then block-verify it with the selection law's conditionals:

* ``"optimal"`` -- the selection law of the tree optimum (:func:`otspec.tree_optimum`), by an exact
  transport coupling of the drafted tree; its :math:`E[\tau]` is :math:`T^*` (i.i.d. drafts);
* ``"kseq_bv"``, ``"rrs_bv"``, ``"rrs_wor_bv"`` -- the BV boosts of the three rules above (a draft
  through their accepted prefix, block-verified): never a lower :math:`E[\tau]`;
* ``"selj_bv"`` -- the law in :math:`B_k` with the largest depth-:math:`\gamma` joint acceptance,
  block-verified (a closed-form lower bound on :math:`T^*`);
* ``"nested"`` -- nested optimal i.i.d. selection, block-verified
  (:mod:`otspec.verifiers.tree_deployable`).

``sample`` of ``"kseq_bv"`` and ``"nested"`` enumerates nothing: the selection law's conditionals
along the selected path are in closed form (:mod:`otspec.verifiers.tree_deployable`), so it runs at
any vocabulary size (``"nested"`` with at most two drafts through a node).

References
----------
Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal Transport"
(NeurIPS 2023), Algorithm 2 and the sequence extension; Miao et al., "SpecInfer" (ASPLOS 2024),
multi-step speculative sampling; Jeon et al., "Recursive Speculative Decoding" (arXiv 2402.14160).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec import models as _models
from otspec._docs import fill_doc
from otspec._validation import as_generator, as_int_in_range, as_supported_drafts
from otspec.errors import (
    InvalidDraftsError,
    UnsupportedMethodError,
)
from otspec.trees import draft_trees
from otspec.verifiers import tree_deployable as _deployable
from otspec.verifiers.schedule import AcceptSchedule, schedule_rows
from otspec.verifiers.step.kseq import kseq_schedule
from otspec.verifiers.step.rrs import rrs_schedule
from otspec.verifiers.step.rrs_wor import rrs_wor_schedule
from otspec.verifiers.tree_select import BASE_RULE, SELECT_VERIFIERS, mu_conditional, tree_laws
from otspec.verifiers.tree_select import selection_plan as _selection_plan

__all__ = [
    "VERIFIERS",
    "TreeKernel",
    "kernel",
    "block_law",
    "expected_accepted",
    "sample",
    "sample_many",
    "node_schedule",
    "ALL_RULES",
    "selection_plan",
    "DEPLOYABLE",
]

#: Top-down rules: a single-step verifier at every node of the drafted tree.
VERIFIERS = ("kseq", "rrs", "rrs_wor")
#: Every tree rule: the top-down ones and the select-then-BV ones (:mod:`otspec.verifiers.tree_select`).
ALL_RULES = VERIFIERS + SELECT_VERIFIERS + ("nested",)
#: Rules whose ``sample`` runs at any vocabulary (:mod:`otspec.verifiers.tree_deployable`).
DEPLOYABLE = _deployable.RULES


def _check_verifier(verifier: str) -> bool:
    """Return ``replacement`` for the verifier's draft law."""
    if verifier not in ALL_RULES:
        raise UnsupportedMethodError(f"verifier must be one of {ALL_RULES} (got {verifier!r})")
    return verifier not in ("rrs_wor", "rrs_wor_bv")


# ------------------------------------------------------------------------------------------------
# Per-node single-step rules as accept schedules: visit the drafts in order, stop at draft j with
# probability a_j (output its token), else draw from the residual r.


def node_schedule(p: np.ndarray, q: np.ndarray, drafts: tuple, verifier: str) -> tuple[np.ndarray, np.ndarray]:
    r"""``(accept, residual)`` of one node's single-step rule for the ordered draft tokens ``drafts``.

    The output law is :math:`\sum_j [\prod_{l<j}(1-a_l)]\, a_j\, \delta_{d_j} + [\prod_l (1-a_l)]\, r`.
    Each rule is the single-step verifier's own accept schedule (one implementation per rule):

    * ``"kseq"``: K-SEQ, :math:`a_j = \min(1, p(d_j)/(\rho^* q(d_j)))`,
      :math:`r = \mathrm{norm}((p - \gamma \min(p/\rho^*, q))_+)` (SpecTr Algorithm 2;
      :func:`otspec.verifiers.step.kseq.kseq_schedule`);
    * ``"rrs"``: :math:`a_j = \min(1, p_{j-1}(d_j)/q(d_j))`, :math:`p_j = \mathrm{norm}((p_{j-1} - q)_+)`
      (:func:`otspec.verifiers.step.rrs.rrs_schedule`);
    * ``"rrs_wor"``: the same with :math:`q_{j+1} = \mathrm{norm}(q_j` without :math:`d_j)` and
      :math:`p_j = \mathrm{norm}((p_{j-1} - q_j)_+)` (:func:`otspec.verifiers.step.rrs_wor.rrs_wor_schedule`).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        The node's target :math:`M_b(\cdot \mid y^{t-1})` and draft :math:`M_s(\cdot \mid y^{t-1})`.
    drafts : tuple of int
        The surviving drafts' next tokens, in draft order.
    verifier : {"kseq", "rrs", "rrs_wor"}
        The per-node rule.

    Returns
    -------
    accept : ndarray, shape (R,)
        Acceptance probability of each round.
    residual : ndarray, shape (V,)
        The residual law (unnormalised weights are possible; callers normalise).

    Raises
    ------
    InvalidDraftsError
        If a draft has draft probability 0 at the node.

    Examples
    --------
    >>> import numpy as np
    >>> from otspec.verifiers.tree import node_schedule
    >>> a, r = node_schedule(np.array([0.5, 0.5]), np.array([0.5, 0.5]), (1,), "rrs")
    >>> a.tolist()
    [1.0]
    """
    d = np.asarray(drafts, dtype=np.int64)[None, :]
    k = d.shape[1]
    if verifier == "kseq" and k > 1:
        sched, _ = kseq_schedule(p, q, d)
    else:
        zero = np.flatnonzero(q[d[0]] <= 0)
        if zero.size:
            raise InvalidDraftsError(
                f"draft token {int(d[0, zero[0]])} has draft probability 0 at this node; the draft could not have produced it"
            )
        sched = rrs_wor_schedule(p, q, d) if verifier == "rrs_wor" else rrs_schedule(p, [q] * k, d)
    return np.asarray(sched.accept, dtype=np.float64).reshape(-1), np.asarray(sched.residual, dtype=np.float64).reshape(-1)


def _node_law(acc: np.ndarray, res: np.ndarray, drafts: tuple) -> np.ndarray:
    """The node's exact output law, shape ``(V,)``."""
    sched = AcceptSchedule(tokens=np.asarray(drafts, dtype=np.int64)[None, :], accept=acc[None, :], residual=res)
    return schedule_rows(sched, res.shape[0])[0]


# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TreeKernel:
    r"""Exact law of the emitted block :math:`O = (Y^\tau, Y_{\tau+1})` given every drafted tree.

    ``trees`` ``(M, k, gamma)``, ``weights`` ``(M,)``, ``laws[m]`` a dict ``{O: P(O | tree m)}``.

    Attributes
    ----------
    trees : ndarray of int64, shape (M, k, gamma)
        Every drafted tree of positive probability (:func:`otspec.trees.draft_trees`).
    weights : ndarray, shape (M,)
        Their draft probabilities.
    laws : tuple of dict
        ``laws[m]``: ``{emitted block: probability}`` given tree ``m``.
    verifier : str
        The per-node rule (``"kseq"``, ``"rrs"`` or ``"rrs_wor"``).
    """

    trees: np.ndarray
    weights: np.ndarray
    laws: tuple
    verifier: str

    @property
    def k(self) -> int:
        """Number of drafted sequences."""
        return int(self.trees.shape[1])

    @property
    def gamma(self) -> int:
        """Length of each drafted sequence."""
        return int(self.trees.shape[2])

    def expected_accepted(self) -> float:
        r""":math:`E[\tau] = \sum_m Q(\text{tree}_m) \sum_O P(O \mid \text{tree}_m)\,(|O| - 1)`.

        Returns
        -------
        float
            Expected number of accepted draft tokens per block, in ``[0, gamma]``.
        """
        return float(sum(w * sum(pr * (len(o) - 1) for o, pr in law.items()) for w, law in zip(self.weights, self.laws, strict=False)))

    def output_law(self) -> dict:
        r"""Law of the emitted block, ``{O: P(O)}``, aggregated over drafted trees.

        Returns
        -------
        dict of tuple of int to float
            :math:`\sum_m Q(\text{tree}_m)\, P(O \mid \text{tree}_m)` for every block ``O``.
        """
        out: dict = {}
        for w, law in zip(self.weights, self.laws, strict=False):
            for o, pr in law.items():
                out[o] = out.get(o, 0.0) + w * pr
        return out

    def __repr__(self) -> str:
        return f"TreeKernel(verifier={self.verifier!r}, k={self.k}, gamma={self.gamma}, trees={self.trees.shape[0]}, E[tau]={self.expected_accepted():.12g})"


class _Walker:
    """Exact top-down walk with a per-node schedule cache shared across trees."""

    def __init__(self, p_model, q_model, verifier: str):
        self.p_model, self.q_model, self.verifier = p_model, q_model, verifier
        self.cache: dict = {}

    def law_at(self, prefix: tuple, drafts: tuple) -> np.ndarray:
        key = (prefix, drafts)
        hit = self.cache.get(key)
        if hit is None:
            p, q = self.p_model(prefix), self.q_model(prefix)
            acc, res = node_schedule(p, q, drafts, self.verifier)
            hit = _node_law(acc, res, drafts)
            self.cache[key] = hit
        return hit

    def tree_law(self, tree: tuple) -> dict:
        gamma = len(tree[0])
        out: dict = {}
        stack = [((), tuple(range(len(tree))), 1.0)]
        while stack:
            prefix, alive, mass = stack.pop()
            t = len(prefix)
            if t == gamma:
                bonus = self.p_model(prefix)
                for y in np.flatnonzero(bonus > 0):
                    key = prefix + (int(y),)
                    out[key] = out.get(key, 0.0) + mass * float(bonus[y])
                continue
            drafts = tuple(tree[j][t] for j in alive)
            law = self.law_at(prefix, drafts)
            for y in np.flatnonzero(law > 0):
                y = int(y)
                nxt = tuple(j for j in alive if tree[j][t] == y)
                m = mass * float(law[y])
                if nxt:
                    stack.append((prefix + (y,), nxt, m))
                else:
                    key = prefix + (y,)
                    out[key] = out.get(key, 0.0) + m
        return out


@fill_doc
def kernel(p_model: Any, q_model: Any, k: int, gamma: int, *, verifier: str = "kseq") -> TreeKernel:
    r"""Exact law of the emitted block for every drafted tree (see the module docstring).

    Parameters
    ----------
    {tree_args}

    Returns
    -------
    TreeKernel
        The trees, their probabilities and the law of the emitted block given each.

    Raises
    ------
    {tree_enum_raises}

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import tree
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(tree.kernel(p, q, 1, 2, verifier="rrs").expected_accepted() * 9, 9)
    10.0
    """
    replacement = _check_verifier(verifier)
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    if verifier in SELECT_VERIFIERS or verifier == "nested":
        plan = selection_plan(p_model, q_model, k, gamma, verifier=verifier)
        return TreeKernel(trees=plan.trees, weights=plan.weights, laws=tree_laws(p_model, plan), verifier=verifier)
    trees, weights = draft_trees(q_model, k, gamma, replacement=replacement)
    walker = _Walker(p_model, q_model, verifier)
    laws = tuple(walker.tree_law(tuple(tuple(int(v) for v in path) for path in t)) for t in trees)
    return TreeKernel(trees=trees, weights=weights, laws=laws, verifier=verifier)


@fill_doc
def block_law(p_model: Any, q_model: Any, k: int, gamma: int, *, verifier: str = "kseq") -> dict:
    """The exact law ``{O: P(O)}`` of the emitted block, over drafted trees and verification coins.

    A lossless tree verifier gives :func:`otspec.verifiers.chain.lossless_violation` 0 on it.

    Parameters
    ----------
    {tree_args}

    Returns
    -------
    dict of tuple of int to float
        ``{(y_1, ..., y_tau, y_{tau+1}): probability}``.

    Raises
    ------
    {tree_enum_raises}

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import tree
    >>> p = models.context_free([0.5, 0.5])
    >>> sorted((o, round(float(w), 12)) for o, w in tree.block_law(p, p, 2, 1, verifier="kseq").items())
    [((0, 0), 0.25), ((0, 1), 0.25), ((1, 0), 0.25), ((1, 1), 0.25)]
    """
    return kernel(p_model, q_model, k, gamma, verifier=verifier).output_law()


@fill_doc
def expected_accepted(p_model: Any, q_model: Any, k: int, gamma: int, *, verifier: str = "kseq") -> float:
    r"""Exact :math:`E[\tau]` of a tree verifier by enumeration over drafted trees.

    Parameters
    ----------
    {tree_args}

    Returns
    -------
    float
        Expected number of accepted draft tokens per block.

    Raises
    ------
    {tree_enum_raises}

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import tree
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> tree.expected_accepted(p, q, 2, 2, verifier="rrs") > 11 / 9
    True
    """
    return kernel(p_model, q_model, k, gamma, verifier=verifier).expected_accepted()


def _prepare(p_model: Any, q_model: Any, tree: Any, verifier: str, rng: Any):
    _check_verifier(verifier)
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    rng = as_generator(rng)
    arr = np.asarray(tree)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InvalidDraftsError(f"tree must have shape (k, gamma) (got {arr.shape}); pass one drafted sequence per row")
    paths = tuple(_models.as_prefix(row.tolist(), p_model.V, name=f"tree[{j}]") for j, row in enumerate(arr))
    for j, path in enumerate(paths):  # every drafted token must have positive draft probability at its node
        as_supported_drafts(
            path, _models.conditionals_along(q_model, list(path), include_last=False), name=f"tree[{j}]", q_name="q_model conditionals"
        )
    if verifier == "rrs_wor" and len({x[0] for x in paths}) < len(paths):
        raise InvalidDraftsError("tree's first tokens repeat, which drafting without replacement never does; pass distinct first tokens")
    return p_model, q_model, rng, paths


def _sample_one(p_model, q_model, paths: tuple, verifier: str, schedules: dict, coins, draws) -> tuple[int, tuple]:
    gamma = len(paths[0])
    prefix: tuple = ()
    alive = tuple(range(len(paths)))
    while True:
        t = len(prefix)
        if t == gamma:
            y = int(draws.choice(p_model.V, p=p_model(prefix)))
            return gamma, prefix + (y,)
        drafts = tuple(paths[j][t] for j in alive)
        key = (prefix, drafts)
        sched = schedules.get(key)
        if sched is None:
            acc, res = node_schedule(p_model(prefix), q_model(prefix), drafts, verifier)
            sched = schedules[key] = (acc, res / res.sum())
        acc, res = sched
        y = None
        for a, x in zip(acc, drafts, strict=False):
            if coins.random() < a:  # accept coins: their own stream
                y = x
                break
        if y is None:
            y = int(draws.choice(p_model.V, p=res))  # residual draws: a separate stream
        alive = tuple(j for j in alive if paths[j][t] == y)
        prefix = prefix + (y,)
        if not alive:
            return t, prefix


def selection_plan(p_model: Any, q_model: Any, k: int, gamma: int, *, verifier: str = "optimal"):
    r"""The selection rule of a select-then-BV tree verifier for every drafted tree.

    For a boost the base rule's exact kernel is computed first (:func:`kernel`); see
    :func:`otspec.verifiers.tree_select.selection_plan`.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    k, gamma : int
        Number of drafted sequences and their length.
    verifier : {"optimal", "kseq_bv", "rrs_bv", "rrs_wor_bv", "selj_bv", "nested"}
        The rule.

    Returns
    -------
    SelectionPlan
        Trees, weights, selection probabilities and the selection law :math:`\mu` on sequences.

    Raises
    ------
    UnsupportedMethodError
        If ``verifier`` is not a select-then-BV rule.
    ProblemTooLargeError
        If the drafted trees cannot be enumerated.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import tree
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(float(tree.selection_plan(p, q, 2, 2, verifier="kseq_bv").mu.sum()), 12)
    1.0
    """
    if verifier not in SELECT_VERIFIERS + ("nested",):
        raise UnsupportedMethodError(f"verifier must be one of {SELECT_VERIFIERS + ('nested',)} (got {verifier!r})")
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    k, gamma = as_int_in_range(k, "k"), as_int_in_range(gamma, "gamma")
    if verifier == "nested":
        return _deployable.selection_plan(p_model, q_model, k, gamma, rule=verifier)
    base = kernel(p_model, q_model, k, gamma, verifier=BASE_RULE[verifier]) if verifier in BASE_RULE else None
    return _selection_plan(p_model, q_model, k, gamma, verifier, base=base)


def _path_conditionals(p_model, q_model, paths: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(k, gamma + 1, V)`` target and ``(k, gamma, V)`` draft conditionals along each drafted sequence."""
    P = np.stack([_models.conditionals_along(p_model, list(path)) for path in paths])
    Q = np.stack([_models.conditionals_along(q_model, list(path), include_last=False) for path in paths])
    return P, Q


def _select_sampler(p_model, q_model, paths: tuple, verifier: str):
    """``one(pick, bv) -> (tau, block)`` for a select-then-BV rule on the drafted tree ``paths``:
    the selection rule (computed once, by enumeration) draws a draft from the ``pick`` stream, then
    block verification with the selection law's conditionals runs on the ``bv`` stream."""
    from otspec.verifiers import block as _block

    k, gamma = len(paths), len(paths[0])
    plan = selection_plan(p_model, q_model, k, gamma, verifier=verifier)
    m = plan.tree_index(np.asarray(paths))
    if m < 0:
        raise InvalidDraftsError(f"tree {paths} has probability 0 under the draft law of {verifier!r}; pass a tree the draft can produce")
    sel = np.asarray(plan.select[m])
    mu_model = _models.as_model(lambda prefix: mu_conditional(plan, tuple(prefix)), V=p_model.V, name="selection law")

    def one(pick, bv):
        path = paths[int(pick.choice(k, p=sel))]
        tau, y = _block.sample(p_model, mu_model, list(path), rng=bv)
        return tau, tuple(path[:tau]) + (y,)

    return one


@fill_doc
def sample(p_model: Any, q_model: Any, tree: Any, *, verifier: str = "kseq", rng: np.random.Generator) -> tuple[int, tuple]:
    r"""Verify one drafted tree ``(k, gamma)``; returns ``(tau, block)`` with ``block`` the emitted tokens.

    Top-down walk (module docstring): at each node the surviving drafts' next tokens go through the
    node's single-step rule; accept coins and residual / bonus draws come from two independent
    streams spawned from ``rng``.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    tree : array_like of int, shape (k, gamma)
        The drafted sequences, one per row (first tokens distinct for ``"rrs_wor"``).
    verifier : str
        A rule of :data:`ALL_RULES`.
    rng : numpy.random.Generator
        The caller's generator.

    Returns
    -------
    tau : int
        Number of accepted draft tokens, ``0..gamma``.
    block : tuple of int
        The emitted tokens :math:`(y_1, \dots, y_{\tau+1})`: the accepted prefix and the correction
        (or bonus) token.

    Raises
    ------
    {tree_sample_raises}

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import tree
    >>> p = models.context_free([0.5, 0.5])
    >>> tree.sample(p, p, [[0, 1], [1, 1]], verifier="rrs", rng=np.random.default_rng(1))[0]
    2
    """
    p_model, q_model, rng, paths = _prepare(p_model, q_model, tree, verifier, rng)
    if verifier in DEPLOYABLE:
        return _deployable.sample(np.asarray(paths), *_path_conditionals(p_model, q_model, paths), rule=verifier, rng=rng)
    if verifier in SELECT_VERIFIERS:
        return _select_sampler(p_model, q_model, paths, verifier)(*rng.spawn(2))
    coins, draws = rng.spawn(2)
    return _sample_one(p_model, q_model, paths, verifier, {}, coins, draws)


@fill_doc
def sample_many(p_model: Any, q_model: Any, tree: Any, size: int, *, verifier: str = "kseq", rng: np.random.Generator) -> list:
    """``size`` independent verifications of the same drafted tree (node schedules computed once).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    tree : array_like of int, shape (k, gamma)
        The drafted sequences, one per row (first tokens distinct for ``"rrs_wor"``).
    size : int
        Number of verifications.
    verifier : str
        A rule of :data:`ALL_RULES`.
    rng : numpy.random.Generator
        The caller's generator (coin and draw streams are spawned from it).

    Returns
    -------
    list of tuple
        ``size`` pairs ``(tau, block)``, as :func:`sample` returns them.

    Raises
    ------
    {tree_sample_raises}

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import tree
    >>> p = models.context_free([0.5, 0.5])
    >>> len(tree.sample_many(p, p, [[0], [1]], 5, verifier="kseq", rng=np.random.default_rng(0)))
    5
    """
    p_model, q_model, rng, paths = _prepare(p_model, q_model, tree, verifier, rng)
    size = as_int_in_range(size, "size", minimum=0)
    if verifier in DEPLOYABLE:
        return _deployable.sample_many(np.asarray(paths), *_path_conditionals(p_model, q_model, paths), size, rule=verifier, rng=rng)
    if verifier in SELECT_VERIFIERS:
        one = _select_sampler(p_model, q_model, paths, verifier)
        pick, bv = rng.spawn(2)
        return [one(pick, bv) for _ in range(size)]
    coins, draws = rng.spawn(2)
    schedules: dict = {}
    return [_sample_one(p_model, q_model, paths, verifier, schedules, coins, draws) for _ in range(size)]

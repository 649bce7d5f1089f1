r"""Exact theory for one decoding round from its float64 p and q (numpy; the decoder of
:mod:`otspec_gpu` records it for every round through :func:`otspec_gpu.theory.round_theory`).

Every quantity below is a function of the round's distributions (and, where stated, of the drafts
that were actually proposed); none is estimated from the realized accept decisions, so the realized
outcome can be checked against it (:mod:`otspec.trace_report`).

Chains (``gamma`` drafts, one path :math:`x^\gamma`):

``expected``
    :math:`E[\tau \mid x^\gamma]` of the verifier used (accept coins integrated out exactly);
``exp_token``, ``exp_block``
    the same for token verification (:func:`otspec.verifiers.token_chain.expected_accepted_given_path`)
    and block verification (:func:`otspec.verifiers.block.expected_accepted_given_path`) on the same path;
``opt_first``
    :math:`\sum_x \min(p_0(x), q_0(x))`, the largest possible :math:`P(\tau \ge 1)`.

The block optimum :math:`\max E[\tau] = \sum_{i \ge 1} \sum_{x^i} W(x^i)` (see ``docs/block.rst``)
sums over all :math:`V^i` prefixes and is out of reach at :math:`V = 49\,152`; block verification
attains it (Sun et al., Theorem 2), so ``exp_block`` averaged over drafted paths is an *unbiased
estimate* of the optimum of each round, and the report shows its mean as the block optimum.

Single-step rounds (``k`` drafts from the verifier's draft law :math:`Q`):

``expected_cond``
    :math:`P(Y \in \bar x \mid \bar x)` of the verifier used, for the drafts actually proposed
    (NaN where even that one kernel row is out of reach: GLS at a real vocabulary);
``expected``
    :math:`P(Y \in \bar X)` averaged over :math:`\bar X \sim Q` (closed form; NaN where the verifier
    has none at this vocabulary size);
``exp_<name>``
    the same for every other single-step verifier of :data:`otspec.verifiers.ALL` that applies to
    :math:`Q` and has a closed form (or, for small vocabularies, an exact kernel of at most
    :data:`SMALL_KERNEL_ENTRIES` entries);
``optimum``
    :math:`\alpha^*(p, Q)` (:func:`otspec.optimal_acceptance`).

Trees (``k`` sequences): ``expected`` = :math:`E[\tau \mid \text{drafted tree}]` of the rule used and
``exp_<rule>`` of every rule valid for the same draft law (SpecTr and RRS for i.i.d. sequences),
by an exact walk over the drafted tree with the per-node accept schedules of
:func:`otspec.verifiers.tree.node_schedule`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Largest kernel (draft tuples x tokens) built for a verifier without a closed form.
SMALL_KERNEL_ENTRIES = 200_000

__all__ = ["SMALL_KERNEL_ENTRIES", "chain_theory", "single_step_rows", "single_theory", "tree_expected", "tree_theory"]


def chain_theory(p_rows: np.ndarray, q_rows: np.ndarray, path: np.ndarray, rule: str) -> dict:
    """Theory of one chain round: ``p_rows`` (gamma+1, V), ``q_rows`` (gamma, V), ``path`` (gamma,).

    Parameters
    ----------
    p_rows : ndarray, shape (gamma + 1, V)
        Target conditionals along the drafted path (float64).
    q_rows : ndarray, shape (gamma, V)
        Draft conditionals along it.
    path : ndarray of int, shape (gamma,)
        The drafted tokens.
    rule : {"token", "block"}
        The chain verifier used (its expectation is ``expected``).

    Returns
    -------
    dict of str to float
        ``expected``, ``exp_token``, ``exp_block`` and ``opt_first`` (module docstring).
    """
    from otspec.verifiers import block, token_chain

    et = token_chain.expected_accepted_given_path(p_rows, q_rows, path, validate=False)
    eb = block.expected_accepted_given_path(p_rows, q_rows, path, validate=False)
    return {
        "expected": et if rule == "token" else eb,
        "exp_token": et,
        "exp_block": eb,
        "opt_first": float(np.minimum(p_rows[0], q_rows[0]).sum()),
    }


def single_step_rows(law) -> list:
    """Single-step verifiers of :data:`otspec.verifiers.ALL` that apply to ``law``.

    Parameters
    ----------
    law : DraftLaw
        The round's draft law.

    Returns
    -------
    list of Verifier
        Every lossless single-step verifier that applies (the approximate rule is left out).
    """
    from otspec.verifiers import ALL

    return [v for v in ALL if v.name != "approximate" and v.applies_to(law)]


def single_theory(p: np.ndarray, q: np.ndarray, drafts: np.ndarray, name: str, draft_law: str) -> dict:
    """Theory of one single-step round: ``p``, ``q`` (V,), ``drafts`` (k,) the proposed tokens.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions of the round (float64).
    drafts : ndarray of int, shape (k,)
        The proposed tokens.
    name : str
        The verifier used (a registry name).
    draft_law : str
        Constructor of the draft law (``"iid"``, ``"without_replacement"``, ``"greedy"``).

    Returns
    -------
    dict of str to float
        ``expected_cond``, ``expected``, ``exp_<name>`` for every applicable verifier (NaN where
        no exact value is available) and ``optimum`` (module docstring).
    """
    from otspec.bounds import optimal_acceptance
    from otspec.errors import OtspecInputError, ProblemTooLargeError
    from otspec.laws import by_kind
    from otspec.verifiers import by_name

    k = int(drafts.shape[0])
    law = by_kind(draft_law).constructor(q, k)
    used = by_name(name)
    out: dict = {}
    # Exact conditional acceptance for the proposed tuple (the kernel row of this one tuple); NaN
    # where even one row is out of reach (GLS's race law at a real vocabulary)
    try:
        out["expected_cond"] = float(used.tuple_acceptance(p, law, drafts.reshape(1, k).astype(np.int64))[0])
    except ProblemTooLargeError:
        out["expected_cond"] = math.nan
    # Closed forms at any V; the exact kernel too when it is small (tiny vocabularies).
    small = law.num_tuples() * law.V <= SMALL_KERNEL_ENTRIES
    for v in single_step_rows(law):
        try:
            est = v.acceptance(p, law, method="auto" if small else "closed_form")
            val = float(est.value) if est.exact else math.nan
        except (OtspecInputError, NotImplementedError):
            val = math.nan
        out[f"exp_{v.name}"] = val
    out["expected"] = out.get(f"exp_{name}", math.nan)
    out["optimum"] = float(optimal_acceptance(p, law).value)
    return out


def _schedule_law(acc: np.ndarray, res: np.ndarray, drafts: Sequence[int]) -> np.ndarray:
    law = np.zeros(res.shape[0])
    left = 1.0
    for a, x in zip(acc, drafts, strict=False):
        law[x] += left * a
        left *= 1.0 - a
    return law + left * res


def tree_expected(P: np.ndarray, Q: np.ndarray, X: np.ndarray, rule: str) -> float:
    r"""Exact :math:`E[\tau \mid \text{tree}]` for ``P`` (k, gamma+1, V), ``Q`` (k, gamma, V), ``X`` (k, gamma).

    Top-down walk: at depth ``t`` with surviving rows ``alive`` (their prefixes equal the emitted
    one), the node's rule maps the survivors' next drafts to :math:`Y_t` with the exact law of its
    accept schedule; the block grows by one accepted token when :math:`Y_t` is one of them.

    Parameters
    ----------
    P : ndarray, shape (k, gamma + 1, V)
        Target conditionals along each drafted sequence.
    Q : ndarray, shape (k, gamma, V)
        Draft conditionals along each sequence.
    X : ndarray of int, shape (k, gamma)
        The drafted sequences.
    rule : {"kseq", "rrs", "rrs_wor"}
        The per-node rule.

    Returns
    -------
    float
        :math:`E[\tau \mid \text{tree}]`, in ``[0, gamma]``.
    """
    from otspec.verifiers.tree import node_schedule

    k, g = X.shape

    def walk(t: int, alive: tuple) -> float:
        if t == g:
            return 0.0
        j0 = alive[0]
        drafts = tuple(int(X[j, t]) for j in alive)
        acc, res = node_schedule(P[j0, t], Q[j0, t], drafts, rule)
        law = _schedule_law(acc, res, drafts)
        total = 0.0
        for y in sorted(set(drafts)):
            nxt = tuple(j for j in alive if int(X[j, t]) == y)
            if law[y] > 0:
                total += law[y] * (1.0 + walk(t + 1, nxt))
        return total

    return float(walk(0, tuple(range(k))))


def tree_theory(P: np.ndarray, Q: np.ndarray, X: np.ndarray, rule: str) -> dict:
    """Theory of one tree round: :func:`tree_expected` of the rule used and of every rule valid
    for the same draft law.

    Parameters
    ----------
    P : ndarray, shape (k, gamma + 1, V)
        Target conditionals along each drafted sequence.
    Q : ndarray, shape (k, gamma, V)
        Draft conditionals.
    X : ndarray of int, shape (k, gamma)
        The drafted sequences.
    rule : {"kseq", "rrs", "rrs_wor", "sample_match", "kseq_bv", "nested"}
        The rule used (``sample_match``: the walk of a deterministic top-k tree; ``kseq_bv`` and
        ``nested``: :func:`otspec.verifiers.tree_deployable.expected_accepted_given_tree`).

    Returns
    -------
    dict of str to float
        ``expected`` and ``exp_<rule>`` (``kseq`` and ``rrs`` for i.i.d. sequences, plus the rule
        used when it is ``kseq_bv`` or ``nested``; ``rrs_wor`` for sequences without replacement,
        ``sample_match`` alone for a deterministic tree).
    """
    if rule == "sample_match":  # a deterministic tree: the walk's exact value, its optimum for these drafts
        from otspec.verifiers.sample_match import expected_accepted_given_paths

        value = expected_accepted_given_paths(P, X)
        return {"exp_sample_match": value, "expected": value}
    rules = ("rrs_wor",) if rule == "rrs_wor" else ("kseq", "rrs")
    out = {f"exp_{r}": tree_expected(P, Q, X, r) for r in rules}
    if rule in ("kseq_bv", "nested"):  # select-then-BV rules: the selection law's closed form
        from otspec.verifiers.tree_deployable import expected_accepted_given_tree

        out[f"exp_{rule}"] = expected_accepted_given_tree(X, P, Q, rule=rule)
    out["expected"] = out[f"exp_{rule}"]
    return out

r"""Recursive rejection sampling with replacement (SpecInfer's multi-step speculative sampling;
Miao et al., ASPLOS 2024; :doc:`verifiers`, rrs).

With independent drafts :math:`X_j \sim q_j` (``iid``: all :math:`q_j = q`; ``product``: each
draft's own drafter):

.. math::
    p_0 = p;\quad \text{for } j = 1..k:\ \text{return } X_j \text{ w.p. } \min\big(1, \tfrac{p_{j-1}(X_j)}{q_j(X_j)}\big),
    \ \ p_j = \mathrm{norm}\big((p_{j-1} - q_j)_+\big);\qquad \text{else } Y \sim p_k.

Public kernel function for per-node use: :func:`rrs_conditional` ``(p, qs, drafts) -> (M, V)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._validation import as_distribution, as_supported_drafts, as_token_tuples, check_same_vocab
from otspec.errors import ShapeMismatchError
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual, schedule_rows

__all__ = ["RRSVerifier", "rrs", "rrs_conditional", "rrs_schedule", "rrs_closed_form"]


def rrs_closed_form(p: np.ndarray, qs: list) -> tuple[float, float]:
    r"""Membership and round acceptance of recursive rejection sampling with independent drafts
    :math:`X_j \sim q_j` (:doc:`verifiers`, rrs).

    Round j accepts with :math:`\beta_j = \sum\min(p_{j-1}, q_j)`, :math:`p_j =
    \mathrm{norm}((p_{j-1}-q_j)_+)`. A rejected :math:`X_j` has law :math:`(q_j-p_{j-1})_+/(1-\beta_j)`,
    independent across rounds, so

    .. math:: \alpha = (1-P_{rej}) + P_{rej} \sum_t p_k(t)\Big(1 - \prod_j \big(1 - \tfrac{(q_j-p_{j-1})_+(t)}{1-\beta_j}\big)\Big),
              \qquad P_{rej} = \prod_j (1-\beta_j).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    qs : list of ndarray, each shape (V,)
        Draft law of each position, :math:`q_1, \dots, q_k`.

    Returns
    -------
    membership : float
        :math:`\alpha = P(Y \in \bar X)` (a residual draw may land on a rejected draft).
    round_acceptance : float
        :math:`1 - P_{rej}`: probability that some round accepts its draft.
    """
    surv = 1.0
    acc = 0.0
    miss = np.ones_like(p)
    pc = p
    total = float(p.sum())
    for qj in qs:
        d = np.subtract(pc, qj)
        pos = np.maximum(d, 0.0)  # (p_{j-1} - q_j)_+
        mass = float(pos.sum())
        b = total - mass  # sum min(p_{j-1}, q_j) = sum p_{j-1} - sum (p_{j-1} - q_j)_+
        acc += surv * b
        if b >= 1.0 or mass <= 0.0:
            surv = 0.0
            break
        np.subtract(pos, d, out=d)  # d := (q_j - p_{j-1})_+, the rejected draft's mass
        rej = float(d.sum())  # = 1 - b, summed directly (1 - b cancels when b is close to 1)
        d *= 1.0 / rej if rej > 0 else 0.0
        np.subtract(1.0, d, out=d)
        miss *= d
        surv *= 1.0 - b
        pos *= 1.0 / mass
        pc = pos
        total = float(pc.sum())
    membership = acc + surv * float(pc @ (1.0 - miss)) if surv > 0 else acc
    return float(min(membership, 1.0)), float(acc)


def rrs_schedule(p: np.ndarray, qs: list, tuples: np.ndarray) -> AcceptSchedule:
    r"""RRS-with-replacement accept schedule for draft tuples ``(n, k)``; ``qs[j]`` is draft j's law.

    Because the drafts are independent, the residual sequence :math:`p_0..p_k` does not depend on
    the drafted tokens; it is computed once.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    qs : list of ndarray, each shape (V,)
        Draft law of each position.
    tuples : ndarray of int, shape (n, k)
        Draft tuples (validated).

    Returns
    -------
    AcceptSchedule
        Round ``j`` accepts :math:`x_j` with :math:`\min(1, p_{j-1}(x_j)/q_j(x_j))`; the shared
        residual is :math:`p_k`.
    """
    k = tuples.shape[1]
    acc = np.empty(tuples.shape, dtype=np.float64)
    pc = p
    for j in range(k):
        acc[:, j] = accept_ratio(pc[tuples[:, j]], qs[j][tuples[:, j]])
        pc, _ = residual(pc, qs[j])
    return AcceptSchedule(tokens=tuples, accept=acc, residual=pc)


def rrs_conditional(p: Any, qs: Any, drafts: Any) -> np.ndarray:
    r"""Exact RRS (with replacement) output law :math:`\pi(\cdot \mid \bar x)` per draft tuple.

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    qs : array_like, shape (V,) or (k, V)
        One draft law shared by all drafts (i.i.d.), or one per draft position.
    drafts : array_like of int, shape (M, k) or (k,)
        Draft tuples.

    Returns
    -------
    ndarray, shape (M, V)
        Row ``m`` is :math:`\pi(\cdot \mid \bar x_m)`.

    Raises
    ------
    InvalidDistributionError
        If ``p`` or a draft law is not a distribution.
    ShapeMismatchError
        If the vocabularies differ, or ``qs`` does not hold one law per draft position.
    InvalidDraftsError
        If a draft is out of the vocabulary or has probability 0 under its draft law.

    Examples
    --------
    >>> pi = rrs_conditional([0.5, 0.5], [0.9, 0.1], [0, 0])
    >>> pi.round(6).tolist()
    [[0.555556, 0.444444]]
    """
    p = as_distribution(p, "p")
    t = as_token_tuples(np.asarray(drafts).reshape(1, -1) if np.ndim(drafts) == 1 else drafts, p.shape[0], name="drafts")
    qarr = np.asarray(qs, dtype=np.float64)
    if qarr.ndim == 1:
        q = as_distribution(qarr, "q")
        check_same_vocab(p, q)
        qlist = [q] * t.shape[1]
    else:
        if qarr.shape[0] != t.shape[1]:
            raise ShapeMismatchError(
                f"qs must hold one draft law per draft position (got {qarr.shape[0]} laws for k = {t.shape[1]}); pass a (k, V) array"
            )
        qlist = [as_distribution(qj, f"qs[{j}]") for j, qj in enumerate(qarr)]
        for j, qj in enumerate(qlist):
            check_same_vocab(p, qj, ("p", f"qs[{j}]"))
    t = as_supported_drafts(t, np.stack(qlist), q_name="qs" if qarr.ndim == 2 else "q")
    return schedule_rows(rrs_schedule(p, qlist, t), p.shape[0])


class RRSVerifier(Verifier):
    r"""Recursive rejection sampling with replacement (SpecInfer).

    Acceptance (closed form, any V): :func:`rrs_closed_form`; ``extras``
    holds ``round_acceptance`` :math:`1-\prod_j(1-\beta_j)`. Not optimal in general.

    References
    ----------
    Miao et al., "SpecInfer", ASPLOS 2024 (multi-step speculative sampling).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import rrs
    >>> round(rrs.acceptance([0.5, 0.5], otspec.iid([0.9, 0.1], 2)).value, 6)  # 1 - 0.4 * 0.9
    0.64
    """

    name = "rrs"
    rule = "RRS with replacement needs independent drafts (otspec.iid or otspec.product)"
    fix = "use otspec.verifiers.rrs_wor for without-replacement drafts, or build the law with otspec.iid / otspec.product"
    reference = "SpecInfer (Miao et al. 2024)"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.independent_qs is not None

    @staticmethod
    def _qs(law):
        return list(law.independent_qs)

    def _schedule(self, p, law, tuples):
        qs = self._qs(law)

        def build():  # the residual sequence p_0..p_k does not depend on the drafts
            seq = [p]
            for qj in qs:
                seq.append(residual(seq[-1], qj)[0])
            return seq

        seq = law.cached("rrs.residuals", p, build)
        acc = np.stack([accept_ratio(seq[j][tuples[:, j]], qs[j][tuples[:, j]]) for j in range(law.k)], axis=1)
        return AcceptSchedule(tokens=tuples, accept=acc, residual=seq[-1])

    def _closed_form(self, p, law):
        membership, rounds = rrs_closed_form(p, self._qs(law))
        return membership, {"round_acceptance": rounds}


rrs = RRSVerifier()

r"""SpecHub's hub verifier for its two-draft law (Sun, Zhou, Chen, Sun, EMNLP 2024; :doc:`verifiers`, spechub).

SpecHub drafts with :math:`a = \arg\max q`: the first draft is :math:`F \sim q`; if :math:`F = a`
the second is drawn from q on :math:`\Omega\setminus\{a\}`, otherwise it is a. The ordered pairs
have :math:`Q(i, a) = q(i)` and :math:`Q(a, i) = q(a)\tilde q(i)`, :math:`\tilde q = q/(1-q(a))`
off a; the *set* :math:`\{a, I\}`, :math:`I \sim \tilde q`, has exactly the law of
``otspec.greedy(q, 2)``. Given the set, the ordering is :math:`(i, a)` with probability
:math:`q(i)/\tilde q(i) = 1 - q(a)`, independent of i.

The hub rule, in order: (1) from :math:`(i, a)` accept i w.p. :math:`\min(1, p_i/q_i)`; (2) from
:math:`(a, i)` accept i against the leftover :math:`(p_i - q_i)_+`, i.e. w.p.
:math:`\min(1, (p_i-q_i)_+/(q(a)\tilde q(i)))`; (3) a absorbs the leftover draft mass
:math:`L = 1 - \sum_{i \ne a} \min(p_i, \tilde q_i)` up to :math:`p_a`; (4) the rest goes to the
leftover target :math:`(p - \tilde q)_+` off a. Acceptance
:math:`p(a) + \sum_{i \ne a}\min(p(i), \tilde q(i))`, the optimum of the greedy k = 2 law.

Deviation from SpecHub's code (``MyTree.accept_step``): there, the ordering is the drafter's own
randomness; ``otspec.greedy`` only records the set ``(a, i)``, so we redraw the ordering from its
exact conditional law (probability :math:`1-q(a)` for :math:`(i, a)`) with the coin stream. In
step (3) every unit of leftover draft mass is sent to a with the same probability
:math:`p_a / L` (one choice among equivalent ones; the output law does not depend on it).

Averaged over the latent order, the hub rule keeps i with probability
:math:`(1-q(a))\min(1, p_i/q_i) + q(a)\min(1, (p_i-q_i)_+/(q(a)\tilde q_i)) = \min(1, p_i/\tilde q_i)`
and splits the rest like Hu et al.'s :math:`p_{rem}`: its kernel *equals* that of
``greedy_optimal`` (tested); only the sampling path differs. That equality comes from the choice
in step (3): SpecHub's released code places the leftover mass differently, and its per-set kernel
differs from ``greedy_optimal``'s (up to 0.23 on a V = 4 example) while its acceptance and output
law agree exactly.
"""

from __future__ import annotations

import numpy as np

from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, sample_schedule, schedule_rows
from otspec.verifiers.step.greedy_optimal import greedy_closed_form

__all__ = ["SpecHubVerifier", "spechub"]


def _hub_schedules(p: np.ndarray, law: DraftLaw, tuples: np.ndarray):
    q = law.q
    top, qt = law.top_and_rest
    a = int(top[0])
    qa = float(q[a])
    i = tuples[:, 1]
    a1 = accept_ratio(p[i], q[i])
    a2 = accept_ratio(np.maximum(p[i] - q[i], 0.0), qa * qt[i])

    def build():
        L = 1.0 - float(np.minimum(p, qt).sum())  # qt vanishes at a
        c = min(1.0, p[a] / L) if L > 0 else 0.0
        left = np.maximum(p - qt, 0.0)
        left[a] = 0.0
        tot = left.sum()
        return c, (left / tot if tot > 0 else np.array(p, copy=True))

    c, res = law.cached("spechub.residual", p, build)
    toks = np.stack([i, np.full_like(i, a)], axis=1)
    cc = np.full(i.shape, c)
    sched_ia = AcceptSchedule(tokens=toks, accept=np.stack([a1, cc], axis=1), residual=res)
    sched_ai = AcceptSchedule(tokens=toks, accept=np.stack([a2, cc], axis=1), residual=res)
    return sched_ia, sched_ai, qa


class SpecHubVerifier(Verifier):
    r"""SpecHub's hub verifier on ``otspec.greedy(q, 2)`` drafts.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import spechub
    >>> round(spechub.acceptance([0.2, 0.5, 0.3], otspec.greedy([0.5, 0.3, 0.2], 2)).value, 12)
    1.0
    """

    name = "spechub"
    rule = "SpecHub's verifier needs its two-draft law, which is otspec.greedy(q, 2)"
    fix = "build the law with otspec.greedy(q, 2)"
    reference = "SpecHub (Sun, Zhou, Chen, Sun, EMNLP 2024)"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.top_and_rest is not None and law.k == 2

    def _rows(self, p, law, tuples):
        sched_ia, sched_ai, qa = _hub_schedules(p, law, tuples)
        return (1.0 - qa) * schedule_rows(sched_ia, law.V) + qa * schedule_rows(sched_ai, law.V)

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        sched_ia, sched_ai, qa = _hub_schedules(p, law, tuples)
        order_ai = coin_rng.random(tuples.shape[0]) < qa  # latent drafting order, see module notes
        acc = np.where(order_ai[:, None], sched_ai.accept, sched_ia.accept)
        return sample_schedule(AcceptSchedule(tokens=sched_ia.tokens, accept=acc, residual=sched_ia.residual), coin_rng, res_rng)

    def _closed_form(self, p, law):
        return greedy_closed_form(p, law), {}


spechub = SpecHubVerifier()

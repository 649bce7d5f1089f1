"""Known-broken verifier designs, written the way a user would write them, each with its fixed twin.

``otspec.testing`` must report every ``BROKEN`` design as lossy with a counterexample and pass
every ``FIXED`` one (tests/testing/test_broken_designs.py; ``otspec audit`` on this file). Every
rule here is written from its definition, not from otspec's own verifiers.
"""

from __future__ import annotations

import numpy as np

from otspec.testing import chain_verifier, conditional_verifier, sampler_verifier
from otspec.verifiers import Verifier


def _residual(p, q):
    r = np.maximum(p - q, 0.0)
    return r / r.sum() if r.sum() > 0 else np.array(p, dtype=float)


# 1. A reused accept uniform ------------------------------------------------------------------------


def _token_sample(p, q, drafts, rng, *, reuse):
    x = int(drafts[0])
    u = rng.random()
    if u < min(1.0, p[x] / q[x]):
        return x
    cdf = np.cumsum(_residual(p, q))
    v = u if reuse else rng.random()  # BUG when reuse: u >= the accept probability here, not U(0, 1)
    return int(min(np.searchsorted(cdf, v * cdf[-1], side="right"), len(p) - 1))


@sampler_verifier(k=1)
def reused_uniform(p, q, drafts, rng):
    """Single-draft speculative sampling whose residual draw reuses the accept coin."""
    return _token_sample(p, q, drafts, rng, reuse=True)


@sampler_verifier(k=1)
def fresh_uniform(p, q, drafts, rng):
    """The same rule with an independent uniform for the residual draw."""
    return _token_sample(p, q, drafts, rng, reuse=False)


class ReusedUniformToken(Verifier):
    """The coin-reusing rule as a subclass of the base class: its kernel is right, its sampler is not."""

    name = "reused_uniform_token"
    rule = "k = 1"

    def applies_to(self, law):
        return law.k == 1 and law.q is not None

    def _rows(self, p, law, tuples):
        q = law.q
        out = np.zeros((tuples.shape[0], p.size))
        for m, (x,) in enumerate(tuples):
            a = min(1.0, p[x] / q[x])
            out[m] = (1 - a) * _residual(p, q)
            out[m, x] += a
        return out

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        q = law.q
        u = coin_rng.random(tuples.shape[0])
        x = tuples[:, 0]
        keep = u < np.minimum(1.0, p[x] / q[x])
        cdf = np.cumsum(_residual(p, q))
        drawn = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), p.size - 1)  # BUG: reuses u
        return np.where(keep, x, drawn)


# 2. A residual that is not normalised ---------------------------------------------------------------


def _token_law(p, q, drafts, *, normalise):
    x = int(drafts[0])
    a = min(1.0, p[x] / q[x])
    r = np.maximum(p - q, 0.0)
    out = (1 - a) * (_residual(p, q) if normalise else r)  # BUG when not normalised: mass 1 - a lost
    out[x] += a
    return out


@conditional_verifier(k=1)
def unnormalised_residual(p, q, drafts):
    return _token_law(p, q, drafts, normalise=False)


@conditional_verifier(k=1)
def normalised_residual(p, q, drafts):
    return _token_law(p, q, drafts, normalise=True)


# 3. K-SEQ with a wrong division factor --------------------------------------------------------------


def _kseq_law(p, q, drafts, rho):
    k = len(drafts)
    m = np.minimum(p / rho, q)
    beta = m.sum()
    gamma = (1 - (1 - beta) ** k) / beta if beta > 0 else 0.0
    out, surv = np.zeros(len(p)), 1.0
    for x in drafts:
        a = min(1.0, p[x] / (rho * q[x]))
        out[x] += surv * a
        surv *= 1 - a
    return out + surv * _residual(p, gamma * m)


def _rho_star(p, q, k):
    """The least rho in [1, k] with 1 - (1 - beta(rho))^k <= rho beta(rho), by bisection."""
    lo, hi = 1.0, float(k)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        beta = np.minimum(p / mid, q).sum()
        lo, hi = (mid, hi) if 1 - (1 - beta) ** k > mid * beta else (lo, mid)
    return hi


@conditional_verifier(kinds="iid")
def kseq_rho_one(p, q, drafts):
    """K-SEQ with the division factor left at 1 (it must be rho* >= 1)."""
    return _kseq_law(p, q, drafts, 1.0)


@conditional_verifier(kinds="iid")
def kseq_rho_star(p, q, drafts):
    return _kseq_law(p, q, drafts, _rho_star(p, q, len(drafts)))


# 4. RRS that does not update the residual -----------------------------------------------------------


def _rrs_law(p, q, drafts, *, update):
    out, surv, target = np.zeros(len(p)), 1.0, np.array(p, dtype=float)
    for x in drafts:
        a = min(1.0, target[x] / q[x])
        out[x] += surv * a
        surv *= 1 - a
        if update:  # BUG when not updated: every round tests against p instead of p_j
            target = _residual(target, q)
    return out + surv * (target if update else _residual(p, q))


@conditional_verifier(kinds="iid")
def rrs_stale_residual(p, q, drafts):
    return _rrs_law(p, q, drafts, update=False)


@conditional_verifier(kinds="iid")
def rrs_updated_residual(p, q, drafts):
    return _rrs_law(p, q, drafts, update=True)


# 5. Block verification with an off-by-one in the backward pass ------------------------------------


def _block_law(p_model, q_model, drafts, *, off_by_one):
    x = tuple(int(t) for t in drafts)
    g = len(x)
    P = [np.asarray(p_model(x[:i])) for i in range(g + 1)]
    Q = [np.asarray(q_model(x[:i])) for i in range(g)]
    run = [1.0]  # p_i = min(p_{i-1} M_b(x_i)/M_s(x_i), 1)
    for i in range(g):
        run.append(min(run[-1] * P[i][x[i]] / Q[i][x[i]], 1.0))
    h = [1.0]  # h_0 = 1; h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i); h_gamma = p_gamma
    for i in range(1, g + 1):
        if i < g:
            z = np.maximum(run[i] * P[i] - Q[i], 0.0).sum()
            h.append(z / (z + 1 - run[i]) if z + 1 - run[i] > 0 else 1.0)
        else:
            h.append(run[g])
    law = np.zeros((g + 1, len(P[0])))
    after = 1.0  # prod_{j > t} (1 - h_j): tau is the last position whose coin passes
    for t in range(g, -1, -1):
        if t == g:
            law[t] = h[t] * after * P[g]
        else:
            law[t] = h[t] * after * _residual(run[t] * P[t], Q[t])
        after *= 1 - (h[t - 1] if off_by_one and t > 0 else h[t])  # BUG when off by one: h_{t-1}
    return law


@chain_verifier
def block_off_by_one(p_model, q_model, drafts):
    return _block_law(p_model, q_model, drafts, off_by_one=True)


@chain_verifier
def block_backward_pass(p_model, q_model, drafts):
    return _block_law(p_model, q_model, drafts, off_by_one=False)


BROKEN = {
    "reused_uniform": reused_uniform,
    "reused_uniform_token": ReusedUniformToken(),
    "unnormalised_residual": unnormalised_residual,
    "kseq_rho_one": kseq_rho_one,
    "rrs_stale_residual": rrs_stale_residual,
    "block_off_by_one": block_off_by_one,
}

FIXED = {
    "reused_uniform": fresh_uniform,
    "reused_uniform_token": None,  # the fix is otspec's own token verifier
    "unnormalised_residual": normalised_residual,
    "kseq_rho_one": kseq_rho_star,
    "rrs_stale_residual": rrs_updated_residual,
    "block_off_by_one": block_backward_pass,
}

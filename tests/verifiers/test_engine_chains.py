"""Chain forms of strict exact match and typical acceptance, and the decoded stream's law.

Exact checks on small enumerable models (V = 3, gamma = 1..3):
* exact match in chain form is lossless: the losslessness criterion holds to 1e-12 and the stream's
  first n tokens have the target's law to 1e-12; E[tau] (closed form, kernel) equals an independent
  enumeration written here from the rule (draw Y_i ~ p, continue while it matches);
* typical acceptance in chain form: its block law, E[tau] and the stream's TV equal an independent
  enumeration written here (the threshold recomputed from its definition, the stream by recursion
  over block boundaries); it is lossy (TV > 0) and token / block verification give stream TV 0.
Samplers: one chi-square test per rule on one path (N = 4 000 runs, false alarm 1e-6).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chi2

from otspec import models, prefixes
from otspec._tolerances import FLOAT64_ATOL
from otspec.errors import InvalidOptionError, UnsupportedMethodError
from otspec.verifiers import block, exact_match_chain, stream, token_chain, typical_chain
from otspec.verifiers.chain import lossless_violation
from tests._oracles import make_pair
from tests._tolerances import CLEAR_DIFFERENCE, FALSE_ALARM

CASES = [
    (seed, V, a, sparse, gamma)
    for seed, (V, a, sparse, gamma) in enumerate([(3, 1.0, False, 2), (3, 0.5, True, 3), (2, 0.3, False, 3), (3, 2.0, False, 1)])
]
N_RUNS = 4000


def _threshold(p, eps=0.09, alpha=0.3):
    h = -sum(v * math.log(v) for v in p if v > 0)
    return min(eps, alpha * math.exp(-h))


def _block_law_by_hand(pm, qm, gamma, rule):
    """{emitted block: probability} by walking every draft path and every accept outcome."""
    V, out = pm.V, {}
    for path in itertools.product(range(V), repeat=gamma):
        w = math.prod(qm(path[:i])[path[i]] for i in range(gamma))
        if w == 0:
            continue
        reach = 1.0
        for t in range(gamma + 1):
            p = pm(path[:t])
            if t == gamma:  # every draft accepted: the bonus token
                for y in range(V):
                    out[path + (y,)] = out.get(path + (y,), 0.0) + w * reach * p[y]
                break
            if rule == "exact_match":  # Y_t ~ p; a mismatch is emitted, a match continues
                for y in range(V):
                    if y != path[t]:
                        out[path[:t] + (y,)] = out.get(path[:t] + (y,), 0.0) + w * reach * p[y]
                reach *= p[path[t]]
            elif not p[path[t]] > _threshold(p):  # typical: stop here, emit a draw from p
                for y in range(V):
                    out[path[:t] + (y,)] = out.get(path[:t] + (y,), 0.0) + w * reach * p[y]
                break
    return out


def _tau_by_hand(law):
    """E[tau] from a block law: tau = len(block) - 1."""
    return sum(w * (len(o) - 1) for o, w in law.items())


def _stream_by_hand(pm, qm, gamma, n, rule, head=()):
    """{x^n: probability} of the first n stream tokens after `head`, by recursion over blocks."""
    if n <= 0:
        return {(): 1.0}
    shifted_p = models.as_model(lambda x: pm(head + tuple(x)), V=pm.V)
    shifted_q = models.as_model(lambda x: qm(head + tuple(x)), V=pm.V)
    out = {}
    for o, w in _block_law_by_hand(shifted_p, shifted_q, gamma, rule).items():
        if len(o) >= n:
            out[o[:n]] = out.get(o[:n], 0.0) + w
            continue
        for rest, v in _stream_by_hand(pm, qm, gamma, n - len(o), rule, head + o).items():
            out[o + rest] = out.get(o + rest, 0.0) + w * v
    return out


def _close(a, b):
    keys = set(a) | set(b)
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


@pytest.mark.parametrize("seed, V, a, sparse, gamma", CASES)
def test_exact_match_chain_is_lossless_and_matches_the_enumeration(seed, V, a, sparse, gamma):
    pm, qm = make_pair(seed, V, a, sparse)
    K = exact_match_chain.kernel(pm, qm, gamma)
    assert lossless_violation(K.output_law(), pm) <= FLOAT64_ATOL
    assert _close(K.output_law(), _block_law_by_hand(pm, qm, gamma, "exact_match")) <= FLOAT64_ATOL
    by_hand = _tau_by_hand(_block_law_by_hand(pm, qm, gamma, "exact_match"))
    assert exact_match_chain.expected_accepted(pm, qm, gamma) == pytest.approx(by_hand, abs=FLOAT64_ATOL)
    assert K.expected_accepted() == pytest.approx(by_hand, abs=FLOAT64_ATOL)
    target = prefixes.enumerate_prefixes(pm, pm, 3).p_joint[3]
    assert np.abs(stream.stream_law(exact_match_chain.kernel, pm, qm, gamma, 3) - target).max() <= FLOAT64_ATOL
    # below token verification's product of mins, position by position
    assert by_hand <= token_chain.expected_accepted(pm, qm, gamma) + FLOAT64_ATOL


@pytest.mark.parametrize("seed, V, a, sparse, gamma", CASES)
def test_typical_chain_matches_the_enumeration(seed, V, a, sparse, gamma):
    pm, qm = make_pair(seed, V, a, sparse)
    by_hand = _block_law_by_hand(pm, qm, gamma, "typical")
    K = typical_chain.kernel(pm, qm, gamma)
    assert _close(K.output_law(), by_hand) <= FLOAT64_ATOL
    assert typical_chain.expected_accepted(pm, qm, gamma) == pytest.approx(_tau_by_hand(by_hand), abs=FLOAT64_ATOL)
    assert K.expected_accepted() == pytest.approx(_tau_by_hand(by_hand), abs=FLOAT64_ATOL)
    n = 3
    target = prefixes.enumerate_prefixes(pm, pm, n).p_joint[n]
    mine = _stream_by_hand(pm, qm, gamma, n, "typical")
    tv = 0.5 * sum(abs(mine.get(x, 0.0) - target[i]) for i, x in enumerate(itertools.product(range(V), repeat=n)))
    assert typical_chain.stream_tv(pm, qm, gamma, n) == pytest.approx(tv, abs=FLOAT64_ATOL)


def test_typical_chain_is_lossy_and_the_lossless_chains_are_not():
    pm, qm = make_pair(0, 3, 1.0, False)
    assert typical_chain.stream_tv(pm, qm, 2, 3) > CLEAR_DIFFERENCE
    for kern in (token_chain.kernel, block.kernel, exact_match_chain.kernel):
        assert stream.stream_tv(kern, pm, qm, 2, 3) <= FLOAT64_ATOL


def test_argmax_on_reject_and_given_path():
    p, q = models.context_free([0.95, 0.05]), models.context_free([0.5, 0.5])
    law = typical_chain.conditional_law(p, q, [0, 1], on_reject="argmax")
    assert law.tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]  # 0 passes, 1 fails: emit argmax = 0
    assert typical_chain.expected_accepted_given_path([[0.95, 0.05]] * 2, [[0.5, 0.5]] * 2, [0, 0]) == 2.0
    assert exact_match_chain.expected_accepted_given_path([[0.95, 0.05]] * 2, [[0.5, 0.5]] * 2, [0, 0]) == pytest.approx(0.95 + 0.95**2)


def _chi_square(counts, probs):
    big = probs * counts.sum() >= 5
    assert counts[probs == 0].sum() == 0, "sampled an outcome of probability 0"
    obs, exp = np.append(counts[big], counts[~big].sum()), np.append(probs[big], probs[~big].sum()) * counts.sum()
    obs, exp = obs[exp > 0], exp[exp > 0]
    return float(chi2.sf((((obs - exp) ** 2) / exp).sum(), obs.size - 1))


@pytest.mark.parametrize("module", [exact_match_chain, typical_chain])
def test_sampler_follows_its_conditional_law(module):
    pm, qm = make_pair(1, 3, 0.5, True)
    path = (1, 0, 1)  # typical stops at position 2 and draws from p there (0.712 / 0.015 / 0.273)
    law = module.conditional_law(pm, qm, path).ravel()
    rng = np.random.default_rng(7)
    counts = np.zeros(law.size)
    for _ in range(N_RUNS):
        tau, y = module.sample(pm, qm, path, rng=rng)
        counts[tau * pm.V + y] += 1
    assert _chi_square(counts, law) > FALSE_ALARM


def test_bad_options():
    pm, qm = make_pair(0, 3, 1.0, False)
    with pytest.raises(InvalidOptionError, match="posterior_threshold"):
        typical_chain.kernel(pm, qm, 2, posterior_threshold=-0.1)
    with pytest.raises(InvalidOptionError, match="on_reject"):
        typical_chain.stream_tv(pm, qm, 2, 2, on_reject="resample")
    with pytest.raises(UnsupportedMethodError):
        exact_match_chain.expected_accepted(pm, qm, 2, method="lp")

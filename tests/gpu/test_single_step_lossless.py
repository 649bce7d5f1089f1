r"""Losslessness end to end at a real vocabulary size (V = 49 152, float32): drafts drawn by
``otspec_gpu.drafting.sample_drafts`` from q, verified by the torch sampler, and the histogram of
the output tokens compared with the target p.

Laws: logits of p are 3 * N(0, 1) (seeded), q's logits add 0.8 * N(0, 1) noise (acceptance about
0.75 for one draft). Bins: the 30 most likely tokens of p, plus one bin for all other tokens.
N = 1 000 000 rows per verifier (p and q shared as ``[1, V]``; k = 2 drafts, k = 1 for token and
approximate, which runs with its default exact-rule predicate, TV 0). Pearson chi-square (df = 30) with threshold ``chi2.isf(1e-6 / n_tests, 30)``: false-alarm rate
<= 1e-6 for the file. A TV-0.02 error on the binned law is detected with power >= 0.999 at
N = 1e6 (noncentrality >= 1e6 * 0.04**2 = 1600).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from otspec_gpu.drafting import sample_drafts
from otspec_gpu.verifiers import SINGLE_STEP
from tests.gpu._tolerances import FALSE_ALARM

V = 49_152
TOP = 30
LOSSLESS = [(name, 1 if v.k_max == 1 else 2) for name, v in sorted(SINGLE_STEP.items()) if v.lossless or name == "approximate"]
THRESH = float(stats.chi2.isf(FALSE_ALARM / len(LOSSLESS), TOP))


@pytest.fixture(scope="module")
def laws():
    g = np.random.default_rng(49152)
    lp = 3.0 * g.standard_normal(V)
    lq = lp + 0.8 * g.standard_normal(V)
    p = torch.softmax(torch.as_tensor(lp, dtype=torch.float32), 0)[None]
    q = torch.softmax(torch.as_tensor(lq, dtype=torch.float32), 0)[None]
    return p, q


@pytest.mark.parametrize("name,k", LOSSLESS, ids=[n for n, _ in LOSSLESS])
def test_output_histogram_matches_p(name, k, laws, device):
    p, q = (x.to(device) for x in laws)
    v = SINGLE_STEP[name]  # approximate runs with its default (exact-rule) predicate: TV 0
    gen = torch.Generator(device).manual_seed(2026)
    n = 1_000_000
    drafts = sample_drafts(q, k, v.draft_law, generator=gen, n=n)
    out = v.sample(p, q, drafts, generator=gen)
    assert out.token.dtype == torch.long and not bool((out.token < 0).any())
    tok = out.token
    p64 = p[0].double()
    top = torch.topk(p64, TOP).indices
    counts = torch.bincount(tok, minlength=V).double()
    obs = torch.cat([counts[top], (n - counts[top].sum())[None]]).cpu().numpy()
    pexp = torch.cat([p64[top], (1.0 - p64[top].sum())[None]]).cpu().numpy()
    e = n * pexp / pexp.sum()
    stat = float(((obs - e) ** 2 / e).sum())
    assert stat < THRESH, f"{name}: chi2 = {stat:.1f} >= {THRESH:.1f}"

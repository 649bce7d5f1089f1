"""``probs_from_logits`` (temperature, then top-k, then top-p) against an independent numpy
reference, and ``sample_drafts`` against the exact otspec draft laws (chi-square over all tuples)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats

import otspec
from otspec.errors import (
    InvalidDistributionError,
    InvalidDraftCountError,
    InvalidDraftsError,
    UnsupportedMethodError,
)
from otspec_gpu.drafting import sample_drafts
from otspec_gpu.processing import probs_from_logits
from tests.gpu._tolerances import FALSE_ALARM, PROCESSING_FLOAT32_ATOL, PROCESSING_FLOAT64_ATOL


def reference(logits: np.ndarray, T: float, top_k, top_p) -> np.ndarray:
    """Row by row in float64 with plain Python loops: the documented transform."""
    out = []
    for row in logits:
        x = row / T
        keep = np.ones(len(x), bool)
        if top_k is not None and top_k < len(x):
            kth = sorted(x, reverse=True)[top_k - 1]
            keep &= x >= kth
        e = np.where(keep, np.exp(x - x[keep].max()), 0.0)
        pr = e / e.sum()
        if top_p is not None and top_p < 1:
            order = sorted(range(len(x)), key=lambda i: (-pr[i], i))
            mass, kept = 0.0, np.zeros(len(x), bool)
            for i in order:
                if mass < top_p and pr[i] > 0:
                    kept[i] = True
                mass += pr[i]
            pr = np.where(kept, pr, 0.0)
            pr /= pr.sum()
        out.append(pr)
    return np.array(out)


@pytest.mark.parametrize(
    "T,top_k,top_p", [(1.0, None, None), (0.7, None, None), (1.3, 5, None), (1.0, None, 0.8), (0.5, 7, 0.9), (2.0, 3, 0.5)]
)
def test_matches_reference(T, top_k, top_p, device):
    rng = np.random.default_rng(3)
    logits = rng.normal(scale=2.0, size=(6, 12))
    got = probs_from_logits(torch.as_tensor(logits, device=device), temperature=T, top_k=top_k, top_p=top_p)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.cpu().numpy(), reference(logits, T, top_k, top_p), rtol=0, atol=PROCESSING_FLOAT64_ATOL)
    g32 = probs_from_logits(torch.as_tensor(logits, device=device), temperature=T, top_k=top_k, top_p=top_p, dtype=torch.float32)
    assert g32.dtype == torch.float32
    np.testing.assert_allclose(g32.cpu().double().numpy(), reference(logits, T, top_k, top_p), rtol=0, atol=PROCESSING_FLOAT32_ATOL)


def test_order_is_temperature_then_top_p():
    """top-p acts on the tempered law: at T = 0.25 the top token alone holds 0.9 of the mass."""
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.0]], dtype=torch.float64)
    hot = probs_from_logits(logits, temperature=0.25, top_p=0.8)
    assert (hot[0] > 0).tolist() == [True, False, False, False]
    cold = probs_from_logits(logits, temperature=1.0, top_p=0.8)
    assert (cold[0] > 0).sum() == 3


def test_greedy_and_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0]])
    assert probs_from_logits(logits, temperature=0).tolist() == [[0.0, 1.0, 0.0, 0.0]]  # lowest id of the tie
    kept = probs_from_logits(logits.double(), top_k=1)  # tokens tied with the k-th are all kept
    assert kept.tolist() == [[0.0, 0.5, 0.5, 0.0]]


@pytest.mark.parametrize(
    "kwargs,err",
    [
        ({"temperature": -1.0}, InvalidDistributionError),
        ({"temperature": float("nan")}, InvalidDistributionError),
        ({"top_k": 0}, InvalidDistributionError),
        ({"top_p": 0.0}, InvalidDistributionError),
        ({"top_p": 1.5}, InvalidDistributionError),
        ({"dtype": torch.int64}, UnsupportedMethodError),
    ],
)
def test_bad_arguments(kwargs, err):
    with pytest.raises(err):
        probs_from_logits(torch.zeros(1, 3), **kwargs)


# ---------------------------------------------------------------------------------------------
# drafting

N = 200_000
Q = np.array([0.35, 0.0, 0.25, 0.25, 0.15])  # a zero and a tie
LAWS = ["iid", "without_replacement", "greedy"]
CASES = [(law, k, shared) for law in LAWS for k in (1, 2, 3) for shared in (True, False)]
THRESH_ALPHA = FALSE_ALARM / len(CASES)


@pytest.mark.parametrize("law,k,shared", CASES, ids=[f"{l}-k{k}-{'shared' if s else 'rows'}" for l, k, s in CASES])
def test_drafts_follow_the_otspec_law(law, k, shared, device):
    """Tuple frequencies over N rows vs the exact tuple weights of ``otspec.<law>(q, k)``:
    chi-square, family false-alarm rate 1e-6 (Bonferroni over the cases); no tuple of weight 0."""
    T, W = getattr(otspec, law)(Q, k).enumerate()
    q = torch.as_tensor(Q, device=device)[None]
    g = torch.Generator(device).manual_seed(17)
    d = sample_drafts(q, k, law, generator=g, n=N) if shared else sample_drafts(q.expand(N, -1).contiguous(), k, law, generator=g)
    assert d.shape == (N, k) and d.dtype == torch.long
    base = 5 ** np.arange(k)
    keys = d.cpu().numpy() @ base
    counts = np.array([(keys == key).sum() for key in T @ base])
    assert counts.sum() == N  # every drawn tuple has positive weight under the law
    if len(W) > 1:
        stat = float(((counts - N * W) ** 2 / (N * W)).sum())
        assert stat < stats.chi2.isf(THRESH_ALPHA, len(W) - 1)


def test_greedy_top_tie_rule_matches_otspec():
    q = torch.tensor([[0.2, 0.3, 0.3, 0.2]], dtype=torch.float64)
    d = sample_drafts(q, 3, "greedy", generator=torch.Generator().manual_seed(0), n=10)
    assert d[:, :2].tolist() == [otspec.greedy(q[0].numpy(), 3).top.tolist()] * 10


def test_drafting_errors():
    q = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(InvalidDraftsError):
        sample_drafts(q, 3, "without_replacement", generator=g)
    with pytest.raises(InvalidDraftsError):
        sample_drafts(q, 3, "greedy", generator=g)
    with pytest.raises(UnsupportedMethodError):
        sample_drafts(q, 2, "product", generator=g)
    with pytest.raises(InvalidDraftCountError):
        sample_drafts(q, 0, "iid", generator=g)
    with pytest.raises(InvalidDraftCountError):
        sample_drafts(q.expand(2, -1), 1, "iid", generator=g, n=5)


def test_import_without_torch_names_the_extra():
    """``import otspec_gpu`` with torch unavailable: one ImportError naming the install command."""
    code = "import sys; sys.modules['torch'] = None\ntry:\n    import otspec_gpu\nexcept ImportError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert 'pip install torch==2.13.0 && pip install "otspec[torch]"' in out.stdout, out.stdout + out.stderr

"""Two-draft speculative sampling, fixed: recursive rejection sampling (docs/testing.rst)."""
import numpy as np

from otspec.testing import conditional_verifier


def _residual(p, q):
    r = np.maximum(p - q, 0.0)
    return r / r.sum() if r.sum() > 0 else p


@conditional_verifier(kinds="iid")
def two_drafts(p, q, drafts):
    """Try the drafts in turn, each against what the previous rejections left of p."""
    out, left = np.zeros(len(p)), 1.0
    for x in drafts:
        a = min(1.0, p[x] / q[x])
        out[x] += left * a
        left *= 1 - a
        p = _residual(p, q)  # the fix: after a rejection the target becomes norm((p - q)+)
    return out + left * p

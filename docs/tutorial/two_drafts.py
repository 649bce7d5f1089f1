"""Two-draft speculative sampling, first attempt (docs/testing.rst)."""
import numpy as np

from otspec.testing import conditional_verifier


@conditional_verifier(kinds="iid")
def two_drafts(p, q, drafts):
    """Try the drafts in turn as single-draft speculative sampling does; if all fail, resample."""
    out, left = np.zeros(len(p)), 1.0  # left: probability that every draft so far was rejected
    for x in drafts:
        a = min(1.0, p[x] / q[x])  # keep x with probability p(x) / q(x)
        out[x] += left * a
        left *= 1 - a
    r = np.maximum(p - q, 0.0)  # the single-draft residual (p - q)+
    return out + left * (r / r.sum() if r.sum() > 0 else p)

"""Named tolerances and statistical design constants of the torch tests (``tests/gpu``).

Each numerical tolerance names the two computations it compares and why its slack is what it is;
the library's own tolerances (:mod:`otspec._tolerances`) are reused where the comparison is the
same, and the names shared with the numpy tests (``FALSE_ALARM``, ``FLOAT64_ULPS_ATOL``) come from
``tests/_tolerances.py``. The statistical constants fix every test's false-alarm rate and the error it must detect.
"""

from __future__ import annotations

from scipy import stats

from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from tests._tolerances import FALSE_ALARM, FLOAT64_ULPS_ATOL

__all__ = [
    "ACCEPT_RATE_ATOL",
    "DESIGN_POWER",
    "EXACT_ATOL",
    "FALSE_ALARM",
    "FLOAT32_KERNEL_ATOL",
    "FLOAT32_REL_RTOL",
    "FLOAT32_ROUNDING_ATOL",
    "FLOAT32_ROUNDING_RTOL",
    "FLOAT32_SUM_ATOL",
    "FLOAT64_FEW_OPS_ATOL",
    "FLOAT64_KERNEL_ATOL",
    "FLOAT64_ATOL",
    "FLOAT64_ULPS_ATOL",
    "MODEL_FLOAT32_ATOL",
    "MODEL_FLOAT32_RTOL",
    "PROCESSING_FLOAT32_ATOL",
    "PROCESSING_FLOAT64_ATOL",
    "SMOLLM2_LOGITS_TOL",
    "TINY_MASS_ATOL",
    "TV_DETECT",
    "Z_FALSE_ALARM",
]

# ------------------------------------------------------------------------------------------------
# Kernels: torch conditional laws against the numpy oracles (the torch twins' requirements).

#: A torch float64 conditional law against the numpy float64 kernel row (required: 1e-12); the
#: same slack as the library's agreement of two float64 evaluations of one small formula.
FLOAT64_KERNEL_ATOL = FLOAT64_ATOL

#: A torch float32 conditional law against the numpy float64 kernel row (required: 1e-5): a law
#: built from a few dozen float32 operations on probabilities (relative rounding 2**-24 ~ 6e-8 each).
FLOAT32_KERNEL_ATOL = 1e-5

#: Two float64 evaluations of a handful (< 20) of operations on numbers in [0, 1], or one against
#: its exact rational value (each rounding <= 2**-53 ~ 1.1e-16).
FLOAT64_FEW_OPS_ATOL = 1e-14

#: A float32 probability in [0, 1] against its float64 value after a few roundings (each at most
#: half an ulp, <= 2**-25 ~ 3e-8 below 1).
FLOAT32_ROUNDING_ATOL = 1e-7

#: A float32 value against its float64 value, relatively (one rounding: 2**-24 ~ 6e-8).
FLOAT32_ROUNDING_RTOL = 1e-7

#: A float32 sum of a few dozen probabilities against 1 (each addition rounds by <= 6e-8).
FLOAT32_SUM_ATOL = 1e-6

#: Relative agreement of a float32 residual law of tiny mass with its float64 value: the residual
#: rules keep the full float32 relative precision, whatever the mass ...
FLOAT32_REL_RTOL = 1e-5
#: ... with this absolute floor, far below the 1e-7 masses those tests move.
TINY_MASS_ATOL = 1e-9

# ------------------------------------------------------------------------------------------------
# Processing and models.

#: ``probs_from_logits`` in float64 against the numpy reference transform (a softmax over V
#: entries after temperature / top-k / top-p: a few ulps per entry, summed over V).
PROCESSING_FLOAT64_ATOL = 1e-13
#: ... and in float32 (relative rounding 6e-8 per operation on probabilities <= 1).
PROCESSING_FLOAT32_ATOL = 1e-6

#: Logits of the tiny float32 test models: the KV-cached forward against the cache-free reference
#: (same maths, different summation order in float32 matmuls).
MODEL_FLOAT32_ATOL = 2e-5
MODEL_FLOAT32_RTOL = 1e-5
#: SmolLM2's logits through otspec_gpu's loader against the plain transformers forward
#: (135M parameters in float32: attention / MLP reductions over 576-3 072 terms in another order).
SMOLLM2_LOGITS_TOL = 1e-4

# ------------------------------------------------------------------------------------------------
# Statistics.

#: Two-sided normal quantile of :data:`FALSE_ALARM` (about 4.89 standard errors).
Z_FALSE_ALARM = float(stats.norm.isf(FALSE_ALARM / 2))
#: Total-variation error every sampler test must detect (0.02, the torch twins' design target) ...
TV_DETECT = 0.02
#: ... with at least this probability.
DESIGN_POWER = 0.999
#: A sampled acceptance rate against its exact value at N = 1e5 rows: 0.01 is >= 6 standard errors
#: (a Bernoulli's standard error is <= 0.5 / sqrt(N) ~ 1.6e-3).
ACCEPT_RATE_ATOL = 0.01

#: Residual mass :math:`\sum (p - r^*)_+` below which the optimum is 1 up to rounding: the residual
#: vector is then rounding noise of ~V ulps (CUDA's reduction order can make it exactly 0 where the
#: CPU leaves ~1e-16), and a rejection has probability of the same order, so two devices' residual
#: vectors are not compared there (V <= 262 144 terms of float64 rounding: < 262 144 * 2.2e-16 ~ 6e-11;
#: 1e-10 leaves room).
ROUNDING_RESIDUAL = 1e-10

#: A torch r* entry against numpy's: r* is built from prefix sums of masses up to 1, so another
#: reduction order (CUDA's) moves an entry by a few ulps *of 1* whatever its size (4.6e-16 on an
#: entry of 3.1e-6 seen on an H200): absolute 1e-14 = 45 ulps of 1, beside the relative 1e-13.
R_STAR_ATOL = 1e-14

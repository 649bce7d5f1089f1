"""Every numeric tolerance of otspec, named once, with the reason for its size.

Tests import these names instead of repeating numbers.
"""

__all__ = [
    "SIMPLEX_SUM_ATOL",
    "NEGATIVE_ATOL",
    "CERTIFICATE_ATOL",
    "LP_FEASIBILITY_TOL",
    "LP_OPTIMALITY_TOL",
    "EXACT_ATOL",
    "ROUNDING_PER_TERM",
    "WOR_TARGET_ERROR",
    "DEFAULT_MEMORY_CAP_BYTES",
    "ERROR_BOUND_MAX",
]

#: A user distribution must sum to 1 within this. float64 softmax over 262 144 tokens is off by
#: ~1e-13; float32 softmax by ~1e-7, which we refuse on purpose: compute the softmax in float64
#: (otherwise the bound describes a different p than the one sampled).
SIMPLEX_SUM_ATOL = 1e-9

#: Entries in [-NEGATIVE_ATOL, 0) are rounding noise of a float64 subtraction and are rejected
#: all the same: we never clip user input silently. Kept for internal residuals only.
NEGATIVE_ATOL = 1e-15

#: Slack allowed in the plain-numpy re-check of a solver's answer (marginals of a plan, its
#: objective, the value of the cut). HiGHS is run at LP_FEASIBILITY_TOL, so a correct plan misses
#: its marginals by far less; a bigger miss means the solver's answer cannot be trusted.
CERTIFICATE_ATOL = 1e-8

#: HiGHS primal/dual feasibility tolerance. The default 1e-7 gave answers 1.6e-6 off the optimum
#: on 1e6-column instances (DESIGN.md section 5); 1e-10 is the tightest HiGHS accepts reliably.
LP_FEASIBILITY_TOL = 1e-10
LP_OPTIMALITY_TOL = 1e-10

#: Agreement required between two exact computations of the same quantity in float64
#: (e.g. kernel marginal vs target, closed form vs LP) on small problems.
EXACT_ATOL = 1e-9

#: Rounding bound per accumulated term. A sequential float64 sum of n terms in [0, 1] errs by at
#: most gamma_{n-1} * sum|x| with gamma_n = n u / (1 - n u), u = 2^-53 ~ 1.11e-16 (Higham, Accuracy
#: and Stability of Numerical Algorithms, Thm 4.4); we use 1.2e-16 per term, which covers the
#: 1 / (1 - n u) factor for every n < 1e14. Closed forms report error_bound = this * V (times k
#: where a sum is raised to the k-th power, since ``|a^k - b^k| <= k |a - b|`` on [0, 1]).
ROUNDING_PER_TERM = 1.2e-16

#: Error the without-replacement race integral aims for (the issue's target is 1e-10).
WOR_TARGET_ERROR = 1e-11

#: Tuple-level solvers refuse problems whose estimated peak memory exceeds this (4 GiB); pass
#: ``memory_cap=`` to change it.
DEFAULT_MEMORY_CAP_BYTES = 4 * 1024**3

#: Largest numerical error bound a result may carry and still be reported ``optimal``. A dual
#: (cut) method accepts its own re-check within twice its error bound, so a bound near 1 would make
#: the check unable to fail; above this the status is downgraded to ``check_failed``.
ERROR_BOUND_MAX = 1e-6

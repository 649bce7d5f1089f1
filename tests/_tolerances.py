"""Named tolerances and statistical design constants of the numpy tests (``tests/``, not ``tests/gpu``).

The library's own tolerances live in :mod:`otspec._tolerances` and the tests import them where
the comparison is the same one the library makes (``EXACT_ATOL``: two exact computations of one
quantity; ``FLOAT64_ATOL``: two float64 evaluations of one small formula; ``CERTIFICATE_ATOL``:
a solver's answer re-checked in numpy). The names here are choices of the tests themselves: each
says which two computations it compares and why its slack is what it is.
"""

from __future__ import annotations

from otspec._tolerances import LP_FEASIBILITY_TOL

__all__ = [
    "BISECTION_ATOL",
    "CLEAR_DIFFERENCE",
    "EXACT_RTOL",
    "FALSE_ALARM",
    "FLOAT64_SUM_ATOL",
    "FLOAT64_ULPS_ATOL",
    "LP_ATOL",
    "STRICT_GAP",
]

#: The same float64 formula on the same numbers along two code paths, a probability that is
#: exactly 0 in exact arithmetic, or a closed form against its exact rational value: a few ulps of
#: numbers <= 1 (2**-52 ~ 2.2e-16 each).
FLOAT64_ULPS_ATOL = 1e-15

#: A float64 sum or dot product of up to a few hundred probabilities against another evaluation of
#: the same quantity (sequential rounding ~ n * 1.1e-16).
FLOAT64_SUM_ATOL = 1e-13

#: An LP's value (HiGHS, re-solved in float64 on its final basis) against an exact value of the same
#: optimum: HiGHS' feasibility tolerance. One value for every LP test.
LP_ATOL = LP_FEASIBILITY_TOL

#: Relative agreement of two float64 evaluations of one smooth expression through scipy special
#: functions (chi-square / non-central chi-square quantiles and tails): far above their ~1e-14
#: relative accuracy, far below any difference a test cares about.
EXACT_RTOL = 1e-9

#: A function evaluated at a bisection's root against the level it was solved for: 40 halvings
#: of [0, 1] put the root within ~1e-12, and the statistical power functions it is used on have
#: slopes far below 1e6.
BISECTION_ATOL = 1e-6

#: False-alarm rate of one statistical comparison (chi-square or normal interval) unless a test
#: says it splits this over several comparisons (Bonferroni). Seeds are fixed, so runs are
#: deterministic; this is the chance that a correct sampler would have failed the seed we chose.
FALSE_ALARM = 1e-6

#: A difference a test asserts exists -- the error of a deliberately broken design, a strict
#: inequality between two exact values -- must exceed this. It is far above every rounding
#: tolerance above, so such a check cannot pass on noise.
CLEAR_DIFFERENCE = 1e-3

#: The same for the small strict gaps the tests demonstrate (the unachievable joint-coupling bound
#: above the block optimum, a wrong kernel's marginal against p, an invalid K-SEQ threshold's
#: broken marginal): still five orders of magnitude above EXACT_ATOL.
STRICT_GAP = 1e-4

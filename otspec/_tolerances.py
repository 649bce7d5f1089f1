"""Every numeric tolerance and size limit of otspec, named once, with the reason for its size.

Tests import these names instead of repeating numbers.
"""

__all__ = [
    "SIMPLEX_SUM_ATOL",
    "CERTIFICATE_ATOL",
    "LP_FEASIBILITY_TOL",
    "LP_OPTIMALITY_TOL",
    "EXACT_ATOL",
    "FLOAT64_ATOL",
    "ROUNDING_PER_TERM",
    "WOR_TARGET_ERROR",
    "DEFAULT_MEMORY_CAP_BYTES",
    "PATH_ROW_SUM_ATOL",
    "HIGHS_SMALL_MATRIX_VALUE",
    "LP_MAX_ROW_SCALE",
    "POLISH_NEGATIVE_ATOL",
    "POLISH_RESIDUAL_SLACK",
    "DUAL_BOUND_SLACK",
    "KERNEL_AUTO_MAX_ENTRIES",
    "SAMPLE_CHUNK_ENTRIES",
    "MC_CONFIDENCE_Z",
    "ERROR_BOUND_MAX",
    "WOR_SERIES_CUTOFF",
    "WOR_GAMMA_SERIES_CUTOFF",
    "WOR_TAIL_ROUNDING_RTOL",
    "WOR_PRUNE_MARGIN",
    "TREE_CUT_TOL",
    "TREE_CUTS_PER_ROUND",
    "TREE_ANTICHAIN_ROWS_PER_ROUND",
    "TREE_MAX_CUT_ROUNDS",
    "TREE_INTERVAL_CUT_ROOM",
    "TREE_INTERVAL_CUT_TOL",
    "TREE_INTERVAL_CUTS_PER_ROUND",
    "TREE_INTERVAL_MAX_ROUNDS",
    "KL_FRONTIER_GAP_ATOL",
    "GR_SELECTION_L1_TOL",
]

#: A user distribution must sum to 1 within this. float64 softmax over 262 144 tokens is off by
#: ~1e-13; float32 softmax by ~1e-7, which we refuse on purpose: compute the softmax in float64
#: (otherwise the bound describes a different p than the one sampled).
SIMPLEX_SUM_ATOL = 1e-9

#: Slack allowed in the plain-numpy re-check of a solver's answer (marginals of a plan, its
#: objective, the value of the cut). HiGHS is run at LP_FEASIBILITY_TOL, so a correct plan misses
#: its marginals by far less; a bigger miss means the solver's answer cannot be trusted.
CERTIFICATE_ATOL = 1e-8

#: HiGHS primal/dual feasibility tolerance. The default 1e-7 gave answers 1.6e-6 off the optimum
#: on 1e6-column instances (see :doc:`benchmarks`); 1e-10 is the tightest HiGHS accepts reliably.
LP_FEASIBILITY_TOL = 1e-10
LP_OPTIMALITY_TOL = 1e-10

#: Agreement required between two exact computations of the same quantity in float64
#: (e.g. kernel marginal vs target, closed form vs LP) on small problems.
EXACT_ATOL = 1e-9

#: Agreement required between two float64 evaluations of the same small formula (a few hundred
#: operations on numbers of order 1: rounding is ~1e-14), e.g. a kernel against its closed form.
FLOAT64_ATOL = 1e-12

#: Rounding bound per accumulated term. A sequential float64 sum of n terms in [0, 1] errs by at
#: most gamma_{n-1} * sum|x| with gamma_n = n u / (1 - n u), u = 2^-53 ~ 1.11e-16 (Higham, Accuracy
#: and Stability of Numerical Algorithms, Thm 4.4); we use 1.2e-16 per term, which covers the
#: 1 / (1 - n u) factor for every n < 1e14. Closed forms report error_bound = this * V (times k
#: where a sum is raised to the k-th power, since ``|a^k - b^k| <= k |a - b|`` on [0, 1]).
ROUNDING_PER_TERM = 1.2e-16

#: Error the without-replacement race integral aims for (10x below the required 1e-10).
WOR_TARGET_ERROR = 1e-11

#: Tuple-level solvers refuse problems whose estimated peak memory exceeds this (4 GiB); pass
#: ``memory_cap=`` to change it.
DEFAULT_MEMORY_CAP_BYTES = 4 * 1024**3

#: A conditional passed along a path (``p_conds`` / ``q_conds`` rows of the chain and block
#: verifiers) must sum to 1 within this, per 1e5 tokens of vocabulary (at least this much): a
#: float64 softmax over V tokens errs by ~V u, so the allowance grows with V above 100 000.
PATH_ROW_SUM_ATOL = 1e-9

#: HiGHS drops matrix entries below ``small_matrix_value`` (default 1e-9); the block LP keeps them
#: (1e-12 is the smallest value the option accepts).
HIGHS_SMALL_MATRIX_VALUE = 1e-12

#: The block LP divides each draft row by its right-hand side unless entries would exceed
#: 1 / LP_MAX_ROW_SCALE (HiGHS refuses entries above 1e15 and loses accuracy well before).
LP_MAX_ROW_SCALE = 1e-9

#: A polished basic solution of the block LP is kept only if its most negative entry is above
#: -POLISH_NEGATIVE_ATOL (rounding of the sparse LU solve) ...
POLISH_NEGATIVE_ATOL = 1e-14

#: ... and its constraint residual is at most HiGHS' own plus POLISH_RESIDUAL_SLACK.
POLISH_RESIDUAL_SLACK = 1e-16

#: A dual bound more than this below the primal value of a (feasible to rounding) plan can only
#: come from numerically meaningless multipliers and is skipped.
DUAL_BOUND_SLACK = 1e-12

#: ``acceptance(method="auto")`` builds the kernel only when it has at most this many entries
#: (M tuples x V tokens; 2**24 float64 = 128 MiB), otherwise it falls back to Monte Carlo.
KERNEL_AUTO_MAX_ENTRIES = 2**24

#: Batched samplers and Monte Carlo work on chunks of at most this many (row x token) entries,
#: so that memory stays near 32 MiB at any vocabulary size.
SAMPLE_CHUNK_ENTRIES = 2**22

#: Two-sided 99% normal quantile used for Monte Carlo confidence intervals.
MC_CONFIDENCE_Z = 2.5758293035489004
#: Largest numerical error bound a result may carry and still be reported ``optimal``. A dual
#: (cut) method accepts its own re-check within twice its error bound, so a bound near 1 would make
#: the check unable to fail; above this the status is downgraded to ``check_failed``.
ERROR_BOUND_MAX = 1e-6

#: The race integral's left-end series (alternating, terms decreasing) stops once a term is below
#: this times the step h: its truncation error is below the first omitted term, far under
#: WOR_TARGET_ERROR.
WOR_SERIES_CUTOFF = 1e-19
#: The Poisson-summation bound on the trapezoidal excess of the exponential density stops adding
#: terms below this (they decay like exp(-pi^2 m / h) and underflow soon after).
WOR_GAMMA_SERIES_CUTOFF = 1e-300
#: Relative slack on the last node's integrand when it bounds the race integral's right tail: it
#: covers the rounding of that float64 value itself (relative error far below it).
WOR_TAIL_ROUNDING_RTOL = 1e-9
#: Pruning of prefixes in the without-replacement optimum: a prefix is integrated unless its lower
#: bound exceeds the best upper bound by more than this (covers rounding in the cheap bounds).
WOR_PRUNE_MARGIN = 1e-12

#: Cutting planes of the tree optimum (otspec.bounds.tree_node): a Hall condition A(R) <= h(Ms(R))
#: counts as violated above this once the final basis has been re-solved exactly in float64, so
#: what remains is rounding of sums over at most ~1e6 prefixes (~1e-13).
TREE_CUT_TOL = 1e-13
#: Tangent blocks added per cutting-plane round (for the most violated antichain; a block has one
#: row per prefix and enforces the tangent of h at that antichain's draft mass for every antichain).
#: 1 block plus TREE_ANTICHAIN_ROWS_PER_ROUND single-antichain rows per round was the fastest mix
#: measured (V = 20, gamma = 3, k = 4: 17 s; 4 blocks per round and no rows: minutes, V = 8 gamma = 3
#: 47 s; rows only: 2-2.5x slower than the mix).
TREE_CUTS_PER_ROUND = 1
#: Single-antichain rows added per round: the most violated vertices of the separation's chain.
TREE_ANTICHAIN_ROWS_PER_ROUND = 40
#: Safety cap on cutting-plane rounds; reaching it leaves a violation that the certificate reports.
TREE_MAX_CUT_ROUNDS = 500
#: The real-vocabulary tree interval (otspec.bounds.tree_interval): a bucket cut m(S) <= h(Ms(S))
#: violated by less than this is not added (HiGHS' own feasibility tolerance, 1e-10 on rows scaled
#: to right-hand side 1, cannot see smaller ones). Both bounds stay valid whatever is left: the
#: upper bound relaxes the LP, the lower bound's law is moved into the polytope first.
TREE_INTERVAL_CUT_TOL = 1e-9
#: Level-set cuts added per round (the most violated prefixes of the ratio order).
TREE_INTERVAL_CUTS_PER_ROUND = 20
#: Cap on cutting-plane rounds of one interval (status "cut_limit" when reached; bounds still valid).
TREE_INTERVAL_MAX_ROUNDS = 200
#: The interval's cutting planes stop (status "width_tolerance") once they could take at most this
#: share of the width off the upper bound (the dual bound minus the LP's value at a feasible point,
#: over the dual bound minus the explored part of the lower bound). At real vocabulary the width is
#: the unexplored tails' terms and a full loop moves it by ~0.1%; at 1e-4 the bench's mean width is
#: the full loop's to 1e-4 with about half its rounds. A closing interval (everything explored)
#: never stops early: its share is 1 until the cuts converge.
TREE_INTERVAL_CUT_ROOM = 1e-4

#: The KL-budget frontier (otspec.bounds.lossy.kl_frontier) is an exponential-cone program solved by
#: an interior-point method (Clarabel, ~1e-8 relative accuracy); its lower bound (an exact lossless
#: optimum at a feasible output law) and its dual upper bound (re-computed in numpy) are both exact
#: for what they certify, and the solver leaves ~1e-8 between them. A wider gap marks the answer
#: "inaccurate".
KL_FRONTIER_GAP_ATOL = 1e-6

#: Global Resolution stops its convex program when its selection law is this close (L1) to the
#: optimal r*: the acceptance is then within this of alpha* (min(p, .) is 1-Lipschitz).
#: 1e-9 is reached in tens of L-BFGS steps at small V and keeps every exact check at 1e-9.
GR_SELECTION_L1_TOL = 1e-9

"""Single-step verifiers, one module per rule; each module defines the verifier class, its one
instance (re-exported by :mod:`otspec.verifiers`) and the rule's own mathematics.

========================  =====================================================================
module                    rule
========================  =====================================================================
``token``                 single-draft speculative sampling on the first draft (maximal coupling)
``kseq``                  SpecTr's K-SEQ with the optimal division factor
``rrs``                   recursive rejection sampling, drafts with replacement (SpecInfer)
``rrs_wor``               recursive rejection sampling without replacement (RSD)
``greedy_optimal``        the optimum of Hu et al.'s greedy draft law
``spechub``               SpecHub's hub verifier for two greedy drafts
``khisti``                Khisti et al.'s canonical two-step selection
``nss``                   ignore the drafts, sample p
``naive``                 single-draft sampling on X_1 with a residual that may hit other drafts
``optimal_plan``          sample the optimal transport plan of the LP
``optimal_iid``           the exact optimal verifier for i.i.d. drafts at any V
``optimal_wor``           the exact optimal verifier for drafts without replacement (two-level Luce)
``wor_iid``               drafts without replacement at the i.i.d. optimum (hit stream)
``approximate``           a lossy SPRINTER-style rule
``exact_match``           engines' strict rule: sample p, accept iff it is a draft
``one_hot``               speculative sampling against the point mass of a deterministic draft
``typical``               Medusa's typical acceptance (lossy; vLLM's defaults)
``fuzzy``                 accept outright when a divergence of p and q is small (lossy)
``lossy_optimal``         the lossy rule on the exact TV frontier (MATH §16)
``gumbel_coupling``       drafter-invariant Gumbel-max coupling, k = 1 (Daliri et al.)
``gls``                   Gumbel-max list sampling, K shared-exponential drafts (Rowan et al.)
``global_resolution``     Global Resolution: i.i.d. optimum to a tolerance by a convex program
========================  =====================================================================

Instances are reached as ``otspec.verifiers.kseq`` etc.; these modules as
``otspec.verifiers.step.kseq`` (distinct names, so a module never shadows an instance).
"""

__all__: list[str] = []

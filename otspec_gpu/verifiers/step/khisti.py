r"""Khisti et al.'s canonical two-step scheme in torch (twin of ``otspec.verifiers.khisti`` for
i.i.d. drafts).

For k i.i.d. drafts (``otspec.iid(q, k)``, or ``otspec.product`` of identical drafters) the numpy
``khisti`` verifier selects with the closed-form optimal selection law :math:`r^*` and the
threshold-tree rule of ``optimal_iid`` (its canonical selection; see ``docs/verifiers.rst``), so
its kernel *is* the optimal i.i.d. verifier's kernel. This module therefore registers the one
implementation of :mod:`otspec_gpu.verifiers.step.optimal_iid` a second time, under the name
``khisti`` (validation messages name it): the same ``sample``, ``conditional`` and pure
``uniforms`` / ``step`` (the tree-free device draw). The numpy verifier's LP selection for other enumerable
laws (without replacement, explicit, products of different drafters) has no torch twin.
"""

from __future__ import annotations

from otspec_gpu.verifiers.step.optimal_iid import named

__all__ = ["khisti"]

khisti = named("khisti", "Khisti et al. (ICLR 2025) canonical decomposition with the closed-form optimal selection (docs: verifiers)")

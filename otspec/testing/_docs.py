"""Docstring blocks shared by the assertions of :mod:`otspec.testing` (the numpydoc entries each
of them repeats), filled in by :func:`fill_doc`.

A docstring line that holds only ``{name}`` (``name`` a key of :data:`BLOCKS`) is replaced by that
block, indented like the line; nothing else in the docstring changes (so LaTeX braces are safe).
:func:`otspec._docs.filler` (the one implementation) builds it from the table.
"""

from __future__ import annotations

from otspec._docs import filler

__all__ = ["BLOCKS", "fill_doc"]

#: The shared blocks, by name.
BLOCKS: dict[str, str] = {
    "step_args": """verifier : verifier, conditional law, sampler or Verifier subclass
    Any form :func:`otspec.testing.as_verifier` accepts that has what the check uses (a kernel,
    a sampler; see above).
p : array_like, shape (V,)
    Target distribution.
law : DraftLaw
    The draft law (enumerable, V**k small, where the check uses the kernel).""",
    "acceptance_args": """n_samples : int
    Draft tuples for a Monte Carlo acceptance (a sampler without a kernel).
rng : numpy.random.Generator, optional
    Its generator (default ``numpy.random.default_rng(0)``).
optimum : float, optional
    :math:`\\alpha^*` if already known (e.g. from an independent LP).""",
    "sampler_test": """false_alarm : float
    Probability that a correct sampler fails the test.
tv : float
    TV error for which the power is reported.
rng : numpy.random.Generator, optional
    Draws the drafts and drives the sampler (default ``numpy.random.default_rng(0)``: reproducible).""",
    "chain_args": """verifier : ChainVerifier, module or conditional law
    A chain verifier (see :func:`otspec.testing.as_verifier`).
p_model, q_model : Model or callable
    Target :math:`M_b` and draft models over one vocabulary.
gamma : int
    Draft block length.""",
}


#: The decorator of :mod:`otspec.testing`'s assertions (:data:`BLOCKS`).
fill_doc = filler(BLOCKS)

"""Docstring blocks shared across the core (numpydoc entries that several callables repeat),
filled in by decorators made with :func:`filler`.

A docstring line that holds only ``{name}`` (``name`` a key of the table) is replaced by that
block, indented like the line; nothing else in the docstring changes (so LaTeX braces are safe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["BLOCKS", "fill_doc", "filler"]

F = TypeVar("F", bound=Callable)

#: The core's shared blocks, by name.
BLOCKS: dict[str, str] = {
    # Raises entries of the functions that validate a target p, a draft q and a draft count k
    "pq_raises": """InvalidDistributionError, ShapeMismatchError
    If ``p`` or ``q`` is not a distribution, or their vocabularies differ.""",
    "k_raises": """NotAnIntegerError, InvalidDraftCountError
    If ``k`` is not an integer ``>= 1``.""",
    # Raises entries of the methods that take a target p and a draft law (the Verifier contract)
    "p_law_raises": """NotADraftLawError
    If ``law`` is not a draft law.
InvalidDistributionError, ShapeMismatchError
    If ``p`` is not a distribution over the law's vocabulary.""",
    # the arguments of every tuple-level back end of optimal_acceptance (otspec.bounds.lp, cvx, flow, maxflow)
    "backend_args": """p : ndarray, shape (V,)
    Target distribution (the capacities of the token rows).
sets : ndarray of int, shape (S, k)
    Draft sets, ``-1`` padded (:meth:`~otspec.laws.DraftLaw.enumerate_sets`).
weights : ndarray, shape (S,)
    :math:`Q(s)`, the probability of each set (the capacities of the set rows).""",
    # chain verifiers (otspec.verifiers.block, token_chain): models, path arrays, samplers and laws
    "chain_models": """p_model, q_model : Model or callable
    Target :math:`M_b` and draft :math:`M_s` models over one vocabulary (:mod:`otspec.models`).
gamma : int
    Draft block length, ``>= 1``.""",
    "chain_pq_gamma_args": """p_model, q_model : Model or callable
    Target and draft models.
gamma : int
    Draft block length.""",
    "path_raises": """ShapeMismatchError
    If the shapes of ``p_conds``, ``q_conds`` and ``drafts`` do not agree.
InvalidDistributionError, InvalidDraftsError
    If (``validate``) a row is not a distribution or a draft had draft probability 0.""",
    "chain_kernel_raises": """ProblemTooLargeError
    If the enumeration exceeds :data:`otspec.prefixes.MAX_ENUMERATED_PREFIXES` or ``memory_cap``.
NotAnIntegerError, InvalidDraftCountError
    If ``gamma`` is not an integer ``>= 1``.""",
    "chain_sample_raises": """OtspecTypeError
    If ``rng`` is not a ``numpy.random.Generator``.
InvalidDraftsError
    If a draft is out of the vocabulary or had draft probability 0 after its prefix.
InvalidDistributionError, ShapeMismatchError
    If a model is invalid or the vocabularies differ.""",
    "chain_law_raises": """InvalidDraftsError
    If a draft is out of the vocabulary or had draft probability 0 after its prefix.
InvalidDistributionError, ShapeMismatchError
    If a model is invalid, returns a non-distribution, or the vocabularies differ.""",
    "chain_expected_raises": """UnsupportedMethodError
    If ``method`` is neither ``"closed_form"`` nor ``"kernel"``.
ProblemTooLargeError
    If the enumeration exceeds its cap or ``memory_cap``.""",
    # tree verification (otspec.verifiers.tree) and the plots (otspec.plot)
    "tree_args": """p_model, q_model : Model or callable
    Target :math:`M_b` and draft :math:`M_s` models over one vocabulary.
k : int
    Number of drafted sequences.
gamma : int
    Length of each sequence.
verifier : {"kseq", "rrs", "rrs_wor", "optimal", "kseq_bv", "rrs_bv", "rrs_wor_bv"}
    The per-node rule, or a select-then-BV rule (``"rrs_wor"`` and ``"rrs_wor_bv"`` draft the
    first tokens without replacement).""",
    "tree_enum_raises": """UnsupportedMethodError
    If ``verifier`` is not one of :data:`ALL_RULES`.
ProblemTooLargeError
    If more than :data:`otspec.trees.MAX_ENUMERATED_TREES` trees would be enumerated.
NotAnIntegerError, InvalidDraftCountError
    If ``k`` or ``gamma`` is invalid.""",
    "tree_sample_raises": """UnsupportedMethodError
    If ``verifier`` is not one of :data:`ALL_RULES`.
InvalidDraftsError
    If ``tree`` is not ``(k, gamma)`` token ids, a drafted token had draft probability 0 at its
    node, or (``"rrs_wor"``) first tokens repeat.
OtspecTypeError
    If ``rng`` is not a ``numpy.random.Generator``.""",
    "plot_axes_args": """ax : matplotlib Axes, optional
    Where to draw (a new figure if omitted).
title : str, optional
    Axes title.
ylabel : str
    Label of the y axis.""",
    # single-step verifiers and tree enumeration: p, q, k; enumerable laws; k = 1 rules; V, k, gamma
    "pqk_args": """p, q : array_like, shape (V,)
    Target and draft distributions.
k : int
    Number of i.i.d. drafts.""",
    "tree_vkg_args": """V : int
    Vocabulary size.
k : int
    Number of drafted sequences.
gamma : int
    Length of each sequence.""",
    # the options of Verifier.acceptance (and of the overrides that keep its signature)
    "acceptance_method_args": """method : {"auto", "closed_form", "kernel", "monte_carlo"}
    How to compute it.
n_samples : int
    Draft tuples for Monte Carlo (``>= 2``).
rng : numpy.random.Generator, optional
    Generator of the Monte Carlo tuples.""",
    "p_law_args": """p : array_like, shape (V,)
    Target distribution.
law : DraftLaw
    The draft law.""",
    # the weight fits over enumerated draft sets (otspec.verifiers.step._luce_weights)
    "luce_sets_args": """r_star : ndarray, shape (V,)
    Target selection law.
sets, weights : ndarray
    Draft sets (``-1`` padded) and their probabilities.
in_A : ndarray of bool, shape (V,)
    The upper level.""",
    "p_enum_law_args": """p : array_like, shape (V,)
    Target distribution.
law : DraftLaw
    An enumerable draft law.""",
    # the methods of the verifiers of drafts sampled without replacement (optimal_wor, wor_iid)
    "p_wor_law_args": """p : array_like, shape (V,)
    Target distribution.
law : DraftLaw
    A without-replacement draft law.""",
    "wor_law_raises": """NotADraftLawError
    If ``law`` is not a draft law.
InvalidDistributionError, ShapeMismatchError
    If ``p`` is not a distribution over the law's vocabulary.
UnsupportedMethodError
    If ``law`` is not a without-replacement law.""",
    "k1_raises": """InvalidDistributionError, ShapeMismatchError
    If ``p`` is not a distribution over the law's vocabulary.
UnsupportedMethodError
    If ``law.k != 1``.""",
    # the options of the cluster bootstraps (otspec.stats)
    "bootstrap_args": """confidence : float
    Confidence level in (0, 1).
n_resamples : int
    Bootstrap resamples (>= 100).
method : {"BCa", "percentile", "basic"}
    Interval method.
seed : int or numpy.random.Generator, optional
    Seed of the resampling.""",
    # the one argument of every CLI command's register()
    "register_args": """sub : argparse._SubParsersAction
    The subparsers of the ``otspec`` parser (:func:`otspec.cli.build_parser`); the new
    subparser sets ``func`` to :func:`run`.""",
}


def filler(blocks: dict[str, str]) -> Callable[[F], F]:
    """A decorator that replaces every docstring line holding only ``{name}`` by ``blocks[name]``
    (indented like the line).

    Parameters
    ----------
    blocks : dict of str to str
        The blocks by name (numpydoc entries, without indentation).

    Returns
    -------
    callable
        ``fill(obj) -> obj``: fills ``obj.__doc__`` in place (``None`` under ``python -OO``: left
        alone) and raises ``KeyError`` at import when a placeholder names no block.

    Examples
    --------
    >>> @filler({"x": "x : int\\n    A number."})
    ... def f(x):
    ...     '''Parameters
    ...     ----------
    ...     {x}
    ...     '''
    >>> print(f.__doc__.splitlines()[3].strip())
    A number.
    """

    def fill(obj: F) -> F:
        if obj.__doc__:
            out = []
            for line in obj.__doc__.splitlines():
                key = line.strip()
                if len(key) > 2 and key[0] == "{" and key[-1] == "}" and " " not in key:
                    indent = line[: len(line) - len(line.lstrip())]
                    out.extend(indent + b if b else b for b in blocks[key[1:-1]].splitlines())
                else:
                    out.append(line)
            obj.__doc__ = "\n".join(out)
        return obj

    return fill


#: The decorator of the core's callables (:data:`BLOCKS`).
fill_doc = filler(BLOCKS)

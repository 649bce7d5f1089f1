r"""Enumerable context-dependent models for block and tree verification problems.

A *model* is any callable ``prefix -> (V,) distribution``: given the tokens generated so far
(a tuple of ints, possibly empty) it returns the next-token conditional
:math:`M(\cdot \mid x^{i})`. Block and tree verifiers only ever call a model on the prefixes they
enumerate, so a model may be a lookup table, a seeded random function or a wrapper around a real
network's cached outputs.

The constructors here return immutable, deterministic models:

* :func:`dirichlet` -- an independent Dirichlet(:math:`a`) conditional for every prefix, drawn from a
  generator seeded by ``(seed, prefix)`` (so the same prefix always gives the same conditional,
  whatever order the prefixes are visited in);
* :func:`markov` -- the same, but the conditional depends only on the last ``order`` tokens
  (bigram-like for ``order = 1``);
* :func:`close_draft` -- a draft model made from a target: tempered and mixed with seeded
  Dirichlet noise, for realistic acceptance rates;
* :func:`context_free` -- the same conditional at every prefix (the toy of Sun et al.);
* :func:`tabulated` -- an explicit ``{prefix: distribution}`` table;
* :func:`as_model` -- validate any callable: every returned conditional is checked with
  :func:`otspec._validation.as_distribution` and cached.

Every model has a ``V`` attribute and caches its conditionals per prefix.

The package has one module per idea: :mod:`otspec.models.base` (the :class:`Model` protocol,
prefix validation, :func:`as_model`), :mod:`otspec.models.seeded` (the seeded random models),
:mod:`otspec.models.tables` (explicit models) and :mod:`otspec.models.paths` (conditionals along a
path, sampling). Every name is importable from ``otspec.models``.
"""

from __future__ import annotations

from otspec.models.base import CallableModel, Model, as_model, as_prefix
from otspec.models.paths import conditionals_along, sample_path
from otspec.models.seeded import CloseDraftModel, DirichletModel, close_draft, dirichlet, markov
from otspec.models.tables import ContextFreeModel, TabulatedModel, context_free, tabulated

__all__ = [
    "Model",
    "DirichletModel",
    "CloseDraftModel",
    "ContextFreeModel",
    "TabulatedModel",
    "CallableModel",
    "dirichlet",
    "markov",
    "close_draft",
    "context_free",
    "tabulated",
    "as_model",
    "as_prefix",
    "conditionals_along",
    "sample_path",
]

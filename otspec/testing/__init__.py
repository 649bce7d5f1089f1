r"""Test any speculative-decoding verifier the way otspec tests its own (see :doc:`testing`).

Public checks, usable from pytest, a notebook or the ``otspec audit`` command:

* :func:`assert_lossless` -- exact, from the verifier's kernel; :func:`assert_kernel_valid` -- the
  kernel is a well-formed transport plan (lossy verifiers included);
* :func:`assert_sampler_matches` -- the sampler against the kernel, draft tuple by draft tuple
  (chi-square, stated false-alarm rate and power); :func:`assert_sampler_lossless` -- a sampler
  alone against the target;
* :func:`assert_within_optimum` and :func:`acceptance_ratio` -- acceptance against the optimal
  transport bound :func:`otspec.optimal_acceptance`; :func:`assert_acceptance_matches_kernel` --
  a verifier's own acceptance (closed form, Monte Carlo) against its kernel;
* :func:`assert_chain_lossless` / :func:`assert_chain_within_optimum` -- chain (block) verifiers;
* :func:`assert_within_tv_budget` -- a lossy rule within its declared TV budget of the target, and
  its acceptance on or below the lossy frontier :math:`\min(1, \alpha^* + \varepsilon)`;
* :func:`audit` -- the whole battery with the smallest counterexample of every failed property;
* :mod:`otspec.testing.strategies` -- hypothesis strategies for distributions and draft laws
  (imported on first use: ``import otspec.testing`` does not need hypothesis).

A verifier may be a conditional law ``pi(p, q, drafts) -> (V,)``, a sampler
``sample(p, law, drafts, rng) -> token``, or an :class:`otspec.verifiers.Verifier`
(:func:`as_verifier`); with ``otspec_gpu`` installed, also a batched torch verifier.

The rest lives in submodules, one idea each: :mod:`~otspec.testing.forms` and
:mod:`~otspec.testing.chain_forms` (the adapter classes), :mod:`~otspec.testing.adapters`
(detection and loading), :mod:`~otspec.testing.exact`, :mod:`~otspec.testing.samplers`,
:mod:`~otspec.testing.optimum`, :mod:`~otspec.testing.budget` and :mod:`~otspec.testing.chain_asserts`
(the assertions and the result types they return), :mod:`~otspec.testing.results` (the audit report).

Examples
--------
>>> import otspec
>>> from otspec.testing import assert_lossless
>>> def ignore_drafts(p, q, drafts):
...     return p
>>> assert_lossless(ignore_drafts, [0.5, 0.5], otspec.iid([0.9, 0.1], 2))
"""

from otspec.testing._findings import VerifierAssertionError
from otspec.testing.adapters import as_verifier, chain_verifier, conditional_verifier, load_object, sampler_verifier
from otspec.testing.audit import audit
from otspec.testing.budget import assert_within_tv_budget
from otspec.testing.chain_asserts import assert_chain_lossless, assert_chain_within_optimum
from otspec.testing.exact import assert_acceptance_matches_kernel, assert_kernel_valid, assert_lossless
from otspec.testing.optimum import acceptance_ratio, assert_within_optimum
from otspec.testing.samplers import assert_sampler_lossless, assert_sampler_matches

__all__ = [
    "VerifierAssertionError",
    "acceptance_ratio",
    "as_verifier",
    "assert_acceptance_matches_kernel",
    "assert_chain_lossless",
    "assert_chain_within_optimum",
    "assert_kernel_valid",
    "assert_lossless",
    "assert_sampler_lossless",
    "assert_sampler_matches",
    "assert_within_optimum",
    "assert_within_tv_budget",
    "audit",
    "chain_verifier",
    "conditional_verifier",
    "load_object",
    "sampler_verifier",
    "strategies",
]


def __getattr__(name):
    if name == "strategies":  # needs hypothesis: import it only when asked for
        import importlib

        return importlib.import_module("otspec.testing.strategies")
    raise AttributeError(f"module 'otspec.testing' has no attribute {name!r}")

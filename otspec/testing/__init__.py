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
* :func:`audit` -- the whole battery with the smallest counterexample of every failed property;
* :mod:`otspec.testing.strategies` -- hypothesis strategies for distributions and draft laws
  (imported on first use: ``import otspec.testing`` does not need hypothesis).

A verifier may be a conditional law ``pi(p, q, drafts) -> (V,)``, a sampler
``sample(p, law, drafts, rng) -> token``, or an :class:`otspec.verifiers.Verifier`
(:func:`as_verifier`).

Examples
--------
>>> import otspec
>>> from otspec.testing import assert_lossless
>>> def ignore_drafts(p, q, drafts):
...     return p
>>> assert_lossless(ignore_drafts, [0.5, 0.5], otspec.iid([0.9, 0.1], 2))
"""

from otspec.testing.adapters import (
    ChainLaw,
    ChainVerifier,
    ConditionalVerifier,
    InvalidVerifierError,
    SamplerVerifier,
    VerifierOutputError,
    as_verifier,
    chain_verifier,
    conditional_verifier,
    load_object,
    object_spec,
    sampler_verifier,
)
from otspec.testing.asserts import (
    AcceptanceRatio,
    SamplerCheck,
    VerifierAssertionError,
    acceptance_ratio,
    assert_acceptance_matches_kernel,
    assert_chain_lossless,
    assert_chain_within_optimum,
    assert_kernel_valid,
    assert_lossless,
    assert_sampler_lossless,
    assert_sampler_matches,
    assert_within_optimum,
)
from otspec.testing.audit import AuditReport, Counterexample, PropertyResult, audit

__all__ = [
    "AcceptanceRatio",
    "AuditReport",
    "ChainLaw",
    "ChainVerifier",
    "ConditionalVerifier",
    "Counterexample",
    "InvalidVerifierError",
    "PropertyResult",
    "SamplerCheck",
    "SamplerVerifier",
    "VerifierAssertionError",
    "VerifierOutputError",
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
    "audit",
    "chain_verifier",
    "conditional_verifier",
    "load_object",
    "object_spec",
    "sampler_verifier",
    "strategies",
]


def __getattr__(name):
    if name == "strategies":  # needs hypothesis: import it only when asked for
        import importlib

        return importlib.import_module("otspec.testing.strategies")
    raise AttributeError(f"module 'otspec.testing' has no attribute {name!r}")

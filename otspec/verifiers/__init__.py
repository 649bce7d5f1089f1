"""Single-step verifiers: lossless (and one lossy) rules mapping k drafted tokens to one output.

Every verifier has ``name``, ``lossless``, ``applies_to(law)``, ``kernel(p, law)``,
``acceptance(p, law)``, ``sample(p, law, drafts, *, rng)`` (and a vectorised ``sample_batch``).
``ALL`` holds one instance of each (single-step only); :func:`compare` tabulates them against the
optimum.
"""

from otspec.verifiers._common import AcceptanceEstimate, KSeqDetails, Verifier, VerifierKernel
from otspec.verifiers.rsd import rrs_wor, rrs_wor_conditional
from otspec.verifiers.specinfer import rrs, rrs_conditional
from otspec.verifiers.spectr import kseq, kseq_conditional

__all__ = [
    "Verifier",
    "VerifierKernel",
    "AcceptanceEstimate",
    "KSeqDetails",
    "kseq",
    "rrs",
    "rrs_wor",
    "kseq_conditional",
    "rrs_conditional",
    "rrs_wor_conditional",
    "ALL",
]

ALL = (kseq, rrs, rrs_wor)

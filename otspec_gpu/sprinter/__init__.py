"""SPRINTER on real models: a trained approximate verifier and its exact distance from lossless.

* :mod:`otspec_gpu.sprinter.rules` -- pass rules (constant, oracle) and the draft features;
* :mod:`otspec_gpu.sprinter.decoding` -- sequential approximate decoding with exact per-round
  fidelity accounting, summed into a certified bound on the sequence's total-variation distance;
* :mod:`otspec_gpu.sprinter.data` -- labelled datasets from real decoding (prompts split disjointly);
* :mod:`otspec_gpu.sprinter.classifier` -- the trained verifier (logistic regression on cheap
  features plus a small head on the draft's hidden state), its threshold and metrics.

See ``docs/sprinter.rst`` for the mathematics.
"""

from otspec_gpu.sprinter.decoding import DEFAULT_CAP, SprinterResult, decode
from otspec_gpu.sprinter.rules import ConstantPass, Features, OraclePass, PassRule

__all__ = ["DEFAULT_CAP", "ConstantPass", "Features", "OraclePass", "PassRule", "SprinterResult", "decode"]

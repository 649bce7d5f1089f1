"""Deprecated name of :mod:`otspec.verifiers.step.wor_iid` (this module's name in 0.1.0).

The module was renamed after its verifier, like its torch twin ``otspec_gpu.verifiers.step.wor_iid``.
Importing it warns with a :class:`DeprecationWarning` and gives the same objects; it goes in the
next minor release (the version policy, :doc:`versioning`).
"""

import warnings

from otspec.verifiers.step.wor_iid import WorIIDVerifier, hit_string_weights, hit_strings, rebuild_hits, wor_iid

__all__ = ["WorIIDVerifier", "hit_strings", "hit_string_weights", "rebuild_hits", "wor_iid"]

warnings.warn(
    "otspec.verifiers.step.iid_embedding_wor is deprecated: import otspec.verifiers.step.wor_iid (the same names); "
    "the old module goes in the next minor release",
    DeprecationWarning,
    stacklevel=2,
)

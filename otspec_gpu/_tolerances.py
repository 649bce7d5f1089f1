"""Every numeric tolerance of the torch side, named once, with the reason for its size (twin of
:mod:`otspec._tolerances`). Tests import these names instead of repeating numbers.
"""

from __future__ import annotations

import torch

__all__ = ["SUM_TOL"]

#: Row sums of p and q must be within this distance of 1, by input dtype. float32: a sum over
#: 262 144 rounded entries drifts by up to ~1e-5, so 1e-4 leaves margin; float64: the numpy core's
#: :data:`otspec._tolerances.SIMPLEX_SUM_ATOL`.
SUM_TOL = {torch.float32: 1e-4, torch.float64: 1e-9}

r"""The distillation objective of the trained drafts and the acceptance it aims at.

For target logits :math:`z_p` and draft logits :math:`z_q` over the full vocabulary (temperature 1),

.. math::

    \mathrm{KL}(p \,\|\, q) = \sum_x p(x) \big(\log p(x) - \log q(x)\big), \qquad
    \alpha(p, q) = \sum_x \min\big(p(x), q(x)\big) = 1 - \mathrm{TV}(p, q),

where :math:`\alpha` is the single-draft acceptance probability of speculative sampling (Leviathan
et al. 2023; Chen et al. 2023). Minimising the forward KL keeps :math:`q` positive wherever
:math:`p` is, and Pinsker's inequality bounds :math:`1 - \alpha \le \sqrt{\mathrm{KL}/2}`.

Examples
--------
>>> import torch
>>> z = torch.tensor([[0.0, 1.0, 2.0]])
>>> kl, alpha = kl_and_acceptance(z, z)
>>> float(kl), round(float(alpha), 6)
(0.0, 1.0)
"""

from __future__ import annotations

import torch

__all__ = ["kl_and_acceptance"]


def kl_and_acceptance(p_logits: torch.Tensor, q_logits: torch.Tensor, *, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Mean :math:`\mathrm{KL}(p \| q)` (differentiable in ``q_logits``) and mean :math:`\alpha(p, q)` (detached).

    Parameters
    ----------
    p_logits : torch.Tensor
        ``[N, V]`` target logits (treated as constants).
    q_logits : torch.Tensor
        ``[N, V]`` draft logits.
    temperature : float
        Both are divided by it first.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        Scalars: the mean KL in nats and the mean acceptance over the ``N`` rows.
    """
    logp = torch.log_softmax(p_logits.detach().float() / temperature, dim=-1)
    logq = torch.log_softmax(q_logits.float() / temperature, dim=-1)
    p = logp.exp()
    kl = (p * (logp - logq)).sum(-1).mean()
    alpha = torch.minimum(p, logq.detach().exp()).sum(-1).mean()
    return kl, alpha

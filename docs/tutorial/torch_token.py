"""Single-draft speculative sampling written for a serving engine: batched, on tensors, any device.

The otspec_gpu protocol: ``conditional(p, q, drafts) -> [B, V]`` (the exact output law of each row)
and ``sample(p, q, drafts, *, generator) -> [B]`` tokens, with ``p``, ``q`` ``[B, V]`` (or
``[1, V]``) probability rows and ``drafts`` ``[B, 1]`` long.
"""

import torch


class TokenRule:
    name = "torch_token"
    draft_law = "iid"  # the drafts are i.i.d. from q
    k_min = k_max = 1  # one draft per row
    lossless = True

    def conditional(self, p, q, drafts):
        B = drafts.shape[0]
        p, q = p.expand(B, -1), q.expand(B, -1)  # [B, V]
        x = drafts[:, :1]  # [B, 1]
        keep = (p.gather(1, x) / q.gather(1, x)).clamp(max=1.0)  # [B, 1]: min(1, p(x) / q(x))
        residual = (p - q).clamp_min(0)  # [B, V]: (p - q)_+
        mass = residual.sum(-1, keepdim=True)
        residual = torch.where(mass > 0, residual / mass.clamp_min(1e-300), p)
        return ((1 - keep) * residual).scatter_add(1, x, keep)

    def sample(self, p, q, drafts, *, generator):
        return torch.multinomial(self.conditional(p, q, drafts), 1, generator=generator)[:, 0]


token_rule = TokenRule()

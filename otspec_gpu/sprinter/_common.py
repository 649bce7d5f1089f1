"""Pieces shared by the SPRINTER modules: errors, forwards with hidden states, sampling."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from otspec.errors import SprinterInputError
from otspec_gpu.decoding import _multinomial
from otspec_gpu.decoding import _probs as _decoder_probs

__all__ = ["Scorer", "SprinterInputError", "generators", "multinomial", "probs"]


def probs(logits: torch.Tensor, temperature: float = 1.0, top_k=None, top_p=None) -> torch.Tensor:
    """float64 probabilities after the transform shared by target and draft (the decoder's own)."""
    return _decoder_probs(logits, temperature, top_k, top_p)


#: One index per row of ``p`` [R, V] (float64) from ``generator``, by inverse CDF: the decoder's own.
multinomial = _multinomial


def generators(seed: int, n: int, device: Any = "cpu") -> tuple[torch.Generator, ...]:
    """``n`` independent ``torch.Generator`` streams spawned from one seed (numpy ``SeedSequence``)."""
    out = []
    for s in np.random.SeedSequence(int(seed)).spawn(n):
        g = torch.Generator(device=device)
        g.manual_seed(int(s.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
        out.append(g)
    return tuple(out)


class Scorer:
    """Logits (and the last hidden layer) of one model at the last positions of token sequences.

    ``cached=True`` keeps one ``transformers`` KV cache for a single sequence that is extended and
    rolled back between calls (the common prefix with what the cache holds is reused; the rest is
    cropped and re-fed). ``cached=False`` runs cache-free forwards over a left-padded batch of any
    number of sequences (exact, and fast for the tiny test models). ``calls`` counts forwards.
    """

    def __init__(self, lm: Any, *, cached: bool, hidden: bool = False):
        self.lm, self.cached, self.hidden = lm, bool(cached), bool(hidden)
        self.calls = 0
        self._fed: list[int] = []
        self._cache = None
        self.device = next(lm.model.parameters()).device

    def _forward(self, ids, attn, pos, cache):
        out = self.lm.model(
            input_ids=ids,
            attention_mask=attn,
            position_ids=pos,
            past_key_values=cache,
            use_cache=cache is not None,
            output_hidden_states=self.hidden,
        )
        lg = out.logits.float()
        if self.lm.logit_temperature != 1.0:
            lg = lg / self.lm.logit_temperature
        hid = out.hidden_states[-1].float() if self.hidden else None
        return lg, hid

    @torch.no_grad()
    def __call__(self, seqs: list[list[int]], n_last: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Per sequence ``r``: logits ``[n_last[r], V]`` at its last ``n_last[r]`` positions (and hidden ``[n_last[r], H]``)."""
        self.calls += 1
        if self.cached:
            if len(seqs) != 1:
                raise SprinterInputError(f"a cached scorer handles one sequence at a time (got {len(seqs)}); use cached=False for batches")
            from transformers import DynamicCache

            seq, n = seqs[0], n_last[0]
            c = 0
            for a, b in zip(self._fed, seq, strict=False):
                if a != b:
                    break
                c += 1
            s = min(c, len(seq) - n)
            if s <= 0:
                self._cache, self._fed, s = DynamicCache(), [], 0
            elif len(self._fed) > s:
                self._cache.crop(-(len(self._fed) - s))
                self._fed = self._fed[:s]
            ids = torch.tensor([seq[s:]], device=self.device)
            pos = torch.arange(s, len(seq), device=self.device).unsqueeze(0)
            lg, hid = self._forward(ids, None, pos, self._cache)
            self._fed = list(seq)
            return [lg[0, -n:]], [hid[0, -n:] if hid is not None else None]
        W = max(len(s) for s in seqs)
        ids_np = np.zeros((len(seqs), W), dtype=np.int64)
        mask_np = np.zeros((len(seqs), W), dtype=np.int64)
        for r, s in enumerate(seqs):
            ids_np[r, W - len(s) :] = s
            mask_np[r, W - len(s) :] = 1
        ids, mask = torch.from_numpy(ids_np), torch.from_numpy(mask_np)
        pos = (mask.cumsum(1) - 1).clamp_min(0)
        attn = None if bool(mask.all()) else mask.to(self.device)
        lg, hid = self._forward(ids.to(self.device), attn, pos.to(self.device), None)
        return [lg[r, W - n :] for r, n in enumerate(n_last)], [hid[r, W - n :] if hid is not None else None for r, n in enumerate(n_last)]

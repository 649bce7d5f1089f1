r"""The scorer: every forward pass of a model in the decoding harness, and its key/value caches.

One function runs a model (:func:`forward`: logits divided by the model's logit temperature
:math:`T_0`, optionally the last hidden layer); two caches keep what was fed:

* :class:`RowCache` -- the speculative decoder's cache over ``R`` rows with a boolean *validity
  mask* over cache positions. Rolled-back positions that every row rejected are cropped
  (``cache.crop(-n)``); positions rejected by some rows only stay with validity 0 and are masked
  out of attention, and each row's position ids count its valid tokens only.
* :class:`DecodeCaches` -- the target's and the draft's :class:`RowCache` of one decoding run,
  the tokens each has not seen yet, and the rollback to the emitted prefix after a round. The draft
  is one token behind after a fully accepted block (it never saw ``x_gamma``); it then feeds two
  tokens next round.
* :class:`SequenceScorer` -- SPRINTER's scorer of whole token sequences: one cached sequence that
  is extended and rolled back between calls (the common prefix is reused), or cache-free forwards
  over a left-padded batch.

Both count their forwards in ``calls``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from otspec.errors import SprinterInputError

__all__ = ["DecodeCaches", "RowCache", "SequenceScorer", "forward"]


@torch.no_grad()
def forward(lm: Any, ids: torch.Tensor, *, attention_mask=None, position_ids=None, cache=None, hidden: bool = False):
    """One forward of ``lm`` (an :class:`otspec_gpu.models.LM`) over ``ids`` ``[B, L]``.

    Parameters
    ----------
    lm : otspec_gpu.models.LM
        The model (its ``model`` and ``logit_temperature`` are used).
    ids : torch.Tensor
        ``[B, L]`` int64 token ids.
    attention_mask : torch.Tensor, optional
        ``[B, L_total]`` mask over the cached and new positions (0 at left padding).
    position_ids : torch.Tensor, optional
        ``[B, L]`` positions of the new tokens.
    cache : transformers.Cache, optional
        Key/value cache of the earlier positions, updated in place; ``None`` runs without a cache.
    hidden : bool
        Also return the last hidden layer.

    Returns
    -------
    (torch.Tensor, torch.Tensor or None)
        ``[B, L, V]`` float32 logits :math:`z / T_0` and, with ``hidden``, ``[B, L, H]`` float32
        hidden states (else ``None``).
    """
    out = lm.model(
        input_ids=ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=cache is not None,
        output_hidden_states=hidden,
    )
    lg = out.logits.float()
    if lm.logit_temperature != 1.0:
        lg = lg / lm.logit_temperature
    return lg, (out.hidden_states[-1].float() if hidden else None)


class RowCache:
    """One model's cache over ``rows`` rows, a validity mask over cache positions, and the rollback.

    Parameters
    ----------
    lm : otspec_gpu.models.LM
        The model fed.
    rows : int
        Number of rows ``R``.
    device : torch.device
        Device of the mask.
    """

    def __init__(self, lm: Any, rows: int, device: torch.device):
        from transformers import DynamicCache

        self.lm = lm
        self.cache = DynamicCache()
        self.mask = torch.zeros(rows, 0, dtype=torch.bool, device=device)
        self.calls = 0

    def feed(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` ``[R, n]`` (``valid`` ``[R, n]`` marks real tokens).

        Parameters
        ----------
        ids : torch.Tensor
            ``[R, n]`` token ids.
        valid : torch.Tensor
            ``[R, n]`` bool, False at padding.

        Returns
        -------
        torch.Tensor
            ``[R, n, V]`` float32 logits.
        """
        return self.feed_hidden(ids, valid, hidden=False)[0]

    def feed_hidden(self, ids: torch.Tensor, valid: torch.Tensor, *, hidden: bool = True):
        """Feed ``ids`` ``[R, n]`` and return the logits and (with ``hidden``) the last hidden layer.

        Parameters
        ----------
        ids : torch.Tensor
            ``[R, n]`` token ids.
        valid : torch.Tensor
            ``[R, n]`` bool, False at padding.
        hidden : bool
            Also return the last hidden layer.

        Returns
        -------
        (torch.Tensor, torch.Tensor or None)
            ``[R, n, V]`` float32 logits and ``[R, n, H]`` float32 hidden states (or ``None``).
        """
        pos = self.mask.sum(1, keepdim=True)  # [R, 1] valid tokens so far
        position_ids = (pos + torch.cumsum(valid.long(), 1) - 1).clamp_min(0)
        self.mask = torch.cat([self.mask, valid], 1)
        attn = None if bool(self.mask.all()) else self.mask.long()
        self.calls += 1
        return forward(self.lm, ids, attention_mask=attn, position_ids=position_ids, cache=self.cache, hidden=hidden)

    def select(self, rows: torch.Tensor) -> None:
        """Reorder / duplicate rows: row ``r`` becomes old row ``rows[r]``.

        Parameters
        ----------
        rows : torch.Tensor
            ``[R]`` long source rows.
        """
        self.cache.reorder_cache(rows)
        self.mask = self.mask.index_select(0, rows)

    def keep(self, n_fed: int, keep: torch.Tensor) -> None:
        """Roll back: of the last ``n_fed`` cache positions, row ``r`` keeps the first ``keep[r]``.

        Parameters
        ----------
        n_fed : int
            Positions fed since the last rollback.
        keep : torch.Tensor
            ``[R]`` long, how many of them each row keeps.
        """
        L = self.mask.shape[1]
        col = torch.arange(n_fed, device=self.mask.device)
        tail = self.mask[:, L - n_fed :] & (col.unsqueeze(0) < keep.unsqueeze(1))
        self.mask = torch.cat([self.mask[:, : L - n_fed], tail], 1)
        drop = n_fed - int(keep.max())
        if drop > 0:
            self.cache.crop(-drop)
            self.mask = self.mask[:, : L - drop]


class SequenceScorer:
    """Logits (and the last hidden layer) of one model at the last positions of token sequences.

    ``cached=True`` keeps one ``transformers`` KV cache for a single sequence that is extended and
    rolled back between calls (the common prefix with what the cache holds is reused; the rest is
    cropped and re-fed). ``cached=False`` runs cache-free forwards over a left-padded batch of any
    number of sequences (exact, and fast for the tiny test models). ``calls`` counts forwards.

    Parameters
    ----------
    lm : otspec_gpu.models.LM
        The model.
    cached : bool
        One cached sequence, or cache-free batches.
    hidden : bool
        Also return the last hidden layer.
    """

    def __init__(self, lm: Any, *, cached: bool, hidden: bool = False):
        self.lm, self.cached, self.hidden = lm, bool(cached), bool(hidden)
        self.calls = 0
        self.fed: list[int] = []
        self.cache = None
        self.device = next(lm.model.parameters()).device

    def __call__(self, seqs: list[list[int]], n_last: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Per sequence ``r``: logits ``[n_last[r], V]`` at its last ``n_last[r]`` positions.

        Parameters
        ----------
        seqs : list of list of int
            Token sequences (exactly one when cached).
        n_last : list of int
            How many last positions to return per sequence.

        Returns
        -------
        (list of torch.Tensor, list of torch.Tensor or None)
            The logits and (with ``hidden``) the hidden states ``[n_last[r], H]`` per sequence.

        Raises
        ------
        SprinterInputError
            If a cached scorer is given more than one sequence.
        """
        self.calls += 1
        if self.cached:
            if len(seqs) != 1:
                raise SprinterInputError(f"a cached scorer handles one sequence at a time (got {len(seqs)}); use cached=False for batches")
            return self._cached(seqs[0], n_last[0])
        W = max(len(s) for s in seqs)
        ids_np = np.zeros((len(seqs), W), dtype=np.int64)
        mask_np = np.zeros((len(seqs), W), dtype=np.int64)
        for r, s in enumerate(seqs):
            ids_np[r, W - len(s) :] = s
            mask_np[r, W - len(s) :] = 1
        ids, mask = torch.from_numpy(ids_np), torch.from_numpy(mask_np)
        pos = (mask.cumsum(1) - 1).clamp_min(0)
        attn = None if bool(mask.all()) else mask.to(self.device)
        lg, hid = forward(self.lm, ids.to(self.device), attention_mask=attn, position_ids=pos.to(self.device), hidden=self.hidden)
        return [lg[r, W - n :] for r, n in enumerate(n_last)], [hid[r, W - n :] if hid is not None else None for r, n in enumerate(n_last)]

    def _cached(self, seq: list[int], n: int):
        from transformers import DynamicCache

        c = 0
        for a, b in zip(self.fed, seq, strict=False):
            if a != b:
                break
            c += 1
        s = min(c, len(seq) - n)
        if s <= 0:
            self.cache, self.fed, s = DynamicCache(), [], 0
        elif len(self.fed) > s:
            self.cache.crop(-(len(self.fed) - s))
            self.fed = self.fed[:s]
        ids = torch.tensor([seq[s:]], device=self.device)
        pos = torch.arange(s, len(seq), device=self.device).unsqueeze(0)
        lg, hid = forward(self.lm, ids, position_ids=pos, cache=self.cache, hidden=self.hidden)
        self.fed = list(seq)
        return [lg[0, -n:]], [hid[0, -n:] if hid is not None else None]


class DecodeCaches:
    """The target's and the draft's caches over ``R = B k`` rows in one decoding run.

    Every prompt is left-padded to one width and repeated ``k`` times (its ``k`` draft rows); the
    prompt but its last token is fed to both models at construction (the prefill).

    Parameters
    ----------
    target : otspec_gpu.models.LM
        The target model.
    draft : otspec_gpu.models.LM or None
        The draft model (``None``: drafts that need no model, such as prompt lookup; then
        :meth:`next_q` must not be called).
    prompts : list of list of int
        Token ids per prompt.
    k : int
        Draft rows per prompt.
    transform : callable
        ``transform(logits [..., V]) -> probabilities`` (the same for both models).
    device : torch.device
        Where the models live.
    hidden : bool
        Keep the target's **feature** for drafters that read it (a source with
        ``needs_target_hidden``): :attr:`hidden` ``[R, H]`` is the target's last hidden layer at the
        position before ``last`` of each row -- the position whose law ``last`` was drawn from -- after
        the prefill and after every :meth:`rollback` (the fed position ``target_keep - 1`` of the row
        each row became). A row whose prompt has no position before ``last`` (a one-token prompt)
        holds zeros.
    """

    def __init__(self, target: Any, draft: Any, prompts: list, k: int, transform, device: torch.device, hidden: bool = False):
        B, width = len(prompts), max(len(p) for p in prompts)
        ids_np = np.zeros((B, width), dtype=np.int64)
        valid_np = np.zeros((B, width), dtype=bool)
        for b, pr in enumerate(prompts):
            ids_np[b, width - len(pr) :] = pr
            valid_np[b, width - len(pr) :] = True
        ids = torch.from_numpy(ids_np).repeat_interleave(k, 0).to(device)
        valid = torch.from_numpy(valid_np).repeat_interleave(k, 0).to(device)
        self.k, self.transform = k, transform
        self.target = RowCache(target, B * k, device)
        self.draft = RowCache(draft, B * k, device) if draft is not None else None
        self.prefilled = width > 1
        self.keep_hidden = bool(hidden)
        self.hidden = None  # [R, H] the target's feature before `last` (with keep_hidden)
        self._scored_hidden = None  # [R, gamma + 1, H] of the last score
        if self.keep_hidden and not self.prefilled:
            H = target.model.get_output_embeddings().weight.shape[1]
            self.hidden = torch.zeros(B * k, H, device=device)
        if self.prefilled:
            _, hid = self.target.feed_hidden(ids[:, :-1], valid[:, :-1], hidden=self.keep_hidden)
            if self.keep_hidden:  # a one-token prompt has no position before `last`: zeros
                self.hidden = hid[:, -1] * valid[:, -2:-1]
            if self.draft is not None:
                self.draft.feed(ids[:, :-1], valid[:, :-1])
        self.last = ids[:, -1]  # [R] the last emitted token, not yet fed to the target
        self.pend = self.last.unsqueeze(1)  # [R, w] tokens not yet fed to the draft
        self.pend_valid = torch.ones_like(self.pend, dtype=torch.bool)
        self.draft_fed = 0

    def next_q(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` ``[R, n]`` to the draft and return its processed conditionals ``[R, V]`` after them.

        Parameters
        ----------
        ids : torch.Tensor
            ``[R, n]`` token ids.
        valid : torch.Tensor
            ``[R, n]`` bool, False at padding.

        Returns
        -------
        torch.Tensor
            ``[R, V]`` probabilities (:attr:`transform` of the last logits).
        """
        self.draft_fed += ids.shape[1]
        return self.transform(self.draft.feed(ids, valid)[:, -1])

    def score(self, X: torch.Tensor) -> torch.Tensor:
        """One target forward over ``[last, x_1, ..., x_gamma]`` for every row.

        Parameters
        ----------
        X : torch.Tensor
            ``[R, gamma]`` drafted tokens.

        Returns
        -------
        torch.Tensor
            ``[R, gamma + 1, V]`` processed target conditionals along each row.
        """
        ids = torch.cat([self.last.unsqueeze(1), X], 1)
        logits, self._scored_hidden = self.target.feed_hidden(ids, torch.ones_like(ids, dtype=torch.bool), hidden=self.keep_hidden)
        return self.transform(logits)

    def target_keep(self, tau: torch.Tensor, gamma: int) -> torch.Tensor:
        """Positions of the ``gamma + 1`` fed to the target that each row keeps: ``1 + tau``.

        Parameters
        ----------
        tau : torch.Tensor
            ``[R]`` accepted drafts per row.
        gamma : int
            Draft length.

        Returns
        -------
        torch.Tensor
            ``[R]`` long.
        """
        return 1 + tau

    def rollback(self, chosen: torch.Tensor, tau: torch.Tensor, next_token: torch.Tensor, X: torch.Tensor) -> None:
        """Roll both caches back to the emitted prefix (every row of a prompt becomes its ``chosen`` row).

        Parameters
        ----------
        chosen : torch.Tensor
            ``[B]`` row whose drafts were followed.
        tau : torch.Tensor
            ``[B]`` accepted drafts.
        next_token : torch.Tensor
            ``[B]`` correction or bonus token (the new last emitted token).
        X : torch.Tensor
            ``[R, gamma]`` the round's drafts.
        """
        k, g = self.k, X.shape[1]
        sel = chosen.repeat_interleave(k)
        if k > 1:
            self.target.select(sel)
            if self.draft is not None:
                self.draft.select(sel)
        tau_r = tau.repeat_interleave(k)
        keep = self.target_keep(tau_r, g)
        self.target.keep(g + 1, keep)
        if self.keep_hidden:  # the last kept position's feature: the law the new `last` came from
            self.hidden = self._scored_hidden[sel, keep - 1]
        if self.draft is not None:
            self.draft.keep(self.draft_fed, self.pend.shape[1] + torch.clamp(tau_r, max=g - 1))
        y_r = next_token.repeat_interleave(k)
        full = tau_r == g
        if bool(full.any()):
            self.pend = torch.stack([X[sel, g - 1], y_r], 1)
            self.pend_valid = torch.stack([full, torch.ones_like(full)], 1)
        else:
            self.pend = y_r.unsqueeze(1)
            self.pend_valid = torch.ones_like(self.pend, dtype=torch.bool)
        self.last = y_r
        self.draft_fed = 0

    def calls(self) -> tuple[int, int]:
        """Target and draft forwards after the prefill.

        Returns
        -------
        (int, int)
            ``(target_calls, draft_calls)``.
        """
        pre = 1 if self.prefilled else 0
        return self.target.calls - pre, (self.draft.calls - pre if self.draft is not None else 0)

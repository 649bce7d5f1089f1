r"""Distilling the three trained drafts from the target's cached features.

Every draft is trained to minimise :math:`\mathrm{KL}(p \,\|\, q)` at temperature 1
(:mod:`otspec_gpu.training.objective`), where :math:`p` is recomputed on the fly from the stored
last hidden layer through the target's frozen output layer :math:`W` (so
:math:`p_t = \mathrm{softmax}(W h_t)`, the law of :math:`x_{t+1}`):

``exit`` (:class:`~otspec_gpu.models.early_exit.ExitHead`, draft ``<target>-exit<L>``)
    :math:`q_t = \mathrm{softmax}(W\,\mathrm{exit}(x^{(L)}_t))` against :math:`p_t`, from the stored
    residual stream after layer :math:`L`.
``medusa`` (:class:`~otspec_gpu.models.heads.MedusaHeads`)
    head :math:`i` reads :math:`h_t` and is trained against :math:`p_{t+1+i}` (the law of
    :math:`x_{t+2+i}`); the loss is the sum over heads.
``eagle`` (:class:`~otspec_gpu.models.heads.EagleHead`)
    two steps unrolled as at drafting, :math:`\hat f_{t+1} = g(h_t, x_{t+1})` and
    :math:`\hat f_{t+2} = g(\hat f_{t+1}, x_{t+2})`, each against :math:`p_{t+1}, p_{t+2}` plus a
    smooth-L1 regression of :math:`\hat f` on the true features :math:`h_{t+1}, h_{t+2}` (EAGLE's
    feature loss).

Positions are drawn uniformly (with replacement) from the training sequences by one seeded
``torch.Generator``; every twentieth sequence is held out and its first 2 048 valid positions give
the reported validation KL and acceptance :math:`\alpha = \sum_x \min(p, q)` (before and after
training). AdamW with a linear warm-up and a cosine decay. Deterministic given the seed and the
thread count.

Examples
--------
>>> parse_draft_name("smollm2-exit8")
('smollm2', 'exit', 8)
>>> parse_draft_name("smollm2-medusa")
('smollm2', 'medusa', None)
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import torch
from torch import nn

from otspec.errors import UnknownModelError
from otspec_gpu.training.objective import kl_and_acceptance

__all__ = ["DEFAULTS", "TRAINED_DRAFTS", "parse_draft_name", "train_head"]

#: The trained draft names (``<L>`` an early-exit depth).
TRAINED_DRAFTS = ("smollm2-exit<L>", "smollm2-medusa", "smollm2-eagle")

#: Default optimisation settings per kind: steps, positions per step, peak learning rate.
#: Sized so that each draft trains in about 5-25 minutes on one shared CPU thread (every position
#: costs three full-vocabulary products per drafted step: target law, draft law, its gradient).
DEFAULTS = {
    "exit": {"steps": 250, "batch": 128, "lr": 3e-3},
    "medusa": {"steps": 150, "batch": 128, "lr": 3e-3, "n_heads": 3},
    "eagle": {"steps": 300, "batch": 128, "lr": 3e-3},
}

_NAME = re.compile(r"^(?P<target>[a-z0-9.]+?)-(?:exit(?P<layers>[0-9]+)|(?P<kind>medusa|eagle))$")

_VAL_EVERY = 20  # every twentieth sequence is held out
_VAL_POSITIONS = 2048


def parse_draft_name(name: str) -> tuple[str, str, int | None]:
    """``(target, kind, layers)`` of a trained draft name.

    Parameters
    ----------
    name : str
        ``"<target>-exit<L>"``, ``"<target>-medusa"`` or ``"<target>-eagle"``.

    Returns
    -------
    (str, str, int or None)
        The target's name, ``"exit"`` / ``"medusa"`` / ``"eagle"``, and ``L`` for an early exit.

    Raises
    ------
    UnknownModelError
        If ``name`` has none of these forms.
    """
    m = _NAME.match(name) if isinstance(name, str) else None
    if m is None:
        raise UnknownModelError(f"unknown trained draft {name!r}; pick one of {TRAINED_DRAFTS} (L a layer count, e.g. smollm2-exit8)")
    if m.group("layers") is not None:
        return m.group("target"), "exit", int(m.group("layers"))
    return m.group("target"), m.group("kind"), None


def _positions(seq: torch.Tensor, ahead: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and validation positions ``t`` whose sequence still runs at ``t + ahead``."""
    n = seq.shape[0]
    t = torch.arange(n - ahead)
    ok = seq[t + ahead] == seq[t]
    held = (seq[t] % _VAL_EVERY) == 0
    return t[ok & ~held], t[ok & held][:_VAL_POSITIONS]


def _schedule(step: int, steps: int, lr: float) -> float:
    warm = max(1, steps // 20)
    if step < warm:
        return lr * (step + 1) / warm
    frac = (step - warm) / max(1, steps - warm)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


class _Task:
    """One draft kind's loss over positions ``idx``: ``loss(idx) -> (loss, [kl per step], [alpha per step])``."""

    def __init__(self, kind: str, head: nn.Module, feats: dict, lm_head, embedding, layers: int | None):
        self.kind, self.head, self.lm_head, self.embedding = kind, head, lm_head, embedding
        self.h = feats["h_last"]
        self.x_exit = feats.get(f"h_{layers}") if layers is not None else None
        self.tokens = feats["tokens"].long()
        self.ahead = {"exit": 0, "medusa": getattr(head, "n_heads", 1), "eagle": 2}[kind]

    def _p(self, idx: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.lm_head(self.h[idx].float())

    def loss(self, idx: torch.Tensor):
        if self.kind == "exit":
            kl, a = kl_and_acceptance(self._p(idx), self.lm_head(self.head(self.x_exit[idx].float())))
            return kl, [kl.detach()], [a]
        if self.kind == "medusa":
            q = self.head(self.h[idx].float(), self.lm_head)  # [B, n, V]
            pairs = [kl_and_acceptance(self._p(idx + 1 + i), q[:, i]) for i in range(q.shape[1])]
            return sum(k for k, _ in pairs), [k.detach() for k, _ in pairs], [a for _, a in pairs]
        f = self.h[idx].float()
        total, kls, alphas = 0.0, [], []
        for s in (1, 2):
            f = self.head.features(f, self.tokens[idx + s], self.embedding)
            true = self.h[idx + s].float()
            kl, a = kl_and_acceptance(self._p(idx + s), self.lm_head(f))
            total = total + kl + nn.functional.smooth_l1_loss(f, true)
            kls.append(kl.detach())
            alphas.append(a)
        return total, kls, alphas

    def evaluate(self, idx: torch.Tensor) -> dict:
        kls, alphas, n = None, None, 0
        with torch.no_grad():
            for c in idx.split(256):
                _, k, a = self.loss(c)
                w = c.shape[0]
                kls = [w * float(v) for v in k] if kls is None else [s + w * float(v) for s, v in zip(kls, k, strict=True)]
                alphas = [w * float(v) for v in a] if alphas is None else [s + w * float(v) for s, v in zip(alphas, a, strict=True)]
                n += w
        return {"kl": [round(v / n, 4) for v in kls], "alpha": [round(v / n, 4) for v in alphas], "positions": n}


# long-function: the optimisation loop with its logging and the before/after validation in one place
def train_head(
    kind: str,
    head: nn.Module,
    feats: dict,
    *,
    lm_head,
    embedding=None,
    layers: int | None = None,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    log=None,
) -> dict:
    r"""Train ``head`` in place on cached features and return the training record.

    Parameters
    ----------
    kind : {"exit", "medusa", "eagle"}
        Which objective (see the module docstring).
    head : torch.nn.Module
        :class:`~otspec_gpu.models.early_exit.ExitHead`, :class:`~otspec_gpu.models.heads.MedusaHeads`
        or :class:`~otspec_gpu.models.heads.EagleHead` (trainable parameters only).
    feats : dict of torch.Tensor
        ``tokens``, ``seq``, ``h_last`` and, for ``exit``, ``h_<layers>``
        (:func:`~otspec_gpu.training.features.load_features`, as tensors).
    lm_head : torch.nn.Module
        The target's frozen output layer.
    embedding : torch.nn.Module, optional
        The target's frozen token embedding (``eagle``).
    layers : int, optional
        The early-exit depth (``exit``).
    steps, batch : int
        Optimiser steps and positions per step.
    lr : float
        Peak learning rate.
    seed : int
        Seed of the position draws.
    log : callable, optional
        Progress lines.

    Returns
    -------
    dict
        ``steps``, ``batch``, ``lr``, ``seed``, ``train_positions``, ``validation`` (``before`` and
        ``after``: mean KL and acceptance per drafted step), ``final_train_kl`` and ``seconds``.
    """
    task = _Task(kind, head, feats, lm_head, embedding, layers)
    train_pos, val_pos = _positions(feats["seq"], task.ahead)
    gen = torch.Generator().manual_seed(int(seed))
    before = task.evaluate(val_pos)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    t0 = time.time()
    recent: list[float] = []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = _schedule(step, steps, lr)
        idx = train_pos[torch.randint(len(train_pos), (batch,), generator=gen)]
        loss, kls, _ = task.loss(idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        recent = (recent + [float(sum(kls))])[-50:]
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log(f"{kind} step {step}/{steps}: KL {float(sum(kls)):.3f} (mean of last 50 {np.mean(recent):.3f}), {time.time() - t0:.0f} s")
    seconds = time.time() - t0
    head.eval()
    after = task.evaluate(val_pos)
    if log is not None:
        log(f"{kind} validation: before {before}, after {after}")
    return {
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "seed": int(seed),
        "train_positions": int(len(train_pos)),
        "validation": {"before": before, "after": after},
        "final_train_kl": round(float(np.mean(recent)), 4) if recent else None,
        "seconds": round(seconds, 1),
        "threads": torch.get_num_threads(),
    }

r"""Labelled data for SPRINTER's verifier, collected from real decoding.

For every prompt the draft samples ``max_new_tokens`` tokens :math:`x_t \sim q_t` (the tokens a
SPRINTER run would keep unchecked are draft samples, so the classifier is trained on the contexts
it will see); one target forward over the whole sequence then gives every :math:`p_t`. Each drafted
position is one example:

* features: the draft's last hidden state :math:`h_t` at the position that produced
  :math:`q_t` (context only), the entropy :math:`H(q_t)`, :math:`q_t(x_t)`, the position ``t``;
* labels: :math:`1\{q_t(x_t) \le p_t(x_t)\}` (SPRINTER's label: tokens the exact rule always
  keeps) and the soft label :math:`\min(1, p_t(x_t)/q_t(x_t))` (the exact rule's keep
  probability);
* also :math:`p_t(x_t)`, :math:`d_{TV}(p_t, q_t)` and the prompt's index.

Prompts are split into train and test *by prompt* (:func:`split`), so no prompt contributes to both.
Datasets are written as ``.safetensors`` with their provenance (models, seed, prompts) in the
metadata, by default under the user cache directory (:func:`default_path`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from otspec.errors import SprinterInputError
from otspec_gpu.inputs import generators
from otspec_gpu.processing import probs_from_logits
from otspec_gpu.sampling import categorical
from otspec_gpu.scoring import forward
from otspec_gpu.sprinter.rules import entropy

__all__ = ["FIELDS", "Dataset", "collect", "default_path", "load", "save", "split"]

FIELDS = ("hidden", "entropy", "q_x", "p_x", "position", "label", "soft", "tv", "prompt_id", "token")


@dataclass(frozen=True, eq=False)
class Dataset:
    """One row per drafted position (tensors of length ``N``; ``hidden`` is ``[N, H]``).

    Attributes
    ----------
    hidden : torch.Tensor
        ``[N, H]`` draft hidden state at the position that produced :math:`q_t`.
    entropy : torch.Tensor
        ``[N]`` entropy :math:`H(q_t)` in nats.
    q_x, p_x : torch.Tensor
        ``[N]`` draft and target probabilities of the drafted token :math:`x_t`.
    position : torch.Tensor
        ``[N]`` number of tokens generated before :math:`x_t`.
    label : torch.Tensor
        ``[N]`` int64 :math:`1\\{q_t(x_t) \\le p_t(x_t)\\}`.
    soft : torch.Tensor
        ``[N]`` :math:`\\min(1, p_t(x_t)/q_t(x_t))`.
    tv : torch.Tensor
        ``[N]`` :math:`d_{TV}(p_t, q_t)`.
    prompt_id : torch.Tensor
        ``[N]`` index of the row's prompt (the split is by prompt).
    token : torch.Tensor
        ``[N]`` the drafted token id :math:`x_t`.
    meta : dict
        Provenance: models, temperature, seed, prompts.
    """

    hidden: torch.Tensor
    entropy: torch.Tensor
    q_x: torch.Tensor
    p_x: torch.Tensor
    position: torch.Tensor
    label: torch.Tensor
    soft: torch.Tensor
    tv: torch.Tensor
    prompt_id: torch.Tensor
    token: torch.Tensor
    meta: dict

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def subset(self, mask: torch.Tensor) -> Dataset:
        """The rows selected by ``mask``.

        Parameters
        ----------
        mask : torch.Tensor
            ``[N]`` bool mask (or index tensor) over rows.

        Returns
        -------
        Dataset
            The selected rows, with a copy of ``meta``.
        """
        return Dataset(**{k: getattr(self, k)[mask] for k in FIELDS}, meta=dict(self.meta))

    def __repr__(self) -> str:
        return f"Dataset(N={len(self)}, H={self.hidden.shape[1]}, prompts={int(self.prompt_id.unique().numel())}, positive={float(self.label.float().mean()):.3f})"


def default_path(name: str = "smollm2-int8") -> Path:
    """``<cache>/sprinter/<name>.safetensors`` under :func:`otspec_gpu.models.cache_dir`.

    Parameters
    ----------
    name : str
        Dataset name (by convention the draft model's name).

    Returns
    -------
    pathlib.Path
        The file path (not created).
    """
    from otspec_gpu.models import cache_dir

    return cache_dir() / "sprinter" / f"{name}.safetensors"


@torch.no_grad()
def collect(
    target: Any,
    draft: Any,
    prompts: list,
    *,
    max_new_tokens: int = 48,
    temperature: float = 1.0,
    seed: int = 0,
    batch: int = 8,
    prompt_ids: list[int] | None = None,
) -> Dataset:
    r"""Sample from the draft and label every drafted position with the target (see the module docstring).

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        Target (labels) and draft (samples, features) sharing a vocabulary.
    prompts : list of str or list of list of int
        Prompts, as text or token ids.
    max_new_tokens : int
        Drafted positions per prompt (positions after an EOS are dropped).
    temperature : float
        Sampling temperature (> 0) applied to both models.
    seed : int
        Seeds the drafting stream.
    batch : int
        Prompts decoded together (left-padded, KV-cached).
    prompt_ids : list of int, optional
        Identifiers stored with each row (default ``0..len(prompts)-1``).

    Returns
    -------
    Dataset
        One row per drafted position, with provenance in ``meta``.

    Raises
    ------
    SprinterInputError
        If ``prompts`` is empty or ``temperature`` is not positive.
    """
    if not prompts:
        raise SprinterInputError("prompts must be a non-empty list; pass e.g. otspec_gpu.sprinter.prompts.PROMPTS")
    if not (temperature > 0):
        raise SprinterInputError(f"temperature must be > 0 for data collection (got {temperature!r})")
    ids_all = [target.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
    pids = list(range(len(prompts))) if prompt_ids is None else [int(i) for i in prompt_ids]
    (g,) = generators(seed, 1)
    cols: dict[str, list] = {k: [] for k in FIELDS}
    for b0 in range(0, len(ids_all), batch):
        drafted = _sample_chunk(target, draft, ids_all[b0 : b0 + batch], max_new_tokens, temperature, g)
        _label(cols, *drafted, target.eos_token_id, pids[b0 : b0 + batch], max_new_tokens)
    meta = {
        "target": target.name,
        "draft": draft.name,
        "temperature": float(temperature),
        "seed": int(seed),
        "max_new_tokens": int(max_new_tokens),
        "prompts": {str(i): (p if isinstance(p, str) else list(map(int, p))) for i, p in zip(pids, prompts, strict=False)},
    }
    return Dataset(**{k: torch.cat(v) for k, v in cols.items()}, meta=meta)


def _sample_chunk(target: Any, draft: Any, chunk: list, max_new_tokens: int, temperature: float, g: torch.Generator):
    """Draft ``max_new_tokens`` tokens per prompt of ``chunk`` (left-padded, KV-cached) and score them
    with one target forward: ``(X [R, T], P [R, T, V], Q [R, T, V], hidden [R, T, H])``."""
    from transformers import DynamicCache

    dev = next(draft.model.parameters()).device
    R, W = len(chunk), max(len(c) for c in chunk)
    ids = torch.zeros(R, W, dtype=torch.long)
    mask = torch.zeros(R, W, dtype=torch.long)
    for r, c in enumerate(chunk):
        ids[r, W - len(c) :] = torch.tensor(c)
        mask[r, W - len(c) :] = 1
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    cache = DynamicCache()
    feed, fmask, fpos = ids, mask, pos
    Q, Hs, X = [], [], []
    for _ in range(max_new_tokens):
        lg, hid = forward(draft, feed.to(dev), attention_mask=fmask.to(dev), position_ids=fpos.to(dev), cache=cache, hidden=True)
        q = probs_from_logits(lg[:, -1], temperature=temperature, dtype=torch.float64)
        x = categorical(q, g)
        Q.append(q.cpu())
        Hs.append(hid[:, -1].cpu())
        X.append(x.cpu())
        fmask = torch.cat([fmask, torch.ones(R, 1, dtype=torch.long)], 1)
        fpos = fpos[:, -1:] + 1
        feed = x.view(R, 1).cpu()
    Xs = torch.stack(X, 1)  # [R, T]
    full = torch.cat([ids, Xs], 1)
    fm = torch.cat([mask, torch.ones_like(Xs)], 1)
    tl, _ = forward(target, full.to(dev), attention_mask=fm.to(dev), position_ids=((fm.cumsum(1) - 1).clamp_min(0)).to(dev))
    Pall = probs_from_logits(tl[:, W - 1 : W - 1 + max_new_tokens].cpu(), temperature=temperature, dtype=torch.float64)  # [R, T, V]
    return Xs, Pall, torch.stack(Q, 1), torch.stack(Hs, 1)


def _label(cols: dict, Xs, Pall, Qall, Hall, eos: int | None, pids: list, max_new_tokens: int) -> None:
    """Append one row per drafted position (up to and including an EOS) of each prompt to ``cols``."""
    for r in range(Xs.shape[0]):
        T = max_new_tokens
        xs = Xs[r].tolist()
        if eos is not None and eos in xs:
            T = xs.index(eos) + 1
        q_r, p_r, x_r = Qall[r, :T], Pall[r, :T], Xs[r, :T]
        qx = q_r.gather(1, x_r[:, None]).squeeze(1)
        px = p_r.gather(1, x_r[:, None]).squeeze(1)
        cols["hidden"].append(Hall[r, :T])
        cols["entropy"].append(entropy(q_r))
        cols["q_x"].append(qx)
        cols["p_x"].append(px)
        cols["position"].append(torch.arange(T, dtype=torch.float64))
        cols["label"].append((qx <= px).long())
        cols["soft"].append(torch.clamp(px / qx, max=1.0))
        cols["tv"].append(0.5 * (p_r - q_r).abs().sum(-1))
        cols["prompt_id"].append(torch.full((T,), pids[r], dtype=torch.long))
        cols["token"].append(x_r.long())


def split(ds: Dataset, test_fraction: float = 0.3, *, seed: int = 0) -> tuple[Dataset, Dataset]:
    """Train / test split **by prompt** (no prompt in both), seeded.

    Parameters
    ----------
    ds : Dataset
        The rows to split.
    test_fraction : float
        Fraction of the prompts (not rows) held out, in ``(0, 1)``; at least one prompt on each side.
    seed : int
        Seed of the prompt permutation.

    Returns
    -------
    train, test : Dataset
        The rows of the training prompts and of the held-out prompts.

    Raises
    ------
    SprinterInputError
        If ``test_fraction`` is not in ``(0, 1)`` or ``ds`` has fewer than 2 prompts.

    Examples
    --------
    >>> import torch
    >>> n = 10; z = torch.zeros(n)
    >>> ds = Dataset(hidden=torch.zeros(n, 2), entropy=z, q_x=z, p_x=z, position=z, label=z.long(), soft=z, tv=z,
    ...              prompt_id=torch.arange(n) // 2, token=z.long(), meta={})
    >>> tr, te = split(ds, 0.4, seed=1)
    >>> set(tr.prompt_id.tolist()) & set(te.prompt_id.tolist())
    set()
    """
    if not (0.0 < test_fraction < 1.0):
        raise SprinterInputError(f"test_fraction must lie in (0, 1) (got {test_fraction!r}); e.g. 0.3")
    ids = np.unique(ds.prompt_id.numpy())
    if ids.size < 2:
        raise SprinterInputError(f"a split by prompt needs at least 2 prompts (got {ids.size}); collect more prompts")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(ids)
    n_test = min(ids.size - 1, max(1, round(test_fraction * ids.size)))
    test_ids = torch.from_numpy(np.sort(perm[:n_test]))
    is_test = torch.isin(ds.prompt_id, test_ids)
    return ds.subset(~is_test), ds.subset(is_test)


def save(ds: Dataset, path: str | Path) -> Path:
    """Write ``ds`` to ``path`` (``.safetensors``, provenance in the metadata); creates the folder.

    Parameters
    ----------
    ds : Dataset
        The dataset.
    path : str or pathlib.Path
        Destination file.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: getattr(ds, k).contiguous() for k in FIELDS}, str(path), metadata={"otspec_sprinter_dataset": json.dumps(ds.meta)})
    return path


def load(path: str | Path) -> Dataset:
    """Read a dataset written by :func:`save`.

    Parameters
    ----------
    path : str or pathlib.Path
        A file written by :func:`save`.

    Returns
    -------
    Dataset
        The rows and their provenance.

    Raises
    ------
    SprinterInputError
        If the file is missing or is not a SPRINTER dataset.
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise SprinterInputError(
            f"dataset file {str(path)!r} does not exist; collect one with otspec_gpu.sprinter.data.collect and save it"
        )
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "otspec_sprinter_dataset" not in meta:
            raise SprinterInputError(f"{str(path)!r} is not a SPRINTER dataset (no 'otspec_sprinter_dataset' metadata)")
        tensors = {k: f.get_tensor(k) for k in FIELDS}
    return Dataset(**tensors, meta=json.loads(meta["otspec_sprinter_dataset"]))

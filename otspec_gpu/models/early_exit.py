r"""The early-exit draft: the target's first ``L`` layers, a trained exit head, the target's output layer.

The draft runs the target's embedding and its first :math:`L` decoder layers (copies of the same
weights), then a small trained **exit head** in place of the final norm, then the
target's tied output layer:

.. math::

    u = x_L + W_{\mathrm{down}}\,\mathrm{SiLU}\big(W_{\mathrm{up}}\,\mathrm{rms}_a(x_L)\big),
    \qquad q = \mathrm{softmax}\big(W_{\mathrm{emb}}\,\mathrm{rms}_b(u) / T_0\big),

where :math:`x_L` is the residual stream after layer :math:`L` and
:math:`\mathrm{rms}_a, \mathrm{rms}_b` are RMSNorms with trained gains (:math:`\mathrm{rms}_b`'s
starts from the target's final norm). :math:`W_{\mathrm{down}}` starts at zero, so an untrained
head is the plain truncated model (the target's first ``L`` layers, its final norm and output
layer; a poor draft, see the models page). The head sees one position at a time, so it is trained
on cached features (:mod:`otspec_gpu.training`); the draft keeps its own key/value cache of its
``L`` layers, as any draft model, and works with every decoding mode unchanged.

The weights of ``smollm2-exit<L>`` are built by ``otspec train-draft smollm2-exit<L>`` and live in
``otspec_gpu.models.cache_dir() / "drafts"`` (safetensors and a JSON sidecar, as the draft heads).

Examples
--------
>>> import torch
>>> from otspec_gpu.models import tiny
>>> from otspec_gpu.models.early_exit import ExitHead, early_exit
>>> target = tiny(seed=0, vocab_size=7, layers=3)
>>> draft = early_exit(target, 2, ExitHead(16))
>>> draft.logits(torch.tensor([[1, 2, 3]])).shape
torch.Size([1, 3, 7])
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from otspec.errors import InvalidOptionError, MissingModelPackageError

__all__ = ["ExitHead", "early_exit", "load_early_exit", "load_exit_head", "save_exit_head"]


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class ExitHead(nn.Module):
    r"""The trained exit of an early-exit draft: a residual MLP adapter between two RMSNorms.

    Parameters
    ----------
    hidden : int
        The target's hidden size :math:`H`.
    width : int, optional
        Width of the adapter (default ``2 H``).
    eps : float
        The RMSNorms' :math:`\epsilon` (the target's ``rms_norm_eps``).
    norm_weight : torch.Tensor, optional
        Initial gain of the output norm (the target's final-norm weight; default ones).
    generator : torch.Generator, optional
        Source of the initial :math:`W_{\mathrm{up}}` (uniform on :math:`\pm 1/\sqrt{H}`);
        :math:`W_{\mathrm{down}} = 0`.

    Examples
    --------
    >>> import torch
    >>> head = ExitHead(4)
    >>> x = torch.randn(2, 4)
    >>> bool(torch.allclose(head(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + head.eps)))
    True
    """

    def __init__(
        self, hidden: int, *, width: int | None = None, eps: float = 1e-5, norm_weight: torch.Tensor | None = None, generator=None
    ):
        super().__init__()
        self.hidden = int(hidden)
        self.width = int(width) if width is not None else 2 * self.hidden
        self.eps = float(eps)
        if self.hidden < 1 or self.width < 1:
            raise InvalidOptionError(f"ExitHead needs hidden >= 1 and width >= 1 (got {hidden}, {width}); pass positive sizes")
        self.pre = nn.Parameter(torch.ones(self.hidden))
        bound = 1.0 / math.sqrt(self.hidden)
        self.up = nn.Parameter(torch.empty(self.width, self.hidden).uniform_(-bound, bound, generator=generator))
        self.down = nn.Parameter(torch.zeros(self.hidden, self.width))
        init = torch.ones(self.hidden) if norm_weight is None else norm_weight.detach().float().clone()
        self.norm = nn.Parameter(init)

    def architecture(self) -> dict:
        """The constructor arguments, for the JSON sidecar.

        Returns
        -------
        dict
            ``{"kind": "exit", "hidden": H, "width": W, "eps": eps}``.
        """
        return {"kind": "exit", "hidden": self.hidden, "width": self.width, "eps": self.eps}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The exit feature :math:`\\mathrm{rms}_b(u)` of the residual stream ``x`` ``[..., H]``.

        Parameters
        ----------
        x : torch.Tensor
            ``[..., H]`` the residual stream after the draft's last layer.

        Returns
        -------
        torch.Tensor
            ``[..., H]``, ready for the target's output layer.
        """
        a = nn.functional.silu(nn.functional.linear(_rms(x, self.eps) * self.pre, self.up))
        u = x + nn.functional.linear(a, self.down)
        return _rms(u, self.eps) * self.norm


def early_exit(target: Any, layers: int, head: ExitHead, *, name: str | None = None) -> Any:
    """The early-exit draft of ``target``: its first ``layers`` layers, ``head``, its output layer.

    The target's embedding, rotary embedding and output layer are shared; its first ``layers``
    layers are copied (same weights).

    Parameters
    ----------
    target : otspec_gpu.models.LM
        A ``transformers`` Llama-family target.
    layers : int
        :math:`L`, with ``1 <= L <`` the target's number of layers.
    head : ExitHead
        The exit head (its ``hidden`` must be the target's).
    name : str, optional
        Display name (default ``"<target>-exit<L>"``).

    Returns
    -------
    otspec_gpu.models.LM
        The draft (with the target's tokenizer and logit temperature).

    Raises
    ------
    InvalidOptionError
        If ``layers`` is out of range or the head's width does not match.
    """
    from otspec_gpu.models.wrapper import LM

    src = target.model
    n = int(src.config.num_hidden_layers)
    L = int(layers)
    if not 1 <= L < n:
        raise InvalidOptionError(f"early-exit layers must be in 1..{n - 1} for {target.name!r} (got {layers!r}); pick e.g. 8")
    if head.hidden != int(src.config.hidden_size):
        raise InvalidOptionError(
            f"the exit head's hidden size {head.hidden} differs from {target.name!r}'s {src.config.hidden_size}; train it for this target"
        )
    import copy

    cfg = copy.deepcopy(src.config)
    cfg.num_hidden_layers = L
    with torch.device("meta"):
        model = type(src)(cfg)
    model.model.embed_tokens = src.model.embed_tokens
    # The layers are copied: transformers records hidden states by hooks on each layer module, and
    # a module shared by two models would report to both.
    model.model.layers = copy.deepcopy(src.model.layers[:L])
    model.model.rotary_emb = src.model.rotary_emb
    model.model.norm = head
    model.lm_head = src.lm_head
    model.eval()
    return LM(
        name or f"{target.name}-exit{L}", model, target.tokenizer, logit_temperature=target.logit_temperature, vocab_size=target.vocab_size
    )


def save_exit_head(head: ExitHead, name: str, meta: dict | None = None, directory=None) -> tuple[Path, Path]:
    """Write the exit head's weights and JSON sidecar (the draft heads' layout and folder).

    Parameters
    ----------
    head : ExitHead
        The trained head.
    name : str
        The draft's name, e.g. ``"smollm2-exit8"``.
    meta : dict, optional
        Training facts for the sidecar.
    directory : str or pathlib.Path, optional
        The folder (default ``cache_dir() / "drafts"``).

    Returns
    -------
    (pathlib.Path, pathlib.Path)
        The weights and the sidecar.
    """
    from otspec_gpu.models.heads import save_head

    return save_head(head, name, meta, directory)


def load_exit_head(name: str, directory=None) -> tuple[ExitHead, dict]:
    """The trained exit head ``name`` and its sidecar.

    Parameters
    ----------
    name : str
        The draft's name, e.g. ``"smollm2-exit8"``.
    directory : str or pathlib.Path, optional
        The folder (default ``cache_dir() / "drafts"``).

    Returns
    -------
    (ExitHead, dict)
        The head (eval mode, no gradients) and the sidecar's entries.

    Raises
    ------
    MissingModelPackageError
        If the weights are missing; the message names the command that builds them.
    InvalidOptionError
        If the sidecar does not describe an exit head.
    """
    from safetensors.torch import load_file

    from otspec_gpu.models.heads import build_command, head_paths

    weights, sidecar = head_paths(name, directory)
    if not (weights.is_file() and sidecar.is_file()):
        raise MissingModelPackageError(
            f"the trained draft {name!r} has no weights yet (looked for {weights.name} and {sidecar.name} in {weights.parent}); "
            f"build them with `{build_command(name)}`"
        )
    info = json.loads(sidecar.read_text())
    arch = dict(info.get("architecture", {}))
    if arch.pop("kind", None) != "exit":
        raise InvalidOptionError(f"{sidecar} does not describe an early-exit head (architecture {info.get('architecture')!r}); rebuild it")
    head = ExitHead(**arch)
    head.load_state_dict(load_file(str(weights)))
    head.eval().requires_grad_(False)
    return head, info


def load_early_exit(name: str, target_loader, directory=None) -> Any:
    """The trained early-exit draft ``name`` (e.g. ``"smollm2-exit8"``) of the target ``target_loader()``.

    The weights are looked up first, so a missing file fails before the target is loaded.

    Parameters
    ----------
    name : str
        ``"<target>-exit<L>"``.
    target_loader : callable
        Returns the target :class:`~otspec_gpu.models.LM` (called once).
    directory : str or pathlib.Path, optional
        The weights' folder (default ``cache_dir() / "drafts"``).

    Returns
    -------
    otspec_gpu.models.LM
        The draft.

    Raises
    ------
    MissingModelPackageError
        If the weights are missing (the message names the command that builds them).
    InvalidOptionError
        If the sidecar's depth differs from the name's.
    """
    head, info = load_exit_head(name, directory)
    layers = int(name.rsplit("exit", 1)[1])
    if int(info.get("layers", layers)) != layers:
        raise InvalidOptionError(f"{name!r}'s weights were trained for {info.get('layers')} layers, not {layers}; rebuild them")
    return early_exit(target_loader(), layers, head, name=name)

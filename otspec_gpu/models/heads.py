r"""Draft heads on the target's features: Medusa-style heads and an EAGLE-style one-layer head.

A **draft head** is a small trainable module that reads the target's **feature** -- its last hidden
layer :math:`h_t` (``otspec_gpu.scoring.forward(lm, ids, hidden=True)``; in ``transformers`` Llama
models it is taken *after* the final RMSNorm, so the target's own logits are exactly
:math:`\mathrm{lm\_head}(h_t) / T_0`) -- and drafts future tokens through the target's own frozen
output layer (and, for EAGLE, its frozen token embedding). Neither frozen module is copied into the
head: both are passed in, and a head's ``state_dict`` holds its trainable parameters only.

Position convention: :math:`h_t` sits at the position whose logits give the law of token
:math:`x_{t+1}`. In a decoding round the last emitted token ``last`` is :math:`x_{t+1}` and the
drafts are :math:`X_0 = x_{t+2}, X_1 = x_{t+3}, \dots`.

:class:`MedusaHeads` (``n`` heads, Cai et al. 2024 [1]_)
    head :math:`i` maps :math:`h_t` to
    :math:`u_i = h_t + W_{i2}\,\mathrm{SiLU}(W_{i1} h_t)` and drafts
    :math:`X_i = x_{t+2+i}` from :math:`\mathrm{lm\_head}(u_i)`; it does not see ``last`` nor the
    earlier drafts. :math:`W_{i2}` starts at zero, so an untrained head reproduces the target's own
    next-token law at :math:`h_t`.
:class:`EagleHead` (one layer, Li et al. 2024 [2]_)
    :math:`\hat f_{t+1} = f_t + \mathrm{MLP}(\mathrm{fc}([f_t ; \mathrm{emb}(x_{t+1})]))` with
    :math:`\mathrm{fc}: \mathbb{R}^{2H} \to \mathbb{R}^H` and
    :math:`\mathrm{MLP}(z) = W_{\mathrm{down}}\,\mathrm{SiLU}(W_{\mathrm{up}} z)`; the law of
    :math:`x_{t+2}` is :math:`\mathrm{lm\_head}(\hat f_{t+1})`. Drafting is autoregressive:
    :math:`X_0` from :math:`(h_t, \mathrm{last})`, :math:`X_1` from :math:`(\hat f, X_0)`, and so
    on. EAGLE's attention layer over past features is not part of this head (the head sees one
    feature and one token). :math:`W_{\mathrm{down}}` starts at zero (the untrained head predicts
    :math:`\hat f_{t+1} = f_t`).

**Weights on disk.** :func:`save_head` writes ``<name>.safetensors`` (the trainable parameters)
and a JSON sidecar ``<name>.json`` (``name``, ``architecture``: the constructor arguments with
``kind``, plus whatever the trainer records: target, seed, steps, training data, losses, and the
otspec version) under ``otspec_gpu.models.cache_dir() / "drafts"``; :func:`load_head` reads them back
and, when they are missing, raises an error naming the command that builds them
(``otspec train-draft <name>``).

References
----------
.. [1] T. Cai et al., "Medusa: Simple LLM inference acceleration framework with multiple decoding
   heads", ICML 2024.
.. [2] Y. Li et al., "EAGLE: Speculative sampling requires rethinking feature uncertainty",
   ICML 2024.

Examples
--------
>>> import torch
>>> heads = MedusaHeads(8, 3)
>>> heads.features(torch.zeros(2, 8)).shape
torch.Size([2, 3, 8])
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from otspec.errors import InvalidOptionError, MissingModelPackageError, ShapeMismatchError

__all__ = [
    "HEAD_KINDS",
    "DRAFTS_DIR",
    "EagleHead",
    "MedusaHeads",
    "build_command",
    "head_from_architecture",
    "head_paths",
    "load_head",
    "save_head",
]

#: Folder of the trained draft weights inside ``otspec_gpu.models.cache_dir()``.
DRAFTS_DIR = "drafts"


def _uniform(shape: tuple, fan_in: int, generator: torch.Generator | None) -> torch.Tensor:
    """``nn.Linear``'s default initial weights (uniform on :math:`\\pm 1/\\sqrt{\\text{fan\\_in}}`),
    drawn from ``generator`` so that a seeded head is reproducible."""
    bound = 1.0 / math.sqrt(fan_in)
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)


def _check_feature(h: torch.Tensor, hidden: int, what: str) -> None:
    if h.shape[-1] != hidden:
        raise ShapeMismatchError(
            f"{what} must end in the head's hidden size {hidden} (got shape {tuple(h.shape)}); "
            "pass the target's last hidden layer of the model the head was built for"
        )


class MedusaHeads(nn.Module):
    r"""``n_heads`` Medusa heads: head :math:`i` drafts the token :math:`i + 1` places after ``last``
    from the feature before ``last``, :math:`u_i = h + W_{i2}\,\mathrm{SiLU}(W_{i1} h)`.

    Parameters
    ----------
    hidden : int
        The target's hidden size :math:`H`.
    n_heads : int
        Number of heads (the longest chain it drafts).
    generator : torch.Generator, optional
        Source of the initial :math:`W_{i1}` (``nn.Linear``'s uniform law); :math:`W_{i2} = 0`.

    Attributes
    ----------
    w1, w2 : torch.nn.Parameter
        ``[n_heads, H, H]`` (output, input) weights of every head.

    Notes
    -----
    Cost per drafted round: two ``H x H`` products per head and one output layer per drafted
    token (``H V``), all from one feature; no target layer runs.

    Examples
    --------
    >>> import torch
    >>> heads = MedusaHeads(4, 2)
    >>> lm_head = torch.nn.Linear(4, 5, bias=False)
    >>> h = torch.randn(3, 4)
    >>> bool(torch.allclose(heads(h, lm_head)[:, 1], lm_head(h)))  # untrained: the target's own law
    True
    """

    def __init__(self, hidden: int, n_heads: int, *, generator: torch.Generator | None = None):
        super().__init__()
        self.hidden, self.n_heads = int(hidden), int(n_heads)
        if self.hidden < 1 or self.n_heads < 1:
            raise InvalidOptionError(f"MedusaHeads needs hidden >= 1 and n_heads >= 1 (got {hidden}, {n_heads}); pass positive sizes")
        self.w1 = nn.Parameter(_uniform((self.n_heads, self.hidden, self.hidden), self.hidden, generator))
        self.w2 = nn.Parameter(torch.zeros(self.n_heads, self.hidden, self.hidden))

    def architecture(self) -> dict:
        """The constructor arguments, for the JSON sidecar.

        Returns
        -------
        dict
            ``{"kind": "medusa", "hidden": H, "n_heads": n}``.
        """
        return {"kind": "medusa", "hidden": self.hidden, "n_heads": self.n_heads}

    def features(self, h: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """The features :math:`u_i` of the first ``n`` heads (default all) from ``h`` ``[..., H]``.

        Parameters
        ----------
        h : torch.Tensor
            ``[..., H]`` target features.
        n : int, optional
            How many heads (the first ``n``; default ``n_heads``).

        Returns
        -------
        torch.Tensor
            ``[..., n, H]``.
        """
        _check_feature(h, self.hidden, "h")
        w1, w2 = (self.w1, self.w2) if n is None else (self.w1[:n], self.w2[:n])
        a = torch.einsum("...i,noi->...no", h, w1)  # [..., n, H]
        return h.unsqueeze(-2) + torch.einsum("...ni,noi->...no", nn.functional.silu(a), w2)

    def forward(self, h: torch.Tensor, lm_head: Any, n: int | None = None) -> torch.Tensor:
        """The first ``n`` heads' logits through the target's output layer (before the logit temperature).

        Parameters
        ----------
        h : torch.Tensor
            ``[..., H]`` target features.
        lm_head : callable
            The target's frozen output layer (``lm.model.get_output_embeddings()``).
        n : int, optional
            How many heads (the first ``n``; default ``n_heads``).

        Returns
        -------
        torch.Tensor
            ``[..., n, V]``; entry ``i`` drafts the token ``i + 1`` places after ``last``.
        """
        return lm_head(self.features(h, n))


class EagleHead(nn.Module):
    r"""One EAGLE-style layer: the next feature from a feature and the token it produced,
    :math:`\hat f_{t+1} = f_t + W_{\mathrm{down}}\,\mathrm{SiLU}(W_{\mathrm{up}}\,\mathrm{fc}([f_t ; \mathrm{emb}(x_{t+1})]))`.

    Parameters
    ----------
    hidden : int
        The target's hidden size :math:`H`.
    embedding : torch.nn.Module, optional
        The target's frozen token embedding (``lm.model.get_input_embeddings()``); not registered
        as a submodule (not trained, not saved). Without it, pass ``embedding`` to each call.
    intermediate : int, optional
        Width of the MLP (default ``2 H``).
    generator : torch.Generator, optional
        Source of the initial ``fc`` and ``up`` weights (``nn.Linear``'s uniform law); ``down`` and
        the ``fc`` bias start at zero.

    Attributes
    ----------
    fc, up, down : torch.nn.Linear
        ``2H -> H`` (with bias), ``H -> I`` and ``I -> H`` (without).

    Notes
    -----
    Cost per drafted token: ``fc`` (``2 H^2``), the MLP (``2 H I``) and one output layer (``H V``);
    no target layer runs. The head is autoregressive in its own features, never in the target's.

    Examples
    --------
    >>> import torch
    >>> emb = torch.nn.Embedding(5, 4)
    >>> head = EagleHead(4, emb)
    >>> f = torch.randn(3, 4)
    >>> bool(torch.equal(head.features(f, torch.tensor([0, 1, 2])), f))  # untrained: f_hat = f
    True
    """

    def __init__(self, hidden: int, embedding: Any = None, *, intermediate: int | None = None, generator: torch.Generator | None = None):
        super().__init__()
        self.hidden = int(hidden)
        self.intermediate = int(intermediate) if intermediate is not None else 2 * self.hidden
        if self.hidden < 1 or self.intermediate < 1:
            raise InvalidOptionError(
                f"EagleHead needs hidden >= 1 and intermediate >= 1 (got {hidden}, {intermediate}); pass positive sizes"
            )
        H, width = self.hidden, self.intermediate
        self.fc = nn.Linear(2 * H, H, bias=True)
        self.up = nn.Linear(H, width, bias=False)
        self.down = nn.Linear(width, H, bias=False)
        with torch.no_grad():
            self.fc.weight.copy_(_uniform((H, 2 * H), 2 * H, generator))
            self.fc.bias.zero_()
            self.up.weight.copy_(_uniform((width, H), H, generator))
            self.down.weight.zero_()
        self.__dict__["embedding"] = embedding  # frozen and shared with the target: not a submodule

    def architecture(self) -> dict:
        """The constructor arguments, for the JSON sidecar.

        Returns
        -------
        dict
            ``{"kind": "eagle", "hidden": H, "intermediate": I}``.
        """
        return {"kind": "eagle", "hidden": self.hidden, "intermediate": self.intermediate}

    def features(self, f: torch.Tensor, x: torch.Tensor, embedding: Any = None) -> torch.Tensor:
        """The predicted next feature :math:`\\hat f` from features ``f`` ``[..., H]`` and tokens ``x`` ``[...]``.

        Parameters
        ----------
        f : torch.Tensor
            ``[..., H]`` features (the target's, or the head's own previous prediction).
        x : torch.Tensor
            ``[...]`` long, the token each feature's law produced.
        embedding : torch.nn.Module, optional
            The token embedding (default: the one given at construction).

        Returns
        -------
        torch.Tensor
            ``[..., H]``.

        Raises
        ------
        InvalidOptionError
            If no embedding was given here or at construction.
        """
        _check_feature(f, self.hidden, "f")
        emb = embedding if embedding is not None else self.embedding
        if emb is None:
            raise InvalidOptionError("EagleHead needs the target's token embedding; pass embedding=lm.model.get_input_embeddings()")
        z = self.fc(torch.cat([f, emb(x).to(f.dtype)], dim=-1))
        return f + self.down(nn.functional.silu(self.up(z)))

    def forward(self, f: torch.Tensor, x: torch.Tensor, lm_head: Any, embedding: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The next feature and its logits through the target's output layer (before the logit temperature).

        Parameters
        ----------
        f : torch.Tensor
            ``[..., H]`` features.
        x : torch.Tensor
            ``[...]`` long tokens.
        lm_head : callable
            The target's frozen output layer.
        embedding : torch.nn.Module, optional
            The token embedding (default: the one given at construction).

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            :math:`\\hat f` ``[..., H]`` and its logits ``[..., V]`` (the law of the token after ``x``).
        """
        f_hat = self.features(f, x, embedding)
        return f_hat, lm_head(f_hat)


#: Head classes by the ``kind`` of their architecture.
HEAD_KINDS: dict[str, type] = {"medusa": MedusaHeads, "eagle": EagleHead}


def head_from_architecture(architecture: dict) -> nn.Module:
    """A fresh head from a sidecar's ``architecture`` entry.

    Parameters
    ----------
    architecture : dict
        ``{"kind": "medusa" | "eagle", ...}``: the constructor arguments.

    Returns
    -------
    torch.nn.Module

    Raises
    ------
    InvalidOptionError
        If ``kind`` is unknown or an argument is missing.

    Examples
    --------
    >>> head_from_architecture({"kind": "medusa", "hidden": 4, "n_heads": 2}).n_heads
    2
    """
    arch = dict(architecture)
    kind = arch.pop("kind", None)
    if kind not in HEAD_KINDS:
        raise InvalidOptionError(f"head architecture kind must be one of {sorted(HEAD_KINDS)} (got {kind!r}); rebuild the weights")
    try:
        return HEAD_KINDS[kind](**arch)
    except TypeError as exc:
        raise InvalidOptionError(
            f"head architecture {architecture!r} does not match {HEAD_KINDS[kind].__name__} ({exc}); rebuild the weights"
        ) from None


def build_command(name: str) -> str:
    """The command that builds the weights of the trained draft ``name``.

    Parameters
    ----------
    name : str
        The draft's name, e.g. ``"smollm2-medusa"``.

    Returns
    -------
    str

    Examples
    --------
    >>> build_command("smollm2-medusa")
    'otspec train-draft smollm2-medusa'
    """
    return f"otspec train-draft {name}"


def head_paths(name: str, directory: str | Path | None = None) -> tuple[Path, Path]:
    """Where the weights and the JSON sidecar of ``name`` live.

    Parameters
    ----------
    name : str
        The draft's name.
    directory : str or Path, optional
        The folder (default ``otspec_gpu.models.cache_dir() / "drafts"``).

    Returns
    -------
    (Path, Path)
        ``<directory>/<name>.safetensors`` and ``<directory>/<name>.json``.
    """
    if directory is None:
        from otspec_gpu.models.gguf import cache_dir

        directory = Path(cache_dir()) / DRAFTS_DIR
    d = Path(directory)
    return d / f"{name}.safetensors", d / f"{name}.json"


def save_head(head: nn.Module, name: str, meta: dict | None = None, directory: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``head``'s trainable parameters (safetensors) and its JSON sidecar.

    Parameters
    ----------
    head : MedusaHeads or EagleHead
        The head.
    name : str
        The draft's name (the file stem).
    meta : dict, optional
        What the sidecar records besides ``name``, ``architecture`` and ``otspec_version`` (target,
        seed, training steps, training data, final losses...); JSON-serialisable.
    directory : str or Path, optional
        The folder (default: :func:`head_paths`'s).

    Returns
    -------
    (Path, Path)
        The two files written.
    """
    from safetensors.torch import save_file

    import otspec

    weights, sidecar = head_paths(name, directory)
    weights.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(weights))
    info = {"name": name, "architecture": head.architecture(), **(meta or {}), "otspec_version": otspec.__version__}
    sidecar.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return weights, sidecar


def load_head(name: str, directory: str | Path | None = None) -> tuple[nn.Module, dict]:
    """The trained head ``name`` and its sidecar (in eval mode, without gradients).

    Parameters
    ----------
    name : str
        The draft's name, e.g. ``"smollm2-medusa"``.
    directory : str or Path, optional
        The folder (default: :func:`head_paths`'s).

    Returns
    -------
    (torch.nn.Module, dict)
        The head and the sidecar's entries.

    Raises
    ------
    MissingModelPackageError
        If the weights or the sidecar are missing (the message names :func:`build_command`).
    InvalidOptionError
        If the sidecar's architecture is not one this module builds.
    """
    from safetensors.torch import load_file

    weights, sidecar = head_paths(name, directory)
    if not (weights.is_file() and sidecar.is_file()):
        raise MissingModelPackageError(
            f"the trained draft {name!r} has no weights yet (looked for {weights.name} and {sidecar.name} in {weights.parent}); "
            f"build them with `{build_command(name)}`"
        )
    info = json.loads(sidecar.read_text())
    head = head_from_architecture(info.get("architecture", {}))
    head.load_state_dict(load_file(str(weights)))
    head.eval().requires_grad_(False)
    return head, info

"""The model wrapper of the decoding harness: :class:`LM` (a causal LM, its tokenizer and a logit
temperature) and :func:`wrap` for any ``transformers`` causal LM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from otspec.errors import OtspecInputError

__all__ = ["LM", "patch_linear", "wrap"]


@dataclass(eq=False)
class LM:
    r"""A causal LM ready for decoding.

    Attributes
    ----------
    name : str
        Display name (``"smollm2-int8"``...).
    model : torch.nn.Module
        A ``transformers`` causal LM in eval mode; ``model(input_ids, attention_mask=...,
        position_ids=..., past_key_values=..., use_cache=True)`` returns ``.logits`` ``[B, L, V]``.
    tokenizer : object or None
        The tokenizer (``None`` for the tiny test models: prompts are token ids then).
    logit_temperature : float
        :math:`T_0`; the model's own distribution is ``softmax(logits / T_0)``.
    vocab_size : int
        Width ``V`` of the logits.
    eos_token_id : int or None
        The tokenizer's end-of-sequence id (``None`` without a tokenizer or EOS); set from the
        tokenizer.
    """

    name: str
    model: Any
    tokenizer: Any
    logit_temperature: float = 1.0
    vocab_size: int = field(default=0)
    eos_token_id: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.eos_token_id = getattr(self.tokenizer, "eos_token_id", None) if self.tokenizer is not None else None
        if not self.vocab_size:
            self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        if not (self.logit_temperature > 0):
            raise OtspecInputError(f"logit_temperature must be > 0 (got {self.logit_temperature!r}); pass a positive float")

    def logits(self, input_ids: torch.Tensor, *, attention_mask=None, position_ids=None, cache=None) -> torch.Tensor:
        """``[B, L, V]`` float32 logits divided by :attr:`logit_temperature`; updates ``cache`` in place.

        Parameters
        ----------
        input_ids : torch.Tensor
            ``[B, L]`` int64 token ids.
        attention_mask : torch.Tensor, optional
            ``[B, L_total]`` mask over the cached and new positions (0 at left padding).
        position_ids : torch.Tensor, optional
            ``[B, L]`` positions of the new tokens.
        cache : transformers.Cache, optional
            Key/value cache of the earlier positions; ``None`` runs without a cache.

        Returns
        -------
        torch.Tensor
            ``[B, L, V]`` float32 logits :math:`z / T_0` (no gradient).
        """
        from otspec_gpu.scoring import forward

        return forward(self, input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache)[0]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (the tokenizer's special tokens included, e.g. Gemma's BOS).

        Parameters
        ----------
        text : str
            The prompt.

        Returns
        -------
        list of int
            Its token ids.

        Raises
        ------
        OtspecInputError
            If the model has no tokenizer.
        """
        if self.tokenizer is None:
            raise OtspecInputError(f"model {self.name!r} has no tokenizer; pass the prompt as a list of token ids")
        return list(self.tokenizer(text)["input_ids"])

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer carries a chat template (an instruct / chat model)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_chat(self, text: str) -> list[int]:
        """Token ids of ``text`` as one user turn of the model's chat template, ready for the answer.

        Parameters
        ----------
        text : str
            The user's message.

        Returns
        -------
        list of int
            The templated prompt's ids (with the assistant turn opened), or :meth:`encode` of
            ``text`` when the model has no chat template.

        Raises
        ------
        OtspecInputError
            If the model has no tokenizer.
        """
        if not self.has_chat_template:
            return self.encode(text)
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def decode_text(self, ids: Any) -> str:
        """Text of the token ids ``ids`` (special tokens skipped).

        Parameters
        ----------
        ids : iterable of int
            Token ids.

        Returns
        -------
        str
            The decoded text, or the ids joined by spaces when the model has no tokenizer.
        """
        if self.tokenizer is None:
            return " ".join(str(int(i)) for i in ids)
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def __repr__(self) -> str:
        return f"LM(name={self.name!r}, V={self.vocab_size}, logit_temperature={self.logit_temperature})"


class _RowsLinear(torch.nn.Module):
    """``nn.Linear`` computing ``(W @ x.T).T`` for 2-16 rows (bit-identical, 2-4x faster on MKL CPUs)."""

    def __init__(self, lin: torch.nn.Linear):
        super().__init__()
        self.weight = lin.weight
        self.bias = lin.bias
        self.in_features, self.out_features = lin.in_features, lin.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if 2 <= x2.shape[0] <= 16 and x2.device.type == "cpu":
            y = (self.weight @ x2.T).T
            if self.bias is not None:
                y = y + self.bias
            return y.reshape(*shape[:-1], self.out_features)
        return torch.nn.functional.linear(x, self.weight, self.bias)


def patch_linear(model: torch.nn.Module) -> None:
    """Replace every ``nn.Linear`` of ``model`` in place with the bit-identical few-row variant.

    Parameters
    ----------
    model : torch.nn.Module
        The model to patch.
    """
    for mod in list(model.modules()):
        for child_name, child in list(mod.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(mod, child_name, _RowsLinear(child))


def wrap(model: Any, tokenizer: Any = None, *, name: str | None = None, fast_linear: bool = False) -> LM:
    """Wrap any ``transformers`` causal LM (it must share the target's tokenizer / vocabulary).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM with an output layer; put in eval mode here.
    tokenizer : object, optional
        Its tokenizer (``None``: prompts must be token ids).
    name : str, optional
        Display name (default: the model's class name).
    fast_linear : bool
        Patch the model's ``Linear`` layers in place with the faster few-row variant.

    Returns
    -------
    LM
        The wrapped model.

    Raises
    ------
    OtspecInputError
        If ``model`` has no output embeddings (not a causal LM).
    """
    if not hasattr(model, "get_output_embeddings") or model.get_output_embeddings() is None:
        raise OtspecInputError(
            f"model must be a transformers causal LM with an output layer (got {type(model).__name__}); load it with AutoModelForCausalLM"
        )
    model.eval()
    if fast_linear:
        patch_linear(model)
    return LM(name or type(model).__name__, model, tokenizer)

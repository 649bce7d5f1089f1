"""The bad-input table of traces (:mod:`otspec.io`), ``otspec audit`` and ``otspec corpus`` (logged
traces, the output folder): each case raises a
specific :mod:`otspec.errors` class whose message names the problem and the fix (library), or exits
2 with one line and nothing on stdout (CLI); where the fix is an action, following it works."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec.cli import main
from otspec.errors import CorpusInputError, InputFileError, InvalidTraceError, InvalidVerifierError, OtspecInputError
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
    # otspec corpus --logged: the logged-trace schema (issue 31 item 4), file, line and field named
    ("corpus --logged: log-probability a string", lambda t: _read_log(t, _rec(lp="-0.5")), CorpusInputError, "target.logprobs[0]"),
    ("corpus --logged: doc null", lambda t: _read_log(t, _rec(doc=None)), CorpusInputError, "log.jsonl:1: 'doc' must be a string or"),
    ("corpus --logged: doc a list", lambda t: _read_log(t, _rec(doc=[1])), CorpusInputError, "(got list [1])"),
    ("corpus --logged: doc 1 and '1'", lambda t: _read_log(t, _rec(doc=1), _rec(doc="1")), CorpusInputError, "name one cluster"),
    ("corpus --logged: duplicate step", lambda t: _read_log(t, _rec(position=3), _rec(position=3)), CorpusInputError, "log.jsonl:1;"),
    # otspec corpus output folder (issue 31 item 2): refused before any work
    ("corpus: stray shard-abc.parquet", lambda t: _rerun(t, "shard-abc.parquet", b"x"), CorpusInputError, "not a shard of otspec"),
    ("corpus: shard beyond the run", lambda t: _rerun(t, "shard-00007.parquet", b"x"), CorpusInputError, "beyond this run's 1 shards"),
    ("corpus: corpus.json not JSON", lambda t: _rerun(t, "corpus.json", b"{"), CorpusInputError, "corpus.json: not valid JSON"),
    ("corpus: --out is a file", lambda t: _logged_run(t, t / "log.jsonl"), CorpusInputError, "is a file; --out must be a folder"),
    ("corpus: --out under a file", lambda t: _logged_run(t, t / "log.jsonl" / "o"), CorpusInputError, "cannot be created"),
]


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

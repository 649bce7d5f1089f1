"""The bad-input table of traces (:mod:`otspec.io`) and ``otspec audit``: each case raises a
specific :mod:`otspec.errors` class whose message names the problem and the fix (library), or exits
2 with one line and nothing on stdout (CLI); where the fix is an action, following it works."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec.cli import main
from otspec.errors import InputFileError, InvalidTraceError, InvalidVerifierError, OtspecInputError
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
]


def _exiting(tmp):
    path = tmp / "exits_now.py"
    path.write_text("import sys\nsys.exit(3)\n")
    return path


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


@pytest.mark.parametrize("name, argv, fragment", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_exits_2_with_one_line(tmp_path, capsys, name, argv, fragment):
    argv = [a.replace("{exiting}", str(_exiting(tmp_path))) for a in argv]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert fragment in cap.err and len(cap.err.strip().splitlines()) == 1 and cap.err.startswith("otspec: error: ")
    assert "Traceback" not in cap.err and cap.out == ""

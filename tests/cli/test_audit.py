"""``otspec audit``: exit codes, the table and JSON, saved snippets."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from otspec.cli import main
from otspec.testing import VerifierAssertionError
from tests.testing import broken_designs as bd

FILE = str(Path(bd.__file__).resolve())


def test_audit_of_a_lossy_rule_exits_1_and_saves_the_counterexample(tmp_path, capsys):
    rc = main(["audit", f"{FILE}:rrs_stale_residual", "--problems", "30", "--draws", "20000", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "lossless" in out and "FAIL" in out and "reproduce with: python" in out
    snippet = tmp_path / "rrs_stale_residual_lossless.py"
    assert snippet.is_file() and FILE in snippet.read_text()
    with pytest.raises(VerifierAssertionError):
        runpy.run_path(str(snippet), run_name="__main__")


def test_audit_json_of_a_shipped_verifier_exits_0(tmp_path, capsys):
    rc = main(["audit", "otspec.verifiers:rrs", "--problems", "20", "--draws", "20000", "--json", "--out", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["ok"] is True and data["verifier"] == "rrs" and data["spec"] == "otspec.verifiers:rrs"
    assert {p["name"]: p["verdict"] for p in data["properties"]}["lossless"] == "pass"
    assert not list(tmp_path.iterdir())  # nothing saved when nothing fails


RULE = """
import numpy as np


def stale(p, q, drafts):  # RRS that never updates its residual: exact for k = 1 only
    out, surv = np.zeros(len(p)), 1.0
    for x in drafts:
        a = min(1.0, p[x] / q[x])
        out[x] += surv * a
        surv *= 1 - a
    r = np.maximum(p - q, 0.0)
    return out + surv * (r / r.sum() if r.sum() > 0 else p)
"""


def test_plain_function_declared_with_kinds_and_k(tmp_path, capsys):
    f = tmp_path / "rule.py"
    f.write_text(RULE)
    common = ["--problems", "20", "--draws", "20000", "--out", str(tmp_path / "cx")]
    assert main(["audit", f"{f}:stale", "--kinds", "iid", "--k", "1", *common]) == 0
    assert main(["audit", f"{f}:stale", "--kinds", "iid", *common]) == 1
    assert (tmp_path / "cx" / "stale_lossless.py").is_file()
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["audit", "no_such_module_xyz:f"], "cannot import"),
        (["audit", "otspec:__version__"], "not a verifier"),
        (["audit", "otspec.verifiers:kseq", "--k", "2"], "already a verifier"),
        (["audit", "otspec.verifiers:kseq", "--problems", "0"], "--problems"),
        (["audit", "otspec.verifiers:kseq", "--false-alarm", "2"], "--false-alarm"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err

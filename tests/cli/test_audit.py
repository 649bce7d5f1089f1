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


# ------------------------------------------------------------------------------------------------
# Fail closed: rare tokens, exits, prints, time limits


RARE = """
import numpy as np


def rare_keep(p, q, drafts):  # speculative sampling, except that a draft with 0 < p < 1e-3 is always kept
    x = drafts[0]
    if 0 < p[x] < 1e-3:
        out = np.zeros(len(p))
        out[x] = 1.0
        return out
    a = min(1.0, p[x] / q[x])
    r = np.maximum(p - q, 0.0)
    out = (1 - a) * (r / r.sum() if r.sum() > 0 else p)
    out[x] += a
    return out
"""


def test_a_rare_token_bias_fails_the_audit(tmp_path, capsys):
    """The catalogue's smallest probability is ~0.03, so this rule passed (exit 0) before the
    wide-range problems (p down to 1e-12 and 2.5e-308) were added."""
    f = tmp_path / "rare.py"
    f.write_text(RARE)
    rc = main(["audit", f"{f}:rare_keep", "--k", "1", "--problems", "30", "--draws", "20000", "--out", str(tmp_path / "cx"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["ok"] is False
    row = {p["name"]: p for p in data["properties"]}["lossless"]
    assert row["verdict"] == "fail"
    scope = {}
    exec("import numpy as np, otspec\n" + row["counterexample"]["problem"], scope)  # the counterexample has a rare token
    assert 0 < scope["p"].min() < 1e-3


EXITS = """
import sys

import numpy as np


def exit_zero(p, q, drafts):
    sys.exit(0)


def interrupted(p, q, drafts):
    raise KeyboardInterrupt


def chatty(p, q, drafts):
    print("hello from the verifier")
    return p


def slow(p, q, drafts):
    import time

    time.sleep(5)
    return p
"""


@pytest.mark.parametrize("name, needle", [("exit_zero", "sys.exit(0)"), ("interrupted", "KeyboardInterrupt")])
def test_an_exit_or_interrupt_in_the_verifier_is_a_failed_property(tmp_path, capsys, name, needle):
    """sys.exit(0) in the verifier used to end `otspec audit` with status 0 and no output."""
    f = tmp_path / "exits.py"
    f.write_text(EXITS)
    rc = main(["audit", f"{f}:{name}", "--problems", "5", "--draws", "1000", "--out", str(tmp_path / "cx"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["ok"] is False
    assert needle in {p["name"]: p for p in data["properties"]}["kernel"]["summary"]


def test_an_exit_when_the_module_is_imported_exits_2_with_one_line(tmp_path, capsys):
    f = tmp_path / "exits_at_import.py"
    f.write_text("import sys\nsys.exit(0)\n")
    assert main(["audit", f"{f}:anything"]) == 2
    err = capsys.readouterr().err
    assert "called sys.exit(0)" in err and err.count("\n") == 1


def test_json_stays_valid_when_the_verifier_prints(tmp_path, capsys):
    f = tmp_path / "exits.py"
    f.write_text(EXITS)
    rc = main(["audit", f"{f}:chatty", "--k", "1", "--problems", "5", "--draws", "1000", "--json", "--out", str(tmp_path / "cx")])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verifier"] == "chatty" and rc == 0
    assert "hello from the verifier" in captured.err


def test_timeout_fails_a_check_that_runs_too_long(tmp_path, capsys):
    f = tmp_path / "exits.py"
    f.write_text(EXITS)
    args = ["audit", f"{f}:slow", "--k", "1", "--kinds", "iid", "--problems", "1", "--draws", "1000", "--timeout", "0.2", "--json"]
    rc = main([*args, "--out", str(tmp_path / "cx")])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and "time limit of one check (0.2 s)" in data["properties"][0]["summary"]


def test_problems_beyond_the_catalogue_are_added(tmp_path, capsys):
    """--problems 1500 used to run the 61 catalogue problems only."""
    common = ["audit", "otspec.verifiers:token", "--draws", "1000", "--json", "--out", str(tmp_path)]
    assert main([*common, "--problems", "60"]) == 0
    few = {p["name"]: p["checked"] for p in json.loads(capsys.readouterr().out)["properties"]}["kernel"]
    assert main([*common, "--problems", "400"]) == 0
    many = {p["name"]: p["checked"] for p in json.loads(capsys.readouterr().out)["properties"]}["kernel"]
    assert many >= few + 300


def test_bad_timeout_or_device_exits_2_with_one_line(tmp_path, capsys):
    f = tmp_path / "rule.py"
    f.write_text(RULE)
    assert main(["audit", "otspec.verifiers:rrs", "--timeout", "-1"]) == 2
    assert main(["audit", f"{f}:stale", "--device", "cuda"]) == 2  # a numpy function has no device
    err = capsys.readouterr().err.splitlines()
    assert "--timeout must be >= 0" in err[0] and "options ['device'] do not apply to 'stale'" in err[1]

"""`otspec bound` end to end: table, JSON, every file format, and agreement with the library."""

import json
import subprocess
import sys

import numpy as np
import pytest

import otspec
from otspec._tolerances import CERTIFICATE_ATOL, EXACT_ATOL, FLOAT64_ATOL
from otspec.cli import main
from otspec.synthetic import synthetic_pair


def test_json_matches_library(capsys):
    rc = main(["bound", "--vocab", "300", "--drafts", "3", "--seed", "4", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    p, q = synthetic_pair(300, seed=4)
    expect = {
        "iid": otspec.optimal_acceptance(p, otspec.iid(q, 3)).value,
        "without_replacement": otspec.optimal_acceptance(p, otspec.without_replacement(q, 3)).value,
        "greedy": otspec.optimal_acceptance(p, otspec.greedy(q, 3)).value,
        "top_k": float(p[np.argsort(-q, kind="stable")[:3]].sum()),  # p(S) of the 3 most probable draft tokens
        "k1": 1 - 0.5 * np.abs(p - q).sum(),
    }
    assert [r["law"] for r in out["results"]] == list(expect)
    for r in out["results"]:
        assert r["status"] == "optimal"
        assert abs(r["value"] - expect[r["law"]]) <= EXACT_ATOL
        assert r["error_bound"] < EXACT_ATOL
    assert out["V"] == 300 and out["k"] == 3 and out["source"] == "synthetic"


def test_table_output(capsys):
    rc = main(["bound", "--vocab", "200", "--drafts", "2", "--law", "iid", "--law", "greedy"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "optimal acceptance, V = 200, k = 2" in out
    assert "iid" in out and "greedy" in out and "without_replacement" not in out


@pytest.mark.parametrize("fmt", [".npy", ".npz", ".safetensors", ".txt", ".csv"])
def test_file_formats(fmt, tmp_path, capsys):
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(7)), rng.dirichlet(np.ones(7))
    paths = []
    for name, x in (("p", p), ("q", q)):
        path = tmp_path / f"{name}{fmt}"
        if fmt == ".npy":
            np.save(path, x)
        elif fmt == ".npz":
            np.savez(path, x=x)
        elif fmt == ".safetensors":
            from safetensors.numpy import save_file

            save_file({"x": x}, str(path))
        else:
            np.savetxt(path, x, delimiter="," if fmt == ".csv" else " ", fmt="%.17g")
        paths.append(str(path))
    rc = main(["bound", "--p", paths[0], "--q", paths[1], "--drafts", "2", "--json", "--law", "iid"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert abs(out["results"][0]["value"] - otspec.optimal_acceptance(p, otspec.iid(q, 2), method="subsets").value) <= EXACT_ATOL


def test_logits_files(tmp_path, capsys):
    lp, lq = np.array([1.0, 0.0, -1.0]), np.array([0.0, 0.0, 0.0])
    np.save(tmp_path / "p.npy", lp)
    np.save(tmp_path / "q.npy", lq)
    rc = main(
        ["bound", "--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.npy"), "--logits", "--drafts", "1", "--json", "--law", "k1"]
    )
    assert rc == 0
    p = np.exp(lp) / np.exp(lp).sum()
    out = json.loads(capsys.readouterr().out)
    assert abs(out["results"][0]["value"] - np.minimum(p, 1 / 3).sum()) <= FLOAT64_ATOL


def test_console_script_and_module_agree():
    args = ["bound", "--vocab", "50", "--drafts", "2", "--json", "--law", "iid"]
    a = subprocess.run([sys.executable, "-m", "otspec", *args], capture_output=True, text=True, check=True)
    b = json.loads(a.stdout)
    assert b["results"][0]["method"] == "prefix"


def test_dirichlet_family_and_temperature(capsys):
    rc = main(["bound", "--vocab", "100", "--drafts", "2", "--family", "dirichlet", "--temperature", "2", "--json", "--law", "iid"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    p, q = synthetic_pair(100, family="dirichlet", temperature=2.0)
    assert abs(out["results"][0]["value"] - otspec.optimal_acceptance(p, otspec.iid(q, 2)).value) <= FLOAT64_ATOL


def test_verifiers_table_json_matches_library(capsys):
    """`--verifiers` adds Hu et al.'s table: each verifier's acceptance, gap and % of optimum."""
    rc = main(["bound", "--vocab", "40", "--drafts", "2", "--seed", "1", "--json", "--law", "iid", "--verifiers"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    p, q = synthetic_pair(40, seed=1)
    law = otspec.iid(q, 2)
    opt = otspec.optimal_acceptance(p, law).value
    rows = {r["name"]: r for r in out["verifiers"]["iid"]}
    assert {"kseq", "rrs", "khisti", "nss", "naive", "optimal_plan"} <= set(rows)
    assert abs(rows["kseq"]["acceptance"] - otspec.verifiers.kseq.acceptance(p, law).value) <= FLOAT64_ATOL
    for r in rows.values():
        assert abs(r["optimum"] - opt) <= FLOAT64_ATOL
        assert r["acceptance"] <= opt + EXACT_ATOL or not r["lossless"]  # a lossy rule may exceed the lossless optimum
        assert abs(r["shortfall"] - (opt - r["acceptance"])) <= FLOAT64_ATOL
    assert abs(rows["optimal_plan"]["acceptance"] - opt) <= CERTIFICATE_ATOL


def test_verifiers_table_printed(capsys):
    rc = main(["bound", "--vocab", "30", "--drafts", "2", "--law", "iid", "--verifiers"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "verifiers vs optimum, law = iid" in out and "kseq" in out and "% of optimum" in out


def test_default_laws_that_do_not_apply_are_listed_not_fatal(capsys):
    """k beyond the support: without replacement, greedy and top-k cannot draft k distinct tokens. In
    the default table they are reported as not applicable; asked for by name they exit 2."""
    rc = main(["bound", "--vocab", "3", "--drafts", "4", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["law"] for r in out["results"]] == ["iid", "k1"]
    assert {r["law"] for r in out["not_applicable"]} == {"without_replacement", "greedy", "top_k"}
    assert all("support size" in r["reason"] for r in out["not_applicable"])
    assert main(["bound", "--vocab", "3", "--drafts", "4", "--law", "greedy"]) == 2


def test_broken_pipe_is_quiet():
    r = subprocess.run(
        f"{sys.executable} -m otspec bound --vocab 2000 --drafts 2 --json --verifiers | head -1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip() == "{"
    assert "Traceback" not in r.stderr


def _strict_loads(text):
    """json.loads that refuses NaN / Infinity (what strict RFC 8259 parsers do)."""

    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_is_strict_with_unavailable_verifiers(capsys):
    # Regression: unavailable verifiers printed bare NaN.
    assert main(["bound", "--vocab", "300", "--drafts", "4", "--law", "iid", "--verifiers", "--json"]) == 0
    out = _strict_loads(capsys.readouterr().out)
    rows = [r for r in out["verifiers"]["iid"] if r["how"] == "unavailable"]
    assert rows, "the case must exercise an unavailable verifier"
    for r in rows:
        assert r["acceptance"] is None and r["shortfall"] is None and "enumerable" in r["reason"]


def test_strict_json_reason_fields():
    from otspec.cli.toolkit import strict_json

    got = strict_json({"value": float("nan"), "status": "solver_failed", "xs": [1.0, float("inf")], "e": np.float64(-np.inf)})
    text = json.dumps(got, allow_nan=False)
    back = _strict_loads(text)
    assert back["value"] is None and "solver_failed" in back["value_reason"]
    assert back["xs"] == [1.0, None] and back["e"] is None and "-infinity" in back["e_reason"]


def test_verifiers_not_computed_show_a_dash_and_one_footnote(capsys, monkeypatch):
    """A verifier whose acceptance needs an enumerable law prints a dash (never nan / unavailable)
    and the table has one footnote saying why and what computes it; JSON keeps null plus the reason."""
    import math

    from otspec import report

    real = report.compare
    reason = "verifier 'khisti' needs an enumerable law and iid(V=30, k=2) has 900 tuples x 30 tokens; use a smaller V/k"

    def compare(p, law, **kw):  # khisti as it comes back on a law too large to enumerate
        rows = real(p, law, **kw)
        nan = math.nan
        return [
            report.ComparisonRow(r.name, nan, "unavailable", nan, nan, r.optimum, nan, nan, r.lossless, reason) if r.name == "khisti" else r
            for r in rows
        ]

    monkeypatch.setattr(report, "compare", compare)
    assert main(["bound", "--vocab", "30", "--drafts", "2", "--law", "iid", "--verifiers"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out and "unavailable" not in out
    line = next(x for x in out.splitlines() if "khisti" in x and "│" in x)
    assert line.count("\u2014") == 4, line
    assert out.count("not computed") == 1
    flat = " ".join(out.split())
    assert "khisti needs an enumerable law" in flat and "optimal on every law" in flat and "method='prefix'" in flat
    assert main(["bound", "--vocab", "30", "--drafts", "2", "--law", "iid", "--verifiers", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["verifiers"]["iid"]
    kh = next(r for r in rows if r["name"] == "khisti")
    assert kh["acceptance"] is None and kh["how"] == "unavailable" and "enumerable" in kh["reason"]


def _json_of(argv, capsys):
    assert main(argv) == 0
    return capsys.readouterr().out


def test_optimal_wor_row_is_its_certified_bracket_unless_fitted(capsys):
    """Regression: ``--verifiers`` fitted optimal_wor's Luce weights at scale
    (minutes at V = 262 144 without numba). Without ``--fit-wor`` its row is the certified interval
    [0, alpha*_WOR] and no fit runs; with it, the fitted closed form lies inside that interval."""
    from otspec.verifiers import optimal_wor

    V, k = 60, 4  # C(60, 4) > 20 000 draft sets: the quadrature oracle and the iterative fit
    p, q = synthetic_pair(V, seed=2)
    law = otspec.without_replacement(q, k)
    opt = otspec.optimal_acceptance(p, law)
    optimal_wor._cache = None  # a fresh verifier state: nothing prepared for this pair
    base = ["bound", "--vocab", str(V), "--drafts", str(k), "--seed", "2", "--law", "without_replacement", "--verifiers", "--json"]
    assert main(base) == 0
    row = {r["name"]: r for r in _strict_loads(capsys.readouterr().out)["verifiers"]["without_replacement"]}["optimal_wor"]
    assert row["how"] == "bracket" and row["acceptance"] is None
    assert row["ci_low"] == 0.0 and opt.value - opt.error_bound <= row["ci_high"] <= opt.value + 2 * opt.error_bound + EXACT_ATOL
    assert not optimal_wor._cached(p, law), "the bracket must not run the weight fit"
    wi = {r["name"]: r for r in _strict_loads(_json_of(base, capsys))["verifiers"]["without_replacement"]}["wor_iid"]
    opt_iid = otspec.optimal_acceptance(p, otspec.iid(q, k))
    assert wi["how"] == "bracket" and wi["ci_low"] == opt_iid.value - opt_iid.error_bound  # no sampling
    assert main(["bound", "--vocab", str(V), "--drafts", str(k), "--seed", "2", "--law", "without_replacement", "--verifiers"]) == 0
    assert "certified interval, not fitted" in " ".join(capsys.readouterr().out.split())
    assert main([*base, "--fit-wor"]) == 0
    rows = {r["name"]: r for r in _strict_loads(capsys.readouterr().out)["verifiers"]["without_replacement"]}
    row = rows["optimal_wor"]
    assert row["how"] == "closed_form" and 0.0 <= row["acceptance"] <= opt.value + opt.error_bound + EXACT_ATOL
    assert rows["wor_iid"]["how"] == "monte_carlo"


def test_verifiers_table_has_the_lossy_rules_costs(capsys):
    """Lossy rules (typical, fuzzy, lossy_optimal, ...) carry their exact TV to p and efficiency
    (acceptance - optimum) / TV, both equal to the library's; lossless rules have TV 0."""
    from otspec.verifiers.lossy import efficiency

    rc = main(["bound", "--vocab", "30", "--drafts", "1", "--seed", "2", "--json", "--law", "iid", "--verifiers"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    p, q = synthetic_pair(30, seed=2)
    law = otspec.iid(q, 1)
    rows = {r["name"]: r for r in out["verifiers"]["iid"]}
    assert {"exact_match", "one_hot", "typical", "fuzzy", "lossy_optimal"} <= set(rows)
    for name in ("typical", "fuzzy", "lossy_optimal"):
        v = otspec.verifiers.by_name(name)
        assert abs(rows[name]["tv_to_target"] - v.tv_to_target(p, law)) <= FLOAT64_ATOL
        assert abs(rows[name]["efficiency"] - efficiency(v, p, law)) <= EXACT_ATOL
        assert rows[name]["efficiency"] <= 1.0 + EXACT_ATOL
    assert rows["exact_match"]["tv_to_target"] == 0.0 and rows["exact_match"]["efficiency"] is None
    main(["bound", "--vocab", "30", "--drafts", "1", "--seed", "2", "--law", "iid", "--verifiers"])
    text = capsys.readouterr().out
    assert "TV to p" in text and "efficiency" in text


def test_lossy_cost_never_builds_a_kernel_larger_than_acceptance_does():
    """Regression: the TV column summed V x V kernels at k = 1 (0.5 s per lossy rule at V = 5 000):
    rules without a closed-form output law get no TV above the kernel size acceptance uses."""
    from otspec._tolerances import KERNEL_AUTO_MAX_ENTRIES
    from otspec.cli.bound import _lossy_cost
    from otspec.report import ComparisonRow
    from otspec.verifiers import typical

    def row(name, law):
        return ComparisonRow(name, 0.5, "closed_form", 0.5, 0.5, 0.6, 0.1, 83.3, False)

    p, q = synthetic_pair(300, seed=1)
    law = otspec.iid(q, 2)
    assert law.num_tuples() * law.V > KERNEL_AUTO_MAX_ENTRIES
    assert _lossy_cost(p, law, row("lossy_optimal", law)) is None  # no closed form: would enumerate 9e4 x 300
    wor = otspec.without_replacement(q, 2)
    assert _lossy_cost(p, wor, row("typical", wor)) is None  # no closed-form output law without replacement
    tv, _ = _lossy_cost(p, law, row("typical", law))  # i.i.d. drafts: closed-form output law at any k
    assert tv == typical.tv_to_target(p, law) > 0.0
    p, q = synthetic_pair(5000, seed=1)
    one = otspec.iid(q, 1)
    assert one.num_tuples() * one.V > KERNEL_AUTO_MAX_ENTRIES
    tv, eff = _lossy_cost(p, one, row("typical", one))  # a closed-form output law keeps its TV
    assert tv == typical.tv_to_target(p, one) > 0.0 and eff == pytest.approx(-0.1 / tv)

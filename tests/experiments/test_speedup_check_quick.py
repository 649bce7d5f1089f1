"""experiments/speedup_check.py: its --quick run (tiny random-weight models, seconds) and the
documentation's table, which must be the rendering of the committed result JSON files.

The quick run's numbers are not results; the checks are invariants that hold at any size, and the
prediction rebuilt from the stored costs and rounds with plain arithmetic (no otspec.speedup).
"""

import json
import math

import pytest

from tests.experiments._scripts import ROOT, load_script

RESULTS = ROOT / "docs" / "_static" / "results" / "speedup"


def _check_config(c: dict, tokens: int) -> None:
    g, costs = c["gamma"], c["costs"]
    assert costs["positions"] == list(range(1, g + 2))
    assert all(x > 0 for x in costs["forward_wall_s"] + costs["forward_cpu_s"]) and costs["draft_wall_s_per_token"] > 0
    rows = c["per_prompt"]
    for r in rows:
        assert r["tokens"] == tokens and math.ceil(tokens / (g + 1)) <= r["rounds"] <= tokens
        assert 0 <= r["accepted"] <= g * r["rounds"] and len(r["expected"]) == r["rounds"]
        assert all(-1e-12 <= e <= g + 1e-12 for e in r["expected"])
        for key in ("alpha", "alpha_given_text"):
            assert len(r[key]) == tokens and all(0.0 <= a <= 1.0 for a in r[key])
        if c["drafter"] == "prompt-lookup":  # a one-hot draft: the emitted token was accepted iff it is the draft
            assert set(r["alpha_given_text"]) <= {0.0, 1.0}
        assert r["wall_s"] > 0 and r["prefill_s"] > 0
    assert len(c["cost_slots"]) == len(rows) + 1  # before every prompt and after the last
    slots = c["cost_slots"]
    assert c["costs"]["step_wall_s"] == pytest.approx(sum(sl["step_wall_s"] for sl in slots) / len(slots), rel=1e-12)

    # each prompt's round: gamma drafted tokens + the forward of gamma + 1 positions (a measured point)
    # + the verify step and the cache crop, from the measurements right before and after the prompt
    def round_s(r):
        k = r["costs"]
        return g * k["draft_wall_s_per_token"] + k["forward_wall_s"][g] + k["step_wall_s"] + k["crop_wall_s"]

    for i, r in enumerate(rows):
        two = c["cost_slots"][i : i + 2]
        assert r["costs"]["step_wall_s"] == pytest.approx((two[0]["step_wall_s"] + two[1]["step_wall_s"]) / 2, rel=1e-12)
    th = c["predictions"]["wall/full/theory"]
    rounds = sum(r["rounds"] for r in rows)
    seconds = sum(r["rounds"] * round_s(r) for r in rows)
    assert th["round_s_predicted"] == pytest.approx(seconds / rounds, rel=1e-12)
    predicted = (rounds + sum(sum(r["expected"]) for r in rows)) / seconds
    measured = (rounds + sum(r["accepted"] for r in rows)) / sum(r["wall_s"] for r in rows)
    assert th["predicted_tokens_per_s"] == pytest.approx(predicted, rel=1e-12)
    assert th["measured_tokens_per_s"] == pytest.approx(measured, rel=1e-12)
    assert th["error"]["value"] == pytest.approx(predicted / measured - 1, rel=1e-9, abs=1e-12)
    for key, p in c["predictions"].items():
        assert 1.0 <= p["tokens_per_round_predicted"] <= g + 1 + 1e-9, key
        e = p["error"]
        assert e["n_clusters"] == len(rows) and (math.isnan(e["low"]) or e["low"] - 1e-9 <= e["value"] <= e["high"] + 1e-9), key


def test_speedup_check_quick(tmp_path):
    pytest.importorskip("transformers", reason="install the [decode] extra (torch, transformers)")
    mod = load_script("speedup_check.py")
    argv = ["--random-weights", "--quick", "--gammas", "2", "--repeats", "2", "--out", str(tmp_path)]
    assert mod.main(argv) == 0
    d = json.loads((tmp_path / "speedup_check.json").read_text())
    assert d["meta"]["quick"] and d["meta"]["name"] == "speedup_check" and d["meta"]["prompts"] == 2
    assert [(c["drafter"], c["gamma"]) for c in d["configs"]] == [("prompt-lookup", 2), ("early-exit", 2)]
    for c in d["configs"]:
        _check_config(c, d["meta"]["tokens"])
        kinds = {
            f"{clock}/{cost}/{src}"
            for clock in ("wall", "cpu")
            for cost in ("full", "forward")
            for src in ("tf", "text", "constant", "theory")
        }
        assert set(c["predictions"]) == kinds
    table = mod.table(str(tmp_path))
    assert table.count("| CPU, 1 thread |") == 2 and table in (tmp_path / "speedup_check.md").read_text()


def test_speedup_check_keeps_measurements_when_a_configuration_fails(tmp_path):
    pytest.importorskip("transformers", reason="install the [decode] extra (torch, transformers)")
    mod = load_script("speedup_check.py")
    real = mod.run_config

    def failing_at_two(target, source, drafter, prompts, gamma, args, clock):
        if gamma == 2:
            raise RuntimeError("planted failure")
        return real(target, source, drafter, prompts, gamma, args, clock)

    mod.run_config = failing_at_two
    argv = ["--random-weights", "--quick", "--drafters", "prompt-lookup", "--gammas", "2,1", "--repeats", "1", "--out", str(tmp_path)]
    assert mod.main(argv) == 1
    d = json.loads((tmp_path / "speedup_check.json").read_text())
    assert d["configs"][0] == {"drafter": "prompt-lookup", "gamma": 2, "error": "RuntimeError: planted failure"}
    assert d["configs"][1]["gamma"] == 1 and "predictions" in d["configs"][1]
    assert "failed: RuntimeError: planted failure" in mod.table(str(tmp_path))


def test_committed_speedup_table_is_the_rendering_of_its_json():
    """docs/speedup.rst shows table.md; it must be speedup_check.table over the committed JSON."""
    mod = load_script("speedup_check.py")
    assert sorted(RESULTS.glob("*.json")), "no committed speedup_check results"
    assert mod.table(str(RESULTS)) == (RESULTS / "table.md").read_text()

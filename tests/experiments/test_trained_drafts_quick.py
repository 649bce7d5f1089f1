"""experiments/trained_drafts.py: its --quick run (tiny target, drafts trained in-process, seconds)
and the committed SmolLM2 result, whose speed-ups must be the ratios of its own per-prompt rows.

The quick run's numbers are not results; the checks are invariants that hold at any size."""

import json

import pytest

from tests.experiments._scripts import ROOT, load_script, run_quick

RESULT = ROOT / "docs" / "_static" / "results" / "trained_drafts" / "trained_drafts.json"


def _check_decode(results: dict, tokens: int) -> None:
    plain = results["plain"]["per_prompt"]
    plain_rate = sum(r["tokens"] for r in plain) / sum(r["seconds"] for r in plain)
    for key, r in results.items():
        if key == "plain":
            continue
        gamma = int(key.split(":")[1])
        rows = r["per_prompt"]
        assert all(row["tokens"] == tokens and 0 <= row["accepted"] <= gamma * row["target_calls"] for row in rows)
        calls = sum(row["target_calls"] for row in rows)
        assert r["tokens_per_target_call"] == pytest.approx(sum(row["tokens"] for row in rows) / calls, rel=1e-12)
        assert 1.0 <= r["tokens_per_target_call"] <= gamma + 1
        rate = sum(row["tokens"] for row in rows) / sum(row["seconds"] for row in rows)
        assert r["speedup"]["value"] == pytest.approx(rate / plain_rate, rel=1e-9)


def test_quick_run(tmp_path):
    _, data = run_quick("trained_drafts.py", tmp_path)
    for by_t in data["acceptance"]["alpha"].values():
        assert set(by_t) == {"T1", "T0.6"}
        assert all(0.0 <= s["value"] <= 1.0 for steps in by_t.values() for s in steps)
    assert len(data["acceptance"]["alpha"]["tiny-medusa"]["T1"]) == 3  # one row per head
    assert all(v > 0 for v in data["costs"]["median_s"].values())
    assert data["costs"]["relative_to_target_step"]["target_step"] == 1.0
    _check_decode(data["decode"]["results"], data["decode"]["tokens_per_prompt"])
    assert (tmp_path / "table.md").read_text() == load_script("trained_drafts.py").render(data)


@pytest.mark.skipif(not RESULT.exists(), reason="no committed SmolLM2 result")
def test_committed_result_is_consistent():
    data = json.loads(RESULT.read_text())
    assert data["quick"] is False and data["target"] == "smollm2"
    _check_decode(data["decode"]["results"], data["decode"]["tokens_per_prompt"])
    assert (RESULT.parent / "table.md").read_text() == load_script("trained_drafts.py").render(data)  # the docs' table

"""experiments/bench/bench_decode.py runs in --quick mode (tiny models, seconds) and writes JSON + markdown + PNG.

The numbers of a --quick run are not results; the checks are the benchmark's own invariants, which
hold at any size: every method generates exactly --max-new-tokens tokens per prompt, plain sampling
makes one round per token, speculative rounds accept between 0 and gamma drafts, the exact expected
acceptance lies in the same range, and every summary cell has its prompt-clustered interval.
"""

import json
import math

import pytest

from tests.experiments._scripts import run_quick

pytest.importorskip("matplotlib", reason="install the [plots] extra")
pytest.importorskip("transformers", reason="install the [decode] extra (torch, transformers)")


def test_bench_decode_quick(tmp_path):
    import matplotlib.pyplot as plt

    mod, d = run_quick("bench/bench_decode.py", tmp_path)
    md = (tmp_path / "bench_decode.md").read_text()
    assert "Command: `python" in md and "Revision: `" in md and "Run time" in md
    n_new, gamma = d["args"]["max_new_tokens"], d["args"]["gamma"]
    rows = d["per_prompt"]
    assert {r["method"] for r in rows} == set(mod.METHODS)
    assert all(r["tokens"] == n_new and r["cpu_seconds"] > 0 for r in rows)
    assert all(r["rounds"] == n_new for r in rows if r["method"] == "plain")
    for r in rows:
        if "expected" in r:  # otspec runs: per round, 0 <= accepted, expected <= gamma
            assert 0 <= r["accepted"] <= gamma * r["rounds"] and 0 <= r["expected"] <= gamma * r["rounds"] + 1e-9
            assert r["rounds"] <= n_new  # every round emits at least one token
    for group in ("all", "humaneval", "own"):
        s = d["summary"][group]
        assert set(s) == set(mod.METHODS)
        for m, e in s.items():
            for key in ("tokens_per_s", "block_efficiency") + (() if m == "plain" else ("speed_vs_plain",)):
                c = e[key]
                assert c["n_clusters"] == (4 if group == "all" else 2) and (math.isnan(c["low"]) or c["low"] <= c["value"] <= c["high"]), (
                    m,
                    key,
                    c,
                )
        assert s["plain"]["block_efficiency"]["value"] == 1.0
        assert 0.0 <= s["lookup"]["match_rate"]["value"] <= 1.0
    assert d["forward_cost"]["block_over_one"]["value"] > 0
    # re-summarising the stored per-prompt data reproduces the summary (seeded bootstrap) and names the measured run
    mod.main(["--summarise", str(tmp_path / "bench_decode.json"), "--out", str(tmp_path / "again")])
    plt.close("all")
    d2 = json.loads((tmp_path / "again" / "bench_decode.json").read_text())
    assert json.dumps(d2["summary"]) == json.dumps(d["summary"]) and d2["per_prompt"] == rows  # (NaN-safe)
    assert d2["measured"]["command"] == d["meta"]["command"]
    assert "Measured by `python" in (tmp_path / "again" / "bench_decode.md").read_text()

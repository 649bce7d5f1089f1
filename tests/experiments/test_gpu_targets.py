"""``experiments/bench/gpu_targets.py`` judges the GPU targets from the JSON of one ``gpu_checks.sh`` run."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("_gpu_targets", ROOT / "experiments" / "bench" / "gpu_targets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _chain(rule, B, ms, graph_ms):
    return {"device": "cuda", "kind": "chain", "rule": rule, "B": B, "V": 49152, "gamma": 4, "k": 1, "torch_ms": ms, "step_ms": ms / 2,
            "graph_ms": graph_ms, "graph_inplace_ms": 0.04, "formula_ms": 0.2, "formula_graph_ms": 0.05}  # fmt: skip


def test_targets_table_judges_each_measured_cell_and_marks_the_rest_unmeasured(tmp_path):
    (tmp_path / "chains_V49152").mkdir()
    rows = [_chain("token", 1, 0.060, 0.080), _chain("token", 64, 0.120, 0.090), _chain("block", 1, 0.085, "capture failed: x")]
    rows += [_chain("block", 64, 0.200, 0.100), {**_chain("token", 1, 0.001, 0.001), "device": "cpu"}]  # a CPU row is never read
    (tmp_path / "chains_V49152" / "bench_torch_chains.json").write_text(json.dumps({"cuda_rows": rows}))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in _module().table(str(tmp_path)).splitlines()}
    # columns: sample, step, graph, graph in place, formula / formula graph, met eager, met graph
    assert lines["token chain, gamma 4, V 49152, B 1: <= 70 us"].endswith("| 60 | 30 | 80 | 40 | 200 / 50 | yes | no |")
    assert lines["token chain, gamma 4, V 49152, B 64: <= 100 us"].endswith("| 120 | 60 | 90 | 40 | 200 / 50 | no | yes |")
    block_b1 = lines["block chain <= 1.5x token, gamma 4, V 49152, B 1"]
    assert "(1.42x token)" in block_b1 and block_b1.endswith("| yes | - |")  # no graph ratio: the capture failed
    assert lines["block chain <= 1.5x token, gamma 4, V 49152, B 64"].endswith("(1.11x) | 40 | - | no | yes |")
    assert lines["token chain, gamma 4, V 128256, B 1: <= 75 us"].endswith("| unmeasured | unmeasured |")
    assert lines["rrs k 8, V 262144, B 1: <= 100 us"].endswith("| unmeasured | unmeasured |")


def _share(label, graphs, share):
    return {"label": label, "graphs": graphs, "verify_share": share}


def test_share_table_judges_each_target_and_the_optimal_to_kseq_ratio(tmp_path):
    (tmp_path / "share").mkdir()
    rows = [_share("chain token", False, 0.019), _share("chain token", True, 0.021), _share("single kseq k 4", False, 0.04)]
    rows += [_share("single optimal_iid k 4", False, 0.079), _share("tree kseq 4 x 4", True, None)]  # None: no rounds
    (tmp_path / "share" / "bench_gpu_decode_share.json").write_text(json.dumps({"rows": rows}))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in _module().share_table(str(tmp_path)).splitlines()}
    assert lines["chain token: verify <= 2% of a round"].endswith("| 1.9% | 2.1% | yes | no |")
    assert lines["single optimal_iid k 4: verify <= 5% of a round"].endswith("| 7.9% | unmeasured | no | unmeasured |")
    assert lines["tree kseq 4 x 4: verify <= 5% of a round"].endswith("| unmeasured | unmeasured | unmeasured | unmeasured |")
    # 0.079 / 0.04 = 1.975x: within 2x
    assert lines["optimal_iid share <= 2x kseq's (k 4)"].endswith("| 1.98x | unmeasured | yes | unmeasured |")


def test_decode_share_benchmark_runs_on_cpu_and_writes_its_tables(tmp_path):
    """The GPU decode-share benchmark's CPU dry run (tiny random-weight models): every phase is timed
    and the verify share lies in (0, 1)."""
    spec = importlib.util.spec_from_file_location("_share", ROOT / "experiments" / "bench" / "bench_gpu_decode_share.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (
        mod.main(["--quick", "--out", str(tmp_path), "--prompts", "2", "--tokens", "4", "--configs", "chain token", "tree kseq 4 x 4"]) == 0
    )
    data = json.loads((tmp_path / "bench_gpu_decode_share.json").read_text())
    assert [r["label"] for r in data["rows"]] == ["chain token", "tree kseq 4 x 4"]
    for r in data["rows"]:
        assert r["rounds"] >= 1 and 0.0 < r["verify_share"] < 1.0
        assert set(r["phase_s"]) == {"draft", "target", "verify", "rollback"}
    assert "| chain token | off |" in (tmp_path / "bench_gpu_decode_share.md").read_text()
    assert mod.main(["--quick", "--out", str(tmp_path), "--prompts", "0"]) == 2


def test_committed_gpu_targets_table_is_the_one_its_committed_json_gives():
    """The serving-speed table in docs/benchmarks.rst is ``gpu_targets.py`` over the committed JSON of that
    H200 run, so the page cannot drift from the measurements."""
    results = ROOT / "docs" / "_static" / "results" / "gpu"
    for table in sorted(results.glob("targets_*.md")):
        run = results / ("run_" + table.stem.split("_", 1)[1])
        if run.is_dir():  # older tables predate committed run folders
            assert _module().table(str(run)).strip() == table.read_text().strip(), table.name

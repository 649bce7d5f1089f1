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


def _chain(rule, B, ms):
    return {"device": "cuda", "kind": "chain", "rule": rule, "B": B, "V": 49152, "gamma": 4, "k": 1, "torch_ms": ms, "step_ms": ms / 2,
            "graph_ms": "capture failed: x", "formula_ms": 0.2, "formula_graph_ms": 0.05}  # fmt: skip


def test_targets_table_judges_each_measured_cell_and_marks_the_rest_unmeasured(tmp_path):
    (tmp_path / "chains_V49152").mkdir()
    rows = [_chain("token", 1, 0.060), _chain("token", 64, 0.120), _chain("block", 1, 0.085), _chain("block", 64, 0.200)]
    rows.append({**_chain("token", 1, 0.001), "device": "cpu"})  # a CPU row is never read
    (tmp_path / "chains_V49152" / "bench_torch_chains.json").write_text(json.dumps({"cuda_rows": rows}))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in _module().table(str(tmp_path)).splitlines()}
    assert lines["token chain, gamma 4, V 49152, B 1: <= 70 us"].endswith("| yes |")
    assert "| 60 | 30 | - | 200 / 50 |" in lines["token chain, gamma 4, V 49152, B 1: <= 70 us"]
    assert lines["token chain, gamma 4, V 49152, B 64: <= 100 us"].endswith("| no |")
    assert "(1.42x token)" in lines["block chain <= 1.5x token, gamma 4, V 49152, B 1"]
    assert lines["block chain <= 1.5x token, gamma 4, V 49152, B 1"].endswith("| yes |")
    assert lines["block chain <= 1.5x token, gamma 4, V 49152, B 64"].endswith("| no |")
    assert lines["token chain, gamma 4, V 128256, B 1: <= 75 us"].endswith("| unmeasured |")
    assert lines["rrs k 8, V 262144, B 1: <= 100 us"].endswith("| unmeasured |")

"""The Ray engine of otspec corpus on a local Ray instance with 2 CPUs: the same rows as the local
engine, bit for bit, and a run killed under one engine resumes under the other."""

import json

import numpy as np
import pytest
import ray

from otspec_gpu.corpus import SolverSpec, read_results, run_corpus
from otspec_gpu.corpus.ray_engine import solve_batch
from otspec_gpu.corpus.solvers import solve_rows

#: Ray's scoring actors run torch with one thread (one CPU each); the local engine here does too, so
#: the float32 forwards, and with them every column, agree bit for bit (the solver stage always does).
pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = SolverSpec(laws=("iid", "greedy", "without_replacement"), ks=(2, 3), verifiers=("kseq", "rrs", "rrs_wor"), mc_samples=200)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "c.jsonl"
    with open(path, "w") as fh:
        for i in range(5):
            fh.write(json.dumps({"ids": rng.integers(0, 6, int(rng.integers(3, 9))).tolist(), "domain": f"d{i % 2}"}) + "\n")
    return str(path)


def _run(src, out, engine, **kw):
    return run_corpus([src], target="tiny", draft="tiny-draft", out=out, field="ids", spec=SPEC, shard_docs=2, engine=engine, **kw)


def test_solver_stage_is_the_local_function():
    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(9), size=4), rng.dirichlet(np.ones(9), size=4)
    batch = {
        "doc_index": np.array([0, 0, 1, 1]),
        "position": np.array([0, 1, 0, 1]),
        "token": np.zeros(4),
        "score_s": np.zeros(4),
        "p": P,
        "q": Q,
    }
    out = solve_batch(batch, SPEC)
    ref = solve_rows(P, Q, SPEC, docs=batch["doc_index"], positions=batch["position"])
    for c, v in ref.items():
        np.testing.assert_array_equal(out[c], v)


def test_ray_rows_equal_local_rows_bit_for_bit(tmp_path, corpus, local_ray):
    local = _run(corpus, tmp_path / "local", "local")
    viaray = _run(corpus, tmp_path / "ray", "ray", workers=1)
    assert viaray.shards_computed == local.n_shards == 3
    assert read_results(viaray.out).equals(read_results(local.out))


def test_killed_local_run_resumes_on_ray(tmp_path, corpus, local_ray):
    full = _run(corpus, tmp_path / "full", "local")

    class Killed(Exception):
        pass

    def kill(s):
        raise Killed

    with pytest.raises(Killed):
        _run(corpus, tmp_path / "part", "local", after_shard=kill)
    res = _run(corpus, tmp_path / "part", "ray", workers=1)
    assert res.shards_computed == 2
    assert read_results(res.out).equals(read_results(full.out))

#!/usr/bin/env bash
# GPU checks of the torch verifiers, from the repository root: the CUDA rows of bench_torch_chains.py
# (token / block chain, gamma 4, V 49 152 / 128 256 / 262 144, B 1 / 64, beside the same-run
# formula step and its CUDA-graph replay) and of bench_torch_verifiers.py (single-step rules, B 1 /
# 64; then optimal_iid's Inductor-compiled step at V 262 144), each writing JSON + markdown, then
# bench_gpu_decode_share.py (verification's share of a decoding round with SmolLM2-shaped
# random-weight models, eager, from graphs, compiled), then the CUDA tests of tests/gpu (pytest -k cuda; the corpus
# tests are left out: they need pyarrow / ray), then the targets table of gpu_targets.py. $OUT gets
# four files (the device tool brings back a few files only): summary.md (environment, targets, every
# benchmark table, the tests' tail), targets.md, tests.txt, and results.tar.gz (every JSON, markdown,
# log and the JUnit XML; the work folder is $WORK, default a temporary one), written after the
# benchmarks and again after the tests. Every phase has its own timeout (3 x 45 + 2 x 45 + 120 + 130 +
# 120 = 595 s at most: give the device call its 600 s; about 2.5-3 minutes on one H200 before the decoding phase was added, Triton
# compiling the kernels on first use) so one slow phase cannot starve the others. Without CUDA it prints why and exits 0 (nothing to check).
#
#   OUT=/tmp/gpu_out bash experiments/bench/gpu_checks.sh      (PYTHON defaults to python3; a venv's python for a CPU dry run)
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-experiments/bench/out/gpu_checks}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; then
    echo "gpu_checks: no CUDA device visible to $PYTHON; the CUDA tests and rows are skipped"
    exit 0
fi
# the lent GPU machine runs the checkout uninstalled (../shared/gpu/README.md): wheels that travelled
# in .device/whl (e.g. highspy) go to /tmp/site, the repository itself is on PYTHONPATH
if ls .device/whl/*.whl > /dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .device/whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
{
    git rev-parse HEAD 2>/dev/null
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
    "$PYTHON" -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
    "$PYTHON" -c "import triton; print('triton', triton.__version__)" 2>&1 | tail -1
} > "$WORK/env.txt"
cat "$WORK/env.txt"
rc=0
for V in 49152 128256 262144; do
    timeout "${CHAIN_TIMEOUT:-45}" "$PYTHON" experiments/bench/bench_torch_chains.py --devices cuda --cuda-gammas 4 --cuda-vocabs "$V" \
        --out "$WORK/chains_V$V" > "$WORK/chains_V$V.log" 2>&1 || { rc=1; tail -5 "$WORK/chains_V$V.log"; }
done
# the single-step rules with a serving-speed target or a same-run comparison; optimal_iid (khisti is the same
# rule) is timed at its own target cells in the compiled phase below, eager, replayed and compiled
RULES="token kseq rrs rrs_wor greedy_optimal spechub nss naive approximate"
for B in 1 64; do
    # shellcheck disable=SC2086
    timeout 45 "$PYTHON" experiments/bench/bench_torch_verifiers.py --devices cuda --no-numpy --batches "$B" --verifiers $RULES \
        --out "$WORK/verifiers_B$B" > "$WORK/verifiers_B$B.log" 2>&1 || { rc=1; tail -5 "$WORK/verifiers_B$B.log"; }
done
# the optimal verifier's step compiled by Inductor (otspec_gpu.compiled), at the target cells only
timeout "${COMPILED_TIMEOUT:-120}" "$PYTHON" experiments/bench/bench_torch_verifiers.py --devices cuda --no-numpy --batches 1 64 \
    --vocabs 262144 --ks 8 --verifiers optimal_iid --compiled --out "$WORK/compiled" > "$WORK/compiled.log" 2>&1 || { rc=1; tail -5 "$WORK/compiled.log"; }
# verification's share of a decoding round (SmolLM2-shaped random-weight models; eager, graphs, compiled)
timeout "${SHARE_TIMEOUT:-130}" "$PYTHON" experiments/bench/bench_gpu_decode_share.py --out "$WORK/share" \
    > "$WORK/share.log" 2>&1 || { rc=1; tail -5 "$WORK/share.log"; }
summarize() {  # $OUT: summary.md, targets.md, tests.txt, results.tar.gz (written after the benchmarks, again after the tests)
    "$PYTHON" experiments/bench/gpu_targets.py "$WORK" > "$WORK/targets.md"
    {
        echo "# gpu_checks"; echo; echo '```'; cat "$WORK/env.txt"; echo '```'; echo
        echo "## Targets"; echo; cat "$WORK/targets.md"; echo
        for f in "$WORK"/chains_V*/*.md "$WORK"/verifiers_B*/*.md "$WORK"/compiled/*.md "$WORK"/share/*.md; do [ -f "$f" ] && { cat "$f"; echo; }; done
        echo "## Tests (tail)"; echo; echo '```'; tail -40 "$WORK/tests.txt" 2> /dev/null || echo "not run yet"; echo '```'
    } > "$OUT/summary.md"
    cp "$WORK/targets.md" "$OUT/"
    [ -f "$WORK/tests.txt" ] && cp "$WORK/tests.txt" "$OUT/"
    tar czf "$OUT/results.tar.gz" -C "$WORK" .
}
summarize
timeout "${TEST_TIMEOUT:-120}" "$PYTHON" -m pytest -q -p no:cacheprovider -k cuda --junitxml="$WORK/tests.xml" \
    --ignore=tests/gpu/test_corpus.py --ignore=tests/gpu/test_corpus_ray.py tests/gpu > "$WORK/tests.txt" 2>&1 || rc=1
tail -25 "$WORK/tests.txt"
summarize
cat "$WORK/targets.md"
exit $rc

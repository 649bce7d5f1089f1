r"""Losslessness end to end at a real vocabulary size (V = 49 152, float32) for the chain and tree
verifiers: drafts drawn by torch from the draft model, verified by the torch sampler, and the law of
the emitted tokens compared with the target model.

Model (an LM-shaped Markov chain, so every conditional depends on the drafted prefix): the target's
next-token law after the context is ``P[0]`` and after a token ``y`` it is ``P[1 + y % 3]``; the
draft model likewise with ``Q``. Logits of ``P`` are ``3 (0.6 z_0 + 0.8 z_r)`` with seeded
standard normals (a shared part and one per row, like an LM's heavy-tailed next-token laws); ``Q``
adds ``0.8 N(0, 1)`` noise (about 0.75 acceptance per position). gamma = 2 drafted tokens
(``x_1 ~ Q[0]``, ``x_2 ~ Q[1 + x_1 % 3]`` by :func:`otspec_gpu.drafting.sample_drafts`); trees:
k = 2 sequences drafted by :func:`otspec_gpu.verifiers.tree.draft_sequences`. A verifier's rows are
``[1, gamma + 1, V]`` conditionals ``expand``-ed over the rows that share the drafted classes, so no
row is copied and memory stays well under 2 GB (chunks of :data:`CHUNK` rows bound the verifier's
own ``[rows, V]`` float64 work arrays).

Two statistics per verifier, from one run of N rows:

* **first token**: the first emitted token ``Y_1`` (``x_1`` if accepted, else the correction) must
  be distributed as ``P[0]``: cells = the 30 most likely tokens of ``P[0]`` plus one cell for the
  rest (Pearson chi-square, df 30);
* **three tokens (the (tau, next) structure)**: the emitted block (``x_1..x_tau`` then the
  correction or bonus token) is completed to three tokens by sampling the *target* (a separate
  generator), as the next decoding steps would; lossless verification makes ``(Y_1, Y_2, Y_3)``
  a draw of the target chain. Cells: each token is binned as one of the 5 most likely tokens of
  ``P[0]`` or, for the others, by its class ``y % 3`` (8 bins, which carry the class, so the cell
  law is the exact product ``B0[a] B_{cls a}[b] B_{cls b}[c]``); 512 cells, cells expected below
  10 pooled (:func:`tests.gpu._stats.pooled_chi_square`).

False alarms: every comparison uses ``alpha = 1e-6 / (number of comparisons in the file)``, so the
file's false-alarm rate is <= 1e-6 (fixed seeds make each run deterministic anyway). Power: the
Pearson statistic has noncentrality ``N sum(d^2 / e) >= N (2 TV)^2`` for a binned-law error of total
variation TV, so :func:`detectable_tv` (asserted in ``test_design_power``) is the TV detected with
probability >= 0.99. N rows: ``OTSPEC_LOSSLESS_ROWS`` (default 4 000 per chain rule, sized for CI:
a ``[rows, V]`` residual draw costs about 1 ms per row on one CPU core) and
``OTSPEC_LOSSLESS_TREE_ROWS`` (default 500 per tree rule, every row with its own conditionals,
drafted by :func:`tree.draft_sequences`). The trees run a second time through
:func:`run_tree_shared`: rows grouped by the classes of their drafted tokens share one set of
conditionals, which :func:`tree.sample` then takes once (``[1, k, gamma + 1, V]``), so a row costs
about 0.2 ms instead of 10 ms (``OTSPEC_LOSSLESS_SHARED_TREE_ROWS``, default 20 000 per rule).
Detected with probability 0.99 at these defaults: a first-token TV of 0.082 for the chains (df 30),
about 0.2 for the per-row trees (df about 9 after pooling) and 0.037 for the shared-rows trees; at
N = 1 000 000, 0.0052 (first token) and 0.0067 (three tokens, df 147 after pooling). The runs with
N = 1 000 000 and their results are recorded in ``docs/gpu_chains.rst``.

Negative controls through the same machinery (they must be rejected): a correction drawn from the
target row instead of the residual (the classic "resample from p" bug), and a residual draw that
reuses an accept coin as its uniform (token verification's first coin, block verification's last).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from scipy import stats

from otspec_gpu.drafting import sample_drafts
from otspec_gpu.sampling import categorical
from otspec_gpu.verifiers import TREE, chain, tree
from tests.gpu._stats import pooled_chi_square
from tests.gpu._tolerances import FALSE_ALARM, FLOAT64_ATOL

V = 49_152
GAMMA = 2
CLASSES = 3  # the target / draft conditional after token y is row 1 + y % CLASSES
K_TREE = 2
TOP_FIRST = 30  # first-token cells: the top-30 tokens of P[0] + the rest
TOP_BLOCK = 5  # three-token bins: the top-5 tokens of P[0] + one bin per class
CHUNK = 64  # rows per verifier call: its [CHUNK, V] float64 work arrays stay under 32 MB
TREE_CHUNK = 32
SHARED_CHUNK = 512  # rows per shared-rows tree call: rrs_wor's root residuals are [rows, V] float64
ROWS = int(os.environ.get("OTSPEC_LOSSLESS_ROWS", "4000"))
TREE_ROWS = int(os.environ.get("OTSPEC_LOSSLESS_TREE_ROWS", "500"))
SHARED_TREE_ROWS = int(os.environ.get("OTSPEC_LOSSLESS_SHARED_TREE_ROWS", "20000"))
CONTROL_ROWS = 12_000  # negative controls, whatever OTSPEC_LOSSLESS_ROWS says (block reused_uniform: chi2 89 at 4 000 rows, 179 at 12 000; threshold 90)
CHAIN_RULES = {"token": chain.token_sample, "block": chain.block_sample}
TREE_RULES = TREE
CONTROLS = ("resample_from_p", "reused_uniform")
N_COMPARISONS = 2 * (len(CHAIN_RULES) + 2 * len(TREE_RULES))  # two statistics per verifier and run
ALPHA = FALSE_ALARM / N_COMPARISONS
POWER = 0.99

pytestmark = pytest.mark.usefixtures("one_thread", "keep_freed_memory")


@pytest.fixture(scope="module")
def keep_freed_memory():
    """Let glibc keep freed heap memory while this module runs.

    Every verifier call allocates and frees a few ``[CHUNK, V]`` arrays (tens of MB); glibc returns
    such memory to the kernel on every free (``mmap`` / heap trimming), and the page faults that
    follow cost more system time than the verification itself (measured: 1.0-4.8 s of system time
    per 4 096 rows, against 1.6-2.0 s of user time; about 0.02 s with the memory kept). Sets
    ``M_MMAP_THRESHOLD`` to 32 MiB (the largest value glibc's dynamic threshold reaches anyway) and
    ``M_TRIM_THRESHOLD`` to 1 GiB; afterwards the trim threshold goes back to 64 MiB, where glibc's
    dynamic rule leaves it after a 32 MiB allocation. A no-op where glibc's ``mallopt`` is absent.
    """
    mallopt = _mallopt()
    if mallopt is None:  # not glibc
        yield
        return
    mallopt(M_MMAP_THRESHOLD, 32 << 20)
    mallopt(M_TRIM_THRESHOLD, 1 << 30)
    yield
    mallopt(M_TRIM_THRESHOLD, 64 << 20)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt option numbers (malloc.h)


def _mallopt():
    """glibc's ``mallopt``, or None."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return None


# ------------------------------------------------------------------------------------------------
# The model and the exact laws of the binned statistics.


@pytest.fixture(scope="module")
def lm():
    """``(P, Q)`` float32 ``[CLASSES + 1, V]``: row 0 after the context, row 1 + c after a token of class c."""
    g = np.random.default_rng(49152)
    shared = g.standard_normal(V)
    lp = 3.0 * (0.6 * shared + 0.8 * g.standard_normal((CLASSES + 1, V)))
    lq = lp + 0.8 * g.standard_normal((CLASSES + 1, V))
    P = torch.softmax(torch.as_tensor(lp, dtype=torch.float32), -1)
    Q = torch.softmax(torch.as_tensor(lq, dtype=torch.float32), -1)
    return P, Q


def after(tokens: torch.Tensor) -> torch.Tensor:
    """Row of ``P`` / ``Q`` that follows each token."""
    return 1 + tokens % CLASSES


def first_token_law(P: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
    """``(top tokens, cell probabilities)`` of the first-token statistic (float64, sum 1)."""
    p0 = P[0].double() / P[0].double().sum()
    top = torch.topk(p0, TOP_FIRST).indices
    cells = torch.cat([p0[top], (1.0 - p0[top].sum())[None]]).numpy()
    return top, cells


def block_bins(P: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
    """``(bin of every token [V], exact law of the three-token cells [8 ** 3])``."""
    top = torch.topk(P[0].double(), TOP_BLOCK).indices
    bins = TOP_BLOCK + torch.arange(V) % CLASSES
    bins[top] = torch.arange(TOP_BLOCK)
    nb = TOP_BLOCK + CLASSES
    P64 = P.double() / P.double().sum(-1, keepdim=True)
    mass = torch.zeros((CLASSES + 1, nb), dtype=torch.float64).index_add_(1, bins, P64).numpy()  # mass[r, b]
    cls = np.concatenate([top.numpy() % CLASSES, np.arange(CLASSES)])  # the class every bin carries
    law = np.einsum("a,ab,bc->abc", mass[0], mass[1 + cls], mass[1 + cls])
    return bins, law.ravel()


def detectable_tv(n: int, df: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest binned total variation detected with probability >= ``power`` by a Pearson test
    of ``df`` degrees of freedom at level ``alpha`` on ``n`` rows (noncentrality >= n (2 TV)^2)."""
    thresh = stats.chi2.isf(alpha, df)
    lo, hi = 0.0, 1e6
    for _ in range(100):  # bisection on the noncentrality
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if stats.ncx2.sf(thresh, df, mid) < power else (lo, mid)
    return float(np.sqrt(hi / n) / 2)


# ------------------------------------------------------------------------------------------------
# Runs: draft, verify, emit, complete with the target.


def run_chain(sample_fn, n: int, P: torch.Tensor, Q: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft ``n`` blocks, verify them with ``sample_fn``; returns ``(emitted [n, GAMMA + 1], tau [n])``
    (``emitted[:, t]`` is -1 past the emitted tokens)."""
    gen = torch.Generator().manual_seed(seed)
    x1 = sample_drafts(Q[:1], 1, "iid", generator=gen, n=n)[:, 0]
    x2 = torch.empty_like(x1)
    for c in range(CLASSES):
        rows = torch.nonzero(x1 % CLASSES == c)[:, 0]
        if rows.numel():
            x2[rows] = sample_drafts(Q[1 + c][None], 1, "iid", generator=gen, n=rows.numel())[:, 0]
    drafts = torch.stack([x1, x2], 1)
    tau = torch.empty(n, dtype=torch.long)
    nxt = torch.empty(n, dtype=torch.long)
    pattern = (x1 % CLASSES) * CLASSES + x2 % CLASSES
    for pat in range(CLASSES * CLASSES):  # rows sharing their drafted classes share p and q
        rows = torch.nonzero(pattern == pat)[:, 0]
        c1, c2 = divmod(pat, CLASSES)
        p = P[[0, 1 + c1, 1 + c2]][None]  # [1, gamma + 1, V]
        q = Q[[0, 1 + c1]][None]  # [1, gamma, V]
        for chunk in rows.split(CHUNK):
            m = chunk.numel()
            out = sample_fn(p.expand(m, -1, -1), q.expand(m, -1, -1), drafts[chunk], generator=gen)
            tau[chunk], nxt[chunk] = out.accepted, out.token
    return emitted_tokens(drafts, tau, nxt), tau


def emitted_tokens(drafts: torch.Tensor, tau: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor:
    """``[n, gamma + 1]``: the accepted drafts, then the next token, then -1."""
    t = torch.arange(drafts.shape[1] + 1)[None]
    padded = torch.cat([drafts, torch.full_like(drafts[:, :1], -1)], 1)
    return torch.where(t < tau[:, None], padded, torch.where(t == tau[:, None], nxt[:, None], -1))


def complete(emitted: torch.Tensor, P: torch.Tensor, seed: int) -> torch.Tensor:
    """Fill the -1 tail of every row by sampling the target chain (its own generator)."""
    gen = torch.Generator().manual_seed(seed)
    y = emitted.clone()
    for t in range(1, y.shape[1]):
        for c in range(CLASSES):
            rows = torch.nonzero((y[:, t] < 0) & (y[:, t - 1] % CLASSES == c))[:, 0]
            if rows.numel():
                y[rows, t] = categorical(P[1 + c][None], gen, n=rows.numel())
    return y


def run_tree(rule: str, n: int, P: torch.Tensor, Q: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft ``k = 2`` sequences per row with :func:`tree.draft_sequences`, verify with ``rule``;
    returns ``(emitted [n, GAMMA + 1], tau [n])`` like :func:`run_chain`."""
    gen = torch.Generator().manual_seed(seed)

    def next_q(prefix):
        return Q[0].expand(prefix.shape[0], -1) if prefix.shape[1] == 0 else Q[after(prefix[:, -1])]

    em, taus = [], []
    for start in range(0, n, TREE_CHUNK):
        m = min(TREE_CHUNK, n - start)
        drafts, q = tree.draft_sequences(next_q, m, K_TREE, GAMMA, replacement=rule != "rrs_wor", generator=gen)
        idx = torch.cat([torch.zeros_like(drafts[:, :, :1]), after(drafts)], 2)  # [m, k, gamma + 1]
        out = tree.sample(P[idx], q, drafts, rule=rule, generator=gen)
        path = drafts[torch.arange(m), out.index]  # [m, gamma]: the sequence carrying the emitted prefix
        em.append(emitted_tokens(path, out.accepted, out.token))
        taus.append(out.accepted)
    return torch.cat(em), torch.cat(taus)


def draft_tree_rows(rule: str, n: int, Q: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``n`` drafted trees ``[n, k, gamma]`` with the law of :func:`tree.draft_sequences` (checked
    there against :func:`otspec.trees.draft_trees`), drawn from the shared rows of ``Q``: the ``k``
    first tokens i.i.d. from ``Q[0]`` (``rrs_wor``: without replacement), every later token from the
    row its predecessor selects; O(V + n log V) per distinct row instead of O(V) per row."""
    law = "without_replacement" if rule == "rrs_wor" else "iid"
    cols = [sample_drafts(Q[:1], K_TREE, law, generator=gen, n=n)]  # [n, k]
    for _ in range(1, GAMMA):
        prev = cols[-1].reshape(-1)
        nxt = torch.empty_like(prev)
        for c in range(CLASSES):
            rows = torch.nonzero(prev % CLASSES == c)[:, 0]
            if rows.numel():
                nxt[rows] = categorical(Q[1 + c][None], gen, n=rows.numel())
        cols.append(nxt.view(n, K_TREE))
    return torch.stack(cols, 2)


def run_tree_shared(rule: str, n: int, P: torch.Tensor, Q: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`run_tree`, with the rows grouped by the classes of their drafted tokens: every
    group meets one set of conditionals, passed once (``[1, k, gamma + 1, V]``) to
    :func:`tree.sample` (its shared-rows path) for all the group's rows."""
    gen = torch.Generator().manual_seed(seed)
    drafts = draft_tree_rows(rule, n, Q, gen)
    idx = torch.cat([torch.zeros_like(drafts[:, :, :1]), after(drafts)], 2)  # [n, k, gamma + 1]
    code = ((idx[:, :, 1:] - 1) * CLASSES ** torch.arange(K_TREE * GAMMA).view(K_TREE, GAMMA)).sum((1, 2))
    tau = torch.empty(n, dtype=torch.long)
    em = torch.empty((n, GAMMA + 1), dtype=torch.long)
    for c in torch.unique(code).tolist():
        rows = torch.nonzero(code == c)[:, 0]
        r0 = idx[rows[0]]  # [k, gamma + 1]: the group's rows of P and Q
        p, q = P[r0][None], Q[r0[:, :GAMMA]][None]
        for chunk in rows.split(SHARED_CHUNK):
            out = tree.sample(p, q, drafts[chunk], rule=rule, generator=gen)
            path = drafts[chunk, out.index]
            em[chunk] = emitted_tokens(path, out.accepted, out.token)
            tau[chunk] = out.accepted
    return em, tau


def statistics(emitted: torch.Tensor, P: torch.Tensor, seed: int | None, y: torch.Tensor | None = None) -> dict:
    """Both chi-square comparisons of one run: ``{name: (statistic, threshold, df, p-value)}``.
    ``y``: the emitted tokens already completed to three (else completed here with ``seed``)."""
    n = emitted.shape[0]
    assert bool((emitted[:, 0] >= 0).all()) and int(emitted.max()) < V
    top, cells = first_token_law(P)
    counts_tok = torch.bincount(emitted[:, 0], minlength=V)
    first = torch.cat([counts_tok[top], (n - counts_tok[top].sum())[None]]).numpy()
    y = complete(emitted, P, seed) if y is None else y
    bins, law = block_bins(P)
    nb = TOP_BLOCK + CLASSES
    b = bins[y]
    triple = torch.bincount((b[:, 0] * nb + b[:, 1]) * nb + b[:, 2], minlength=nb**3).numpy()
    out = {}
    for name, counts, probs in (("first token", first, cells), ("three tokens", triple, law)):
        assert counts[probs == 0].sum() == 0
        stat, thresh, df = pooled_chi_square(counts, probs, n, ALPHA)
        out[name] = (stat, thresh, df, float(stats.chi2.sf(stat, df)))
    return out


def report(label: str, n: int, res: dict) -> str:
    return f"{label} N={n}: " + "; ".join(f"{k}: chi2={s:.1f} (df {d}, threshold {t:.1f}, p={pv:.3g})" for k, (s, t, d, pv) in res.items())


# ------------------------------------------------------------------------------------------------
# Tests.


def test_design_power():
    """The stated power: at N = 1e6 a binned TV error of 0.006 is detected (>= 0.99) on the first
    token; the CI default N still detects errors of the size of the negative controls."""
    assert detectable_tv(1_000_000, TOP_FIRST) < 0.006
    assert detectable_tv(4_000, TOP_FIRST) < 0.09
    # the bisection inverts the noncentral chi-square: at the returned TV the power is >= 0.99
    n, df = 4_000, TOP_FIRST
    lam = n * (2 * detectable_tv(n, df)) ** 2
    assert stats.ncx2.sf(stats.chi2.isf(ALPHA, df), df, lam) >= POWER


def test_exact_cell_laws(lm):
    """The binned three-token law sums to 1 and its one- and two-position marginals equal the
    target's marginal laws computed token by token (a dense sum over the first token)."""
    P, _ = lm
    assert abs(first_token_law(P)[1].sum() - 1) < FLOAT64_ATOL
    bins, law = block_bins(P)
    nb = TOP_BLOCK + CLASSES
    law = law.reshape(nb, nb, nb)
    assert abs(law.sum() - 1) < FLOAT64_ATOL and law.min() > 0
    P64 = P.double() / P.double().sum(-1, keepdim=True)
    first = torch.zeros(nb, dtype=torch.float64).index_add_(0, bins, P64[0]).numpy()
    cls = torch.arange(V) % CLASSES
    second = sum(P64[0][cls == c].sum() * P64[1 + c] for c in range(CLASSES))  # [V]: P(Y_2 = y)
    second = torch.zeros(nb, dtype=torch.float64).index_add_(0, bins, second).numpy()
    assert np.allclose(law.sum((1, 2)), first, rtol=FLOAT64_ATOL, atol=0)
    assert np.allclose(law.sum((0, 2)), second, rtol=FLOAT64_ATOL, atol=0)


@pytest.mark.parametrize("rule", sorted(CHAIN_RULES))
def test_chain_lossless(rule, lm):
    P, Q = lm
    emitted, tau = run_chain(CHAIN_RULES[rule], ROWS, P, Q, seed=2026)
    assert 0 < float((tau == GAMMA).double().mean()) < 1  # both bonus and correction paths are exercised
    res = statistics(emitted, P, seed=7)
    print(report(rule, ROWS, res))
    for name, (stat, thresh, _, _) in res.items():
        assert stat < thresh, f"{rule}, {name}: chi2 = {stat:.1f} >= {thresh:.1f}"


@pytest.mark.parametrize("path", ["per_row", "shared_rows"])
@pytest.mark.parametrize("rule", TREE_RULES)
def test_tree_lossless(rule, path, lm):
    """``per_row``: every row with its own conditionals, drafted by :func:`tree.draft_sequences`
    (N = ``TREE_ROWS``); ``shared_rows``: :func:`tree.sample`'s shared-rows path through
    :func:`run_tree_shared`, which makes large N cheap (N = ``SHARED_TREE_ROWS``; the N = 1e6 and
    1e7 runs use it)."""
    P, Q = lm
    run, n, seed, completion_seed = (run_tree, TREE_ROWS, 2027, 8) if path == "per_row" else (run_tree_shared, SHARED_TREE_ROWS, 2028, 9)
    emitted, tau = run(rule, n, P, Q, seed=seed)
    assert 0 < float((tau == GAMMA).double().mean()) < 1
    res = statistics(emitted, P, seed=completion_seed)
    print(report(f"tree {rule} ({path})", n, res))
    for name, (stat, thresh, _, _) in res.items():
        assert stat < thresh, f"tree {rule} ({path}), {name}: chi2 = {stat:.1f} >= {thresh:.1f}"


def _resample_from_p(p, q, tau, w_tau):
    """Bug: the correction is drawn from the target row itself, not from the residual."""
    return chain._rows(p, tau)


def _reused_uniform(orig, slot):
    """Bug: the residual / bonus draw reuses an accept coin (``coins[:, slot]``) as its uniform."""

    def draw(p, drafts, generator):
        coins, _ = orig(p, drafts, generator)
        return coins, coins[:, slot].double()

    return draw


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("rule", sorted(CHAIN_RULES))
def test_negative_controls_are_caught(rule, control, lm, monkeypatch):
    P, Q = lm
    if control == "resample_from_p":
        monkeypatch.setattr(chain, "_emission_weights", _resample_from_p)
    else:
        # the coin that decides a stop at position 0: token's first coin, block's last one
        slot = 0 if rule == "token" else GAMMA - 1
        monkeypatch.setattr(chain, "_draw_uniforms", _reused_uniform(chain._draw_uniforms, slot))
    emitted, _ = run_chain(CHAIN_RULES[rule], CONTROL_ROWS, P, Q, seed=2026)
    res = statistics(emitted, P, seed=7)
    print(report(f"control {rule} {control}", CONTROL_ROWS, res))
    assert any(stat >= thresh for stat, thresh, _, _ in res.values()), report(f"{rule} {control}", CONTROL_ROWS, res)


def _main() -> None:
    """The long runs recorded in ``docs/gpu_chains.rst``: ``python -m tests.gpu.test_chain_lossless
    RULE ROWS [ROUNDS]`` runs ``ROUNDS`` independent rounds (seeds 2026 + i, completion seeds 7 + i)
    of ``ROWS`` rows of the chain rule ``RULE`` (``token``, ``block``) or of the tree rule ``RULE``
    (``kseq``, ``rrs``, ``rrs_wor``; through :func:`run_tree_shared`) and prints both statistics of
    the pooled sample after every round, as JSON lines (rows, statistics, seconds)."""
    import json
    import sys
    import time

    rule, rows = sys.argv[1], int(sys.argv[2])
    if rule not in CHAIN_RULES and rule not in TREE_RULES:
        raise SystemExit(f"RULE must be one of {sorted(CHAIN_RULES) + list(TREE_RULES)} (got {rule!r})")
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    torch.set_num_threads(1)
    mallopt = _mallopt()
    if mallopt is not None:  # as the keep_freed_memory fixture
        mallopt(M_MMAP_THRESHOLD, 32 << 20)
        mallopt(M_TRIM_THRESHOLD, 1 << 30)
    P, Q = lm.__wrapped__()
    t0 = time.perf_counter()
    em, ys = [], []
    for i in range(rounds):
        if rule in CHAIN_RULES:
            emitted, _ = run_chain(CHAIN_RULES[rule], rows, P, Q, seed=2026 + i)
        else:
            emitted, _ = run_tree_shared(rule, rows, P, Q, seed=2026 + i)
        em.append(emitted)
        ys.append(complete(emitted, P, 7 + i))
        res = statistics(torch.cat(em), P, None, torch.cat(ys))
        line = {"rule": rule, "rows": rows * (i + 1), "seconds": round(time.perf_counter() - t0, 1), "alpha": ALPHA}
        line.update({k: {"chi2": s, "df": d, "threshold": t, "p": pv} for k, (s, t, d, pv) in res.items()})
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    _main()

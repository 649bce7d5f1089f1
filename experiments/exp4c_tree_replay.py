"""Experiment 4c: the decoder's tree samplers replayed many times on real drafted trees.

Experiment 3 finds the realized tau per round of K-SEQ trees (k = 4) below its exact
E[tau | drafted tree] at both draft lengths (not significant after Holm). This script isolates the
part of the decoder that draws tau on a tree. For real SmolLM2 contexts (target continuations
sampled at T, as in experiment 4b) it runs **one decoder round** with the decoder's own parts: the
scorer's caches (``otspec_gpu.scoring.DecodeCaches``: prefill, the draft's processed rows, one
target forward over the k drafted sequences) and the drafter (``otspec_gpu.drafting.ModelDrafter`` in
tree mode, with the draft law ``otspec_gpu.decoding.mode_for`` gives the rule), so the rows are
the decoder's float64 processed rows of its float32 logits. On each drafted tree it

* records what the decoder records, the exact E[tau | tree] of ``otspec_gpu.theory.round_theory``
  (numpy walk over the per-node accept schedules);
* computes the exact law of tau on the tree with the torch walk (``tree.conditional``), whose mean
  must equal the recorded expectation and whose variance scales the test below;
* calls the decoder's sampler ``otspec_gpu.verifiers.tree.sample(P, Q, X, rule=...)`` (what
  ``otspec_gpu.verifying.VerifierStep`` calls) ``--draws`` times, on batches of ``--batch``
  *different* trees per call, as the decoder's batched rounds are.

Per rule and draft length L, with draws independent given the trees,

    z = sum_trees (sum of draws of tau - draws * E[tau | tree]) / sqrt(sum_trees draws * Var[tau | tree])

is N(0, 1) for a correct sampler; a bias of b tokens per round shows as z ~ b sqrt(N) / sd(tau).
A Pearson chi-square of the pooled tau histogram against the pooled exact law (bins of expected
count < 5 merged) checks the law of tau, not only its mean (conservative: a sum of multinomials
with different probabilities has less variance than one multinomial). Each row's mean realized -
exact tau gets a 95% cluster-bootstrap interval over prompts (:mod:`otspec.stats`).

Negative control (must be detected): the RRS sampler's draws on the same i.i.d. trees scored
against K-SEQ's exact law, i.e. a decoder that ran the wrong node rule. Its expected z is reported
beside the observed one.

K-SEQ and RRS are replayed on the same i.i.d. trees (the decoder records both rules' expectations
on every i.i.d. tree); RRS without replacement on its own trees (first tokens without replacement).

    python experiments/exp4c_tree_replay.py            # SmolLM2 / int8, k = 4, L = 4 and 8
    python experiments/exp4c_tree_replay.py --quick    # tiny random models (V = 6), CI
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend and one math thread before torch is imported
import _real
import matplotlib.pyplot as plt
import numpy as np

from otspec.stats import clustered_mean

NAME = "exp4c_tree_replay"
RULES = ("kseq", "rrs", "rrs_wor")
#: the negative control: draws of this rule's sampler scored against that rule's exact law
CONTROL = ("rrs", "kseq")
#: |z| above this flags a biased sampler (two-sided false-alarm rate 0.27% per row)
Z_ALARM = 3.0
#: a tau-law chi-square p-value below this flags a wrong law of tau (the same false-alarm rate)
P_ALARM = 0.0027


def draft_trees(target, draft, contexts: list, k: int, gamma: int, law: str, temperature: float, gen):
    """One decoder round per context: ``(P [n, k, gamma+1, V], Q [n, k, gamma, V], X [n, k, gamma])``.

    Each context gets the decoder's own scorer caches and drafter (prefill, k drafted sequences
    from the draft law ``law``, one target forward over them), float64 processed rows as
    :func:`otspec_gpu.decode` builds them (temperature only, no top-k / top-p). ``gen`` is the
    drafting stream (one for the whole run).
    """
    import torch

    from otspec_gpu.drafting import ModelDrafter
    from otspec_gpu.processing import probs_from_logits
    from otspec_gpu.scoring import DecodeCaches

    def transform(logits):  # the decoder's transform (otspec_gpu.decoding.decode)
        return probs_from_logits(logits, temperature=temperature, top_k=None, top_p=None, dtype=torch.float64)

    device = next(target.model.parameters()).device
    Ps, Qs, Xs = [], [], []
    for ids in contexts:
        caches = DecodeCaches(target, draft, [list(ids)], k, transform, device)
        X, Q, n_drafts = ModelDrafter("tree", 1, k, gamma, law).draft(caches.next_q, caches.pend, caches.pend_valid, gen)
        if int(n_drafts[0]) != k:  # a short draft support (not at T > 0 without top-k / top-p)
            raise RuntimeError(f"a context has {int(n_drafts[0])} < k = {k} real drafts; this replay needs full trees")
        P = caches.score(X)  # [k, gamma + 1, V]
        Ps.append(P.view(k, gamma + 1, -1))
        Qs.append(Q.view(k, gamma, -1))
        Xs.append(X.view(k, gamma))
    return torch.stack(Ps), torch.stack(Qs), torch.stack(Xs)


def exact_laws(P, Q, X, rules: tuple[str, ...]) -> dict:
    """Per rule: ``recorded`` (the decoder's E[tau | tree], [n]), ``law`` (the exact law of tau from
    the torch walk, [n, gamma + 1]), its ``mean`` and ``var``."""
    from otspec_gpu import theory
    from otspec_gpu.decoding import mode_for
    from otspec_gpu.verifiers import tree

    n, k, g = X.shape
    t = np.arange(g + 1)
    out = {}
    for rule in rules:
        mode = mode_for(rule, k, g)
        rec = np.array([theory.round_theory(mode, P[i], Q[i], X[i], [0])["expected"][0] for i in range(n)])
        # validate=True: the decoder's sample call validates the same inputs (_check) before drawing
        law = tree.conditional(P, Q, X, rule=rule).sum(dim=(1, 3)).numpy()  # [n, gamma + 1]
        mean = law @ t
        out[rule] = {"recorded": rec, "law": law, "mean": mean, "var": law @ t**2 - mean**2}
    return out


def replay(P, Q, X, rule: str, draws: int, batch: int, reps: int, gen) -> np.ndarray:
    """Counts ``[n, gamma + 1]`` of tau over ``draws`` draws of the decoder's tree sampler per tree.

    Each call takes ``batch`` different trees, each repeated ``reps`` times (rows interleaved: tree
    1, 2, ..., then again), so a call draws ``reps`` times per tree; ``draws / reps`` calls per block
    of trees. ``validate=False``: the inputs are checked once in :func:`exact_laws`.
    """
    from otspec_gpu.verifiers import tree

    n, _, g = X.shape
    counts = np.zeros((n, g + 1), dtype=np.int64)
    for s in range(0, n, batch):
        members = np.tile(np.arange(s, min(n, s + batch)), reps)  # tree of each row of the batch
        Pb, Qb, Xb = (P[members], Q[members], X[members]) if reps > 1 else (P[s : s + batch], Q[s : s + batch], X[s : s + batch])
        for _ in range(draws // reps):
            out = tree.sample(Pb, Qb, Xb, rule=rule, generator=gen, validate=False)
            np.add.at(counts, (members, out.accepted.numpy()), 1)
    return counts


def pearson_pooled(counts: np.ndarray, law: np.ndarray, draws: int) -> dict:
    """Pearson chi-square of the pooled tau histogram against ``draws * sum_trees law``; bins with an
    expected count below 5 merged into their neighbour (from the top). Returns chi2, dof, p-value."""
    from scipy.stats import chi2

    obs, exp = counts.sum(0).astype(float), draws * law.sum(0)
    o, e = [], []
    acc_o = acc_e = 0.0
    for a, b in zip(obs[::-1], exp[::-1], strict=True):
        acc_o, acc_e = acc_o + a, acc_e + b
        if acc_e >= 5:
            o.append(acc_o)
            e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and e:
        o[-1] += acc_o
        e[-1] += acc_e
    o, e = np.array(o), np.array(e)
    stat = float(((o - e) ** 2 / e).sum()) if e.size > 1 else 0.0
    dof = max(int(e.size) - 1, 0)
    return {"chi2": stat, "dof": dof, "pvalue": float(chi2.sf(stat, dof)) if dof else 1.0}


def row(rule: str, theory_rule: str, gamma: int, k: int, counts: np.ndarray, ex: dict, draws: int, prompts: list, seed: int) -> dict:
    """One table row: the draws of ``rule``'s sampler against ``theory_rule``'s exact law."""
    t = np.arange(gamma + 1)
    sums = counts @ t
    e, var = ex["mean"], ex["var"]
    per_tree = sums / draws - e
    s_var = float(draws * var.sum())
    n = draws * counts.shape[0]
    iv = clustered_mean(per_tree, prompts, seed=seed)  # equal draws per tree: the same mean
    return {
        "gamma": gamma,
        "k": k,
        "rule": rule,
        "theory": theory_rule,
        "trees": int(counts.shape[0]),
        "draws": n,
        "mean_exact": float(e.mean()),
        "mean_realized": float(sums.sum() / n),
        "bias": float((sums.sum() - draws * e.sum()) / n),
        "bias_se": float(np.sqrt(s_var)) / n,
        "z": float((sums.sum() - draws * e.sum()) / np.sqrt(s_var)) if s_var > 0 else float("nan"),
        "trees_below": int(np.sum(per_tree < 0)),
        "bias_clustered": iv.as_dict(),
        "tau_law": pearson_pooled(counts, ex["law"], draws),
        "recorded_vs_torch_max_abs": float(np.max(np.abs(ex["recorded"] - e))),
        "trees_detail": {"prompt": list(prompts), "exact": _output.rounded(e), "realized_minus_exact": _output.rounded(per_tree)},
    }


def arguments(ap) -> None:
    ap.add_argument("--draft", default="int8")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prompts", type=int, default=16, help="a domain-stratified subset of the own prompts (default 16)")
    ap.add_argument("--positions", type=int, default=4, help="contexts (one tree each) per prompt and draft length")
    ap.add_argument("--k", type=int, default=4, help="drafted sequences per tree (default 4, experiment 3's cell)")
    ap.add_argument("--gammas", default="4,8", help="draft lengths L (default 4,8)")
    ap.add_argument("--rules", default=",".join(RULES), help=f"tree rules (default {','.join(RULES)})")
    ap.add_argument("--draws", type=int, default=512, help="sampler calls per tree and rule")
    ap.add_argument("--batch", type=int, default=16, help="different trees per sampler call (default 16, as the decoder's batches)")
    ap.add_argument("--reps", type=int, default=1, help="copies of each tree per sampler call (divides --draws; default 1)")


def _design(args) -> tuple[tuple[str, ...], list[int], int, int, int, list]:
    """The rules, draft lengths, contexts per prompt, draws per tree, copies per call and prompts."""
    rules = tuple(r for r in args.rules.split(",") if r)
    if any(r not in RULES for r in rules):
        raise SystemExit(f"--rules: each of {rules} must be one of {RULES}")
    gammas = [3] if args.quick else [int(g) for g in args.gammas.split(",")]
    n_pos, draws, reps = (3, 4000, 100) if args.quick else (args.positions, args.draws, args.reps)
    if draws % reps:
        raise SystemExit(f"--reps ({reps}) must divide --draws ({draws})")
    chosen = _real.select_prompts("own")[::32] if args.quick else _real.select_prompts("own", args.prompts, seed=args.seed)
    return rules, gammas, n_pos, draws, reps, chosen


def run(args) -> dict:
    """Draft real trees, replay every rule's sampler on them, and score each against its exact law."""
    import torch

    rules, gammas, n_pos, draws, reps, chosen = _design(args)
    T, k = args.temperature, args.k
    t0 = time.perf_counter()
    target, draft = _real.load_pair(args.draft, quick=args.quick)
    ids = _real.prompt_token_ids(target, chosen, args.seed, quick=args.quick)
    seqs = _real.continuations_ids(target, ids, n_pos * 3, T, args.seed)
    contexts = [s[: n0 + 3 * j] for s, n0 in seqs for j in range(n_pos)]
    tree_prompt = [chosen[i].id for i in range(len(seqs)) for _ in range(n_pos)]
    g_draft = torch.Generator().manual_seed(args.seed + 11)  # drafting stream, the whole run
    g_verify = torch.Generator().manual_seed(args.seed + 7)  # the samplers' coins and residual draws, the whole run
    from otspec_gpu.decoding import mode_for

    results, controls = [], []
    for g in gammas:
        laws = {}  # draft law -> the rules replayed on its trees
        for r in rules:
            laws.setdefault(mode_for(r, k, g).draft_law, []).append(r)
        if "kseq" in rules and "iid" in laws and CONTROL[0] not in laws["iid"]:
            laws["iid"].append(CONTROL[0])  # the control's draws
        for law, on in laws.items():
            t1 = time.perf_counter()
            P, Q, X = draft_trees(target, draft, contexts, k, g, law, T, g_draft)
            t_draft = time.perf_counter() - t1
            ex = exact_laws(P, Q, X, tuple(on))
            for rule in on:
                t2 = time.perf_counter()
                counts = replay(P, Q, X, rule, draws, args.batch, reps, g_verify)
                t_rep = time.perf_counter() - t2
                if rule in rules:
                    results.append({**row(rule, rule, g, k, counts, ex[rule], draws, tree_prompt, args.seed), "seconds_replay": t_rep})
                    print(
                        f"[exp4c] L={g} {rule}: z = {results[-1]['z']:+.2f}, bias {results[-1]['bias']:+.4f}; "
                        f"draft {t_draft:.0f} s, replay {t_rep:.0f} s",
                        flush=True,
                    )
                if rule == CONTROL[0] and CONTROL[1] in ex:
                    c = row(rule, CONTROL[1], g, k, counts, ex[CONTROL[1]], draws, tree_prompt, args.seed)
                    shift = float((ex[CONTROL[0]]["mean"] - ex[CONTROL[1]]["mean"]).sum())  # exact E[tau] difference, summed
                    c["z_expected"] = float(draws * shift / np.sqrt(draws * ex[CONTROL[1]]["var"].sum()))
                    c["detected"] = bool(abs(c["z"]) > Z_ALARM or c["tau_law"]["pvalue"] < P_ALARM)
                    controls.append(c)
            del P, Q, X
    elapsed = time.perf_counter() - t0
    return _payload(args, target, draft, chosen, results, controls, elapsed)


def _payload(args, target, draft, chosen, results: list, controls: list, elapsed: float) -> dict:
    """The JSON payload: the rows and the combined statistics (experiments/claims_ledger.py reads them)."""
    z_all = float(np.sum([r["z"] for r in results]) / np.sqrt(len(results)))
    z_max = float(np.max(np.abs([r["z"] for r in results])))
    p_min = min(r["tau_law"]["pvalue"] for r in results)
    return {
        "target": target.name,
        "draft": draft.name,
        "temperature": args.temperature,
        "k": results[0]["k"],
        "prompts": [p.id for p in chosen],
        "results": results,
        "negative_controls": controls,
        "z_combined": z_all,
        "z_max_abs": z_max,
        "tau_law_pvalue_min": p_min,
        "seconds": elapsed,
        "png": NAME + ".png",
    }


def _figure(d: dict, draws: int, out: str) -> None:
    """Realized - exact tau per row, the negative controls in red."""
    results, controls = d["results"], d["negative_controls"]
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    for off, group, colour, lab in ((0, results, "C0", "sampler vs its own exact law"), (len(results), controls, "C3", "negative control")):
        if not group:
            continue
        x = np.arange(off, off + len(group))
        b = np.array([r["bias"] for r in group])
        lo = np.array([r["bias_clustered"]["low"] for r in group], float)
        hi = np.array([r["bias_clustered"]["high"] for r in group], float)
        ax.errorbar(x, b, yerr=np.nan_to_num(np.stack([b - lo, hi - b])), fmt="o", color=colour, capsize=4, label=lab)
    every = results + controls
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(every)), [f"{r['rule']}\nvs {r['theory']}\nL={r['gamma']}" for r in every], fontsize="small")
    ax.set_ylabel("realized - exact tau per round")
    ax.set_title(
        f"decoder tree samplers on {d['target']} / {d['draft']} trees (k = {results[0]['k']})\n{draws} draws per tree, 95% CI over prompts",
        fontsize="medium",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    _output.save_figure(fig, out, NAME)


def _cells(r: dict, label: str) -> list:
    law = r["tau_law"]
    return [
        r["gamma"],
        label,
        r["theory"],
        r["trees"],
        r["draws"],
        f"{r['mean_exact']:.4f}",
        f"{r['mean_realized']:.4f}",
        _output.ci(r["bias_clustered"], 4, signed=True),
        f"{r['z']:+.2f}",
        f"{law['chi2']:.1f} ({law['dof']}, {law['pvalue']:.2f})",
        f"{r['trees_below']} / {r['trees']}",
    ]


def report(d: dict, args) -> tuple[dict[str, str], list[str]]:
    """The table, the figure and the notes, from the payload."""
    _, _, n_pos, draws, reps, _ = _design(args)
    results, controls, prompts = d["results"], d["negative_controls"], d["prompts"]
    cols = ["L", "rule", "scored against", "trees", "draws", "mean exact E[tau]", "mean realized tau"]
    cols += ["realized - exact [95% CI, prompts]", "z", "tau-law chi2 (dof, p)", "trees below"]
    rows = [_cells(r, r["rule"]) for r in results] + [_cells(c, f"{c['rule']} (negative control)") for c in controls]
    _figure(d, draws, args.out)
    notes = [
        f"{len(prompts)} prompts ({', '.join(prompts)}) x {n_pos} contexts, one drafted tree per context, draft law and L "
        f"(one decoder round: DecodeCaches + ModelDrafter); {draws} draws per tree and rule, "
        f"from calls on up to {args.batch} different trees x {reps} cop{'y' if reps == 1 else 'ies'} each.",
        "z uses the exact variance of tau given the tree (the torch walk's law); |z| > 3 would flag a biased sampler "
        "(false-alarm rate ~0.3% per row). tau-law chi2: Pearson, pooled tau histogram vs the pooled exact law (conservative); "
        "p < 0.0027 would flag a wrong law of tau. The control counts as detected when either test flags it.",
        "[95% CI, prompts]: BCa cluster bootstrap over prompts (otspec.stats, 2000 resamples) of the per-tree mean realized - exact tau.",
        f"Combined over the {len(results)} rows (independent coin draws): z = {d['z_combined']:+.2f}. Largest gap between the decoder's recorded "
        f"E[tau | tree] (numpy) and the torch walk's: {max(r['recorded_vs_torch_max_abs'] for r in results):.1e}.",
        "Negative control: the RRS sampler's draws on the i.i.d. trees scored against K-SEQ's exact law (a wrong node rule); "
        + ", ".join(f"L = {c['gamma']}: expected z {c['z_expected']:+.1f}, observed {c['z']:+.1f}" for c in controls)
        + ".",
        f"Run time {d['seconds']:.0f} s.",
    ]
    return {"Decoder tree samplers replayed on real drafted trees": _output.markdown_table(cols, rows)}, notes


def main(argv: list[str] | None = None) -> dict:
    return _output.experiment(NAME, __doc__, argv, arguments=arguments, run=run, report=report)


if __name__ == "__main__":
    main()

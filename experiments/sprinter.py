"""SPRINTER on real models: threshold trade-off of a trained verifier, beside exact speculative decoding.

Pipeline (target SmolLM2-135M-Instruct fp32, draft its int8 twin, temperature 1):

1. **Data.** Prompts = topics x instructions (``otspec_gpu.sprinter.prompts``); topics are split
   into train / test, so a held-out prompt shares neither text nor topic with training. The draft
   samples continuations; one target forward labels every drafted position with
   1{q(x) <= p(x)} (and min(1, p/q)). Datasets are saved under ``--out``.
2. **Verifier.** Logistic regression on the cheap features and a head on the draft's hidden state,
   trained on the train prompts; held-out accuracy, false-accept rate on p < q tokens, calibration.
3. **Trade-off.** SPRINTER decoding of held-out prompts at several thresholds: target calls per
   token, the certified bound on the sequence's TV distance from the target (sum of the exact
   per-token contributions), and the target's mean log-likelihood of the generated text; beside
   exact speculative decoding (token verifier, gamma 4; TV 0) and the oracle pass rule 1{p >= q}.
   Every interval is a 95% cluster bootstrap over the decoded prompts (:mod:`otspec.stats`); the
   JSON records each prompt's tokens, target calls, certified bound and log-likelihood.

Target calls per token is a *latency* proxy (each call is one sequential target forward), not a
FLOPs proxy: an SD call scores gamma + 1 positions, a SPRINTER call the whole run it checks.

``--quick`` uses the tiny random models (V = 6) and tiny sizes: it checks the pipeline, not a result.
"""

from __future__ import annotations

import os
import time

import numpy as np
from _output import ci, clustered_between_runs, experiment, fmt, markdown_table, save_figure

from otspec.stats import clustered_mean, clustered_ratio

NAME = "sprinter"


def loglik_per_token(target, prompt_ids, tokens, temperature=1.0):
    """Target log-likelihood of ``tokens`` after ``prompt_ids`` (one cache-free forward), summed."""
    import torch

    from otspec_gpu.processing import probs_from_logits

    seq = list(prompt_ids) + list(tokens)
    lg = target.logits(torch.tensor([seq]))[0, len(prompt_ids) - 1 : len(seq) - 1]
    p = probs_from_logits(lg, temperature=temperature, dtype=torch.float64)
    return float(torch.log(p[torch.arange(len(tokens)), torch.tensor(tokens)].clamp_min(1e-300)).sum())


def rst_tables(payload: dict) -> str:
    """The experiment's two tables as reStructuredText (docs/sprinter.rst includes them)."""

    def table(header, rows):
        out = [".. list-table::", "   :header-rows: 1", ""]
        for row in [header, *rows]:
            out.append("   * - " + str(row[0]))
            out += [f"     - {c}" for c in row[1:]]
        return "\n".join(out) + "\n"

    meta = payload.get("meta", {})
    clf = [
        [
            k.split("@")[0],
            f"{float(k.split('@')[1]):.3f}",
            fmt(m["accuracy"], 3),
            fmt(m["majority_accuracy"], 3),
            fmt(m["false_accept_rate"], 3),
            fmt(m["true_pass_rate"], 3),
            fmt(m["auc"], 3),
            fmt(m["ece"], 3),
        ]
        for k, m in payload["classifier"].items()
    ]
    runs = [
        [
            r["method"],
            "-" if r["threshold"] is None else f"{r['threshold']:.3f}",
            ci(r["intervals"]["target_calls_per_token"], 3) if "intervals" in r else fmt(r["target_calls_per_token"], 3),
            ci(r["intervals"]["calls_vs_exact_sd"], 2) if "intervals" in r else "-",
            ci(r["intervals"]["certified_tv_mean"], 3) if "intervals" in r else fmt(r["certified_tv_mean"], 3),
            fmt(r["certified_tv_max"], 3),
            ci(r["intervals"]["loglik_per_token"], 3) if "intervals" in r else fmt(r["loglik_per_token"], 3),
        ]
        for r in payload["runs"]
    ]
    head = (
        f"Target ``{payload['target']}``, draft ``{payload['draft']}``, temperature 1, cap 20; {payload['n_train']} training "
        f"positions, {payload['n_test']} held-out positions (held-out topics: {', '.join(payload['test_topics']) or '-'}). "
        f"Command ``{meta.get('command', '')}`` at revision ``{payload.get('git_revision_at_start', '')}``.\n\n"
    )
    return (
        head
        + "Verifier on held-out prompts (false accept = share of positions with :math:`p < q` that pass):\n\n"
        + table(["model", "threshold", "accuracy", "majority", "false accept", "true pass", "AUC", "ECE"], clf)
        + "\nThreshold trade-off on other held-out prompts (certified TV = per-sequence sum of the exact per-token terms; "
        + "[low, high]: 95% cluster-bootstrap interval over the decoded prompts):\n\n"
        + table(
            [
                "method",
                "threshold",
                "target calls / token",
                "calls / token vs exact SD",
                "certified TV (mean)",
                "certified TV (max)",
                "log-lik / token",
            ],
            runs,
        )
    )


def arguments(ap) -> None:
    ap.add_argument("--tokens", type=int, default=32, help="tokens generated per decoded prompt (default 32)")
    ap.add_argument("--data-tokens", type=int, default=32, help="drafted positions per data prompt (default 32)")
    ap.add_argument("--train-topics", type=int, default=12, help="training topics (3 prompts each; default 12)")
    ap.add_argument("--decode-prompts", type=int, default=3, help="held-out prompts decoded per method (default 3)")
    ap.add_argument(
        "--pass-rates",
        default="0.9,0.7,0.5,0.3",
        help="thresholds are set so that these shares of held-out positions pass (default 0.9,0.7,0.5,0.3)",
    )


def _setup(args) -> dict:
    """Models, prompts (train / classifier test / decoded) and sizes; tiny random models with ``--quick``."""
    from otspec_gpu import models
    from otspec_gpu.sprinter import prompts

    pass_rates = [float(t) for t in args.pass_rates.split(",")]
    if args.quick:
        target = models.tiny(seed=0, hidden_size=16)
        draft = models.self_draft(target, 1.6)
        rng = np.random.default_rng(args.seed)
        train_prompts = [rng.integers(0, 6, size=4).tolist() for _ in range(24)]
        test_prompts = [rng.integers(0, 6, size=4).tolist() for _ in range(8)]
        return dict(target=target, draft=draft, train=train_prompts, test=test_prompts, decode=test_prompts[:2], n_data=16, n_tok=8, steps=60,
                    pass_rates=pass_rates[1::2], train_topics=(), test_topics=())  # fmt: skip
    target, draft = models.load("smollm2"), models.load("smollm2-int8")
    train_topics, test_topics = prompts.split_topics(6, seed=args.seed)
    train_topics = train_topics[: args.train_topics]

    def chat(text):  # the instruct model's chat format (raw text makes it stop after a few tokens)
        return target.encode(
            target.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        )

    test_all = [chat(p) for p in prompts.prompts_for(test_topics)]  # 18 prompts
    return dict(target=target, draft=draft, train=[chat(p) for p in prompts.prompts_for(train_topics)], test=test_all[::2],
                decode=test_all[1::2][: args.decode_prompts], n_data=args.data_tokens, n_tok=args.tokens, steps=400,
                pass_rates=pass_rates, train_topics=train_topics, test_topics=test_topics)  # fmt: skip


def _verifiers(args, ds_train, ds_test, steps: int, pass_rates: list[float], meta: dict) -> dict:
    """Both classifiers trained, the better one on held-out prompts, its thresholds and metrics."""
    import torch

    from otspec_gpu.sprinter import classifier

    t0 = time.perf_counter()
    # the head is regularised hard: on ~1k positions a 576-d input overfits (train AUC 1, held-out at chance) otherwise
    trained = {
        "logreg": classifier.train(ds_train, kind="logreg", seed=args.seed, steps=steps),
        "head": classifier.train(ds_train, kind="head", units=8, weight_decay=0.1, lr=3e-3, steps=steps // 2, seed=args.seed),
    }
    t_train = time.perf_counter() - t0
    auc = {k: classifier.metrics(m, ds_test)["auc"] for k, m in trained.items()}
    best = max(auc, key=lambda k: auc[k])  # chosen on the classifier's held-out prompts, disjoint from the decoded ones
    with torch.no_grad():
        s_test = torch.sigmoid(trained[best].score_rows(ds_test.hidden, ds_test.entropy, ds_test.position, ds_test.q_x))
    thresholds = [float(torch.quantile(s_test, 1 - r)) for r in pass_rates]
    clf_list = [(kind, th, classifier.metrics(m, ds_test, th)) for kind, m in trained.items() for th in thresholds]
    clf_json = {f"{kind}@{th:g}": mt for kind, th, mt in clf_list}
    chosen = classifier.ClassifierVerifier(trained[best], thresholds[len(thresholds) // 2], meta=meta)
    weights = classifier.save_verifier(chosen, os.path.join(args.out, "verifier.safetensors"))
    return dict(
        t_train=t_train, auc=auc, best=best, thresholds=thresholds, classifier=clf_json, clf_list=clf_list, chosen=chosen, weights=weights
    )


def _run_record(name, kind, threshold, tokens, calls, cert, wall, pids, target, seed: int) -> dict:
    """One decoding method's row: totals, per-prompt values and their cluster intervals."""
    n_i = [len(t) for t in tokens]
    ll_i = [loglik_per_token(target, pid, t) for pid, t in zip(pids, tokens, strict=False)]
    n, g = sum(n_i), np.arange(len(pids))  # one cluster per decoded prompt
    return {
        "method": name,
        "kind": kind,
        "threshold": threshold,
        "tokens": n,
        "target_calls": int(sum(calls)),
        "target_calls_per_token": sum(calls) / n,
        "certified_tv_mean": float(np.mean(cert)),
        "certified_tv_max": float(np.max(cert)),
        "loglik_per_token": sum(ll_i) / n,
        "wall_s": wall,
        "per_prompt": {"prompt": g.tolist(), "tokens": n_i, "target_calls": [int(c) for c in calls], "certified_tv": cert, "loglik": ll_i},
        "intervals": {
            "target_calls_per_token": clustered_ratio(calls, n_i, g, seed=seed).as_dict(),
            "certified_tv_mean": clustered_mean(cert, g, seed=seed).as_dict(),
            "loglik_per_token": clustered_ratio(ll_i, n_i, g, seed=seed).as_dict(),
        },
    }


def _tradeoff(args, su: dict, ver: dict) -> list[dict]:
    """SPRINTER at every threshold, the oracle and pass-all rules, and exact SD, on the decoded prompts."""
    from otspec_gpu.decoding import decode as sd_decode
    from otspec_gpu.sprinter import ConstantPass, OraclePass, decode

    target, draft, n_tok, seed = su["target"], su["draft"], su["n_tok"], args.seed
    pids = [list(p) for p in su["decode"]]
    rules = [(f"sprinter-{ver['best']}", ver["best"], th, ver["chosen"].with_threshold(th)) for th in ver["thresholds"]]
    rules += [("oracle 1{p>=q}", "oracle", None, OraclePass()), ("pass all (c=1)", "constant", 1.0, ConstantPass(1.0))]
    runs = []
    for name, kind, th, rule in rules:
        toks, calls, cert, t0 = [], [], [], time.perf_counter()
        for i, pid in enumerate(pids):
            r = decode(target, draft, [pid], verifier=rule, max_new_tokens=n_tok, seed=seed + i, stop_at_eos=False)
            toks.append(r.tokens[0])
            calls.append(r.target_calls[0])
            cert.append(float(r.certified_tv[0]))
        runs.append(_run_record(name, kind, th, toks, calls, cert, time.perf_counter() - t0, pids, target, seed))
    toks, calls, t0 = [], [], time.perf_counter()
    for i, pid in enumerate(pids):
        r = sd_decode(target, draft, pid, verifier="token", gamma=4, max_new_tokens=n_tok, seed=seed + i, theory=False, stop_at_eos=False)
        toks.append(r.tokens[0])
        calls.append(r.config["target_calls"])
    runs.append(
        _run_record(
            "exact SD (token, gamma 4)", "exact", None, toks, calls, [0.0] * len(pids), time.perf_counter() - t0, pids, target, seed
        )
    )
    sd_rate = np.array(runs[-1]["per_prompt"]["target_calls"]) / np.array(runs[-1]["per_prompt"]["tokens"])
    for r in runs[:-1]:  # each method's calls per token relative to exact SD's, paired by prompt (the same prompts)
        pp = r["per_prompt"]
        rate = np.array(pp["target_calls"]) / np.array(pp["tokens"])
        r["intervals"]["calls_vs_exact_sd"] = clustered_between_runs(rate, pp["prompt"], sd_rate, pp["prompt"], seed=seed)
    runs[-1]["intervals"]["calls_vs_exact_sd"] = {"value": 1.0, "low": 1.0, "high": 1.0, "n_clusters": len(pids)}
    return runs


def run(args) -> dict:
    """Data, verifiers, trade-off; ``_ctx`` holds what the notes need beyond the payload."""
    import torch

    from otspec_gpu.sprinter import data

    torch.manual_seed(args.seed)  # no global randomness is used; set for third-party code paths
    t_start = time.perf_counter()
    su = _setup(args)
    target, draft = su["target"], su["draft"]
    # ---- 1. data ---------------------------------------------------------------------------------
    t0 = time.perf_counter()
    ds_train = data.collect(target, draft, su["train"], max_new_tokens=su["n_data"], seed=args.seed, batch=8)
    ids = list(range(1000, 1000 + len(su["test"])))
    ds_test = data.collect(target, draft, su["test"], max_new_tokens=su["n_data"], seed=args.seed + 1, batch=8, prompt_ids=ids)
    t_data = time.perf_counter() - t0
    data.save(ds_train, os.path.join(args.out, "train.safetensors"))
    data.save(ds_test, os.path.join(args.out, "test.safetensors"))
    # ---- 2. verifiers, 3. trade-off ------------------------------------------------------------------
    ver = _verifiers(args, ds_train, ds_test, su["steps"], su["pass_rates"], {"target": target.name, "draft": draft.name})
    runs = _tradeoff(args, su, ver)
    return {
        "target": target.name,
        "draft": draft.name,
        "train_topics": list(su["train_topics"]),
        "test_topics": list(su["test_topics"]),
        "n_train": len(ds_train),
        "n_test": len(ds_test),
        "data_s": t_data,
        "train_s": ver["t_train"],
        "classifier": ver["classifier"],
        "runs": runs,
        "total_s": time.perf_counter() - t_start,
        "_ctx": {**su, **ver},
    }


def _figure(d: dict, n_tok: int, n_prompts: int, out: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in d["runs"]:
        mk = {"head": "o", "logreg": "s", "oracle": "D", "constant": "x", "exact": "*"}[r["kind"]]
        lab = r["method"] + (f" @{r['threshold']:.3g}" if r["kind"] in ("head", "logreg") else "")
        ax[0].scatter(r["target_calls_per_token"], r["certified_tv_mean"], marker=mk, s=70 if mk == "*" else 40, label=lab)
        ax[1].scatter(r["target_calls_per_token"], r["loglik_per_token"], marker=mk, s=70 if mk == "*" else 40, label=lab)
    ax[0].set_xlabel("target calls per generated token")
    ax[0].set_ylabel("certified TV bound per sequence (mean)")
    ax[1].set_xlabel("target calls per generated token")
    ax[1].set_ylabel("target log-likelihood per token")
    ax[0].legend(fontsize=7)
    fig.suptitle(f"SPRINTER threshold trade-off: {d['target']} <- {d['draft']}, {n_tok} tokens x {n_prompts} held-out prompts")
    fig.tight_layout()
    save_figure(fig, out, NAME)


def _tables(d: dict) -> dict[str, str]:
    metrics = ("accuracy", "majority_accuracy", "false_accept_rate", "true_pass_rate", "auc", "ece", "brier")
    clf_rows = [[kind, f"{th:g}", *(fmt(mt[m], 3) for m in metrics)] for kind, th, mt in d["_ctx"]["clf_list"]]
    run_rows = [
        [
            r["method"],
            "-" if r["threshold"] is None else f"{r['threshold']:.3g}",
            r["tokens"],
            ci(r["intervals"]["target_calls_per_token"], 3),
            fmt(1 / r["target_calls_per_token"], 2),
            ci(r["intervals"]["calls_vs_exact_sd"], 2),
            ci(r["intervals"]["certified_tv_mean"], 3),
            fmt(r["certified_tv_max"], 3),
            ci(r["intervals"]["loglik_per_token"], 3),
            fmt(r["wall_s"], 1),
        ]
        for r in d["runs"]
    ]
    run_head = ["method", "threshold", "tokens", "target calls / token", "tokens / call", "calls / token vs exact SD"]
    run_head += ["certified TV (mean)", "certified TV (max)", "log-lik / token", "wall s"]
    return {
        "Verifier on held-out prompts (label 1{q <= p}; false accept = passed among p < q)": markdown_table(
            ["model", "threshold", "accuracy", "majority", "false accept", "true pass", "AUC", "ECE", "Brier"], clf_rows
        ),
        "Threshold trade-off on held-out prompts": markdown_table(run_head, run_rows),
    }


def report(d: dict, args) -> tuple[dict[str, str], list[str]]:
    """The figure, the two tables and the notes, from the payload (and the run's context)."""
    c = d["_ctx"]
    n_tok, n_pids, auc = c["n_tok"], len(c["decode"]), c["auc"]
    _figure(d, n_tok, n_pids, args.out)
    sd = d["runs"][-1]
    notes = [
        (
            f"target {d['target']}, draft {d['draft']}, temperature 1, cap 20; {len(c['train'])} train prompts ({d['n_train']} drafted positions), "
            f"{len(c['test'])} held-out prompts for the classifier metrics ({d['n_test']} positions), {n_pids} other held-out prompts decoded "
            f"({n_tok} tokens each); train / test topics disjoint: {list(c['test_topics'])} held out."
        ),
        f"data collection {d['data_s']:.0f} s, training both classifiers {d['train_s']:.1f} s on this CPU; verifier weights: {c['weights']}.",
        (
            f"held-out AUC: logreg {auc['logreg']:.3f}, head {auc['head']:.3f}; the sweep uses {c['best']}, with thresholds at the held-out score "
            f"quantiles that pass {', '.join(f'{r:g}' for r in c['pass_rates'])} of the positions ({', '.join(f'{t:.3f}' for t in c['thresholds'])})."
        ),
        (
            "certified TV bound: per sequence, the sum over emitted tokens of sum_x a(x)(q(x)-p(x))_+ from the round's real p and q; its mean "
            "over sequences estimates E[sum], which bounds the TV distance between the law of the generated sequence and the target's (docs/sprinter.rst). "
            "With few prompts the mean is a noisy estimate; the per-token terms are exact."
        ),
        (
            f"exact SD makes {fmt(sd['target_calls_per_token'], 3)} target calls per token. Target calls per token is a latency proxy "
            "(one sequential target forward per call), not a FLOPs proxy: an SD call scores gamma + 1 positions, a SPRINTER call the whole "
            "run it checks, so the ratio to SD counts sequential target forwards, not target compute."
        ),
        (
            "Comparable with the paper (1.7x latency, 8.3x fewer FLOPs than SD, GPT-2 small -> XL on Wiki-Summaries): only the direction and the "
            "mechanism (fewer sequential target calls per token). Not comparable: the models (a 135M target and its int8 twin, cost "
            "ratio about 0.64, vs a 12x smaller draft), the data, the sampling (temperature 1 here, greedy top-k = 1 in the released script), the "
            "quality measure (target log-likelihood here, ROUGE / LLM judge there), and latency: on this 2-core CPU in pure PyTorch no draft is "
            "cheap enough for a wall-clock speedup, so no latency claim is made (wall-clock is shown as information only)."
        ),
        "Log-likelihood per token is a noisy measure over a few hundred tokens; exact SD samples the target's law, so its value is the reference.",
        "[low, high]: 95% BCa cluster bootstrap over the decoded prompts (otspec.stats, 2000 resamples; each prompt is one cluster, "
        "the same prompts and seeds for every method); 'vs exact SD' is the ratio of calls per token, paired by prompt.",
    ]
    return _tables(d), notes


def write_rst(args) -> None:
    """``sprinter_results.rst`` (docs/sprinter.rst includes it) from the written JSON."""
    import json

    with open(os.path.join(args.out, f"{NAME}.json")) as f:
        full = json.load(f)
    with open(os.path.join(args.out, f"{NAME}_results.rst"), "w") as f:
        f.write(rst_tables(full))


def main(argv=None):
    return experiment(NAME, __doc__, argv, arguments=arguments, run=run, report=report, after_write=write_rst)


if __name__ == "__main__":
    main()

# %% [markdown]
# # Bounds and plots for your own target and draft
#
# A notebook-style script (``# %%`` cells: open it in Jupyter with jupytext, in VS Code, or run it
# with ``python examples/tutorial_bounds_and_plots.py``). It needs the ``plots`` extra
# (``pip install "otspec[plots]"``). Replace ``p`` and ``q`` with your model's next-token
# distributions (float64, summing to 1, same vocabulary, after the temperature / top-k / top-p
# you sample with).

# %%
import matplotlib

matplotlib.use("Agg")  # headless; drop this line in a notebook to see the figures inline
import matplotlib.pyplot as plt
import numpy as np

import otspec
from otspec import plot
from otspec import verifiers as vs
from otspec.report import compare

# %% [markdown]
# ## 1. A target and a draft
#
# Here: a seeded pair over 50 tokens. A drafter that agrees with the target up to noise. With your
# own models use ``p = softmax(target_logits / T)`` and ``q = softmax(draft_logits / T)`` in float64.

# %%
rng = np.random.default_rng(0)
logits = -1.2 * np.log(np.arange(1, 51)) + rng.normal(0, 1, 50)
p = otspec.synthetic.softmax(logits)
q = otspec.synthetic.softmax(logits + rng.normal(0, 0.8, 50))
tv = 0.5 * np.abs(p - q).sum()
print(f"TV(p, q) = {tv:.4f}; a single draft is accepted with probability 1 - TV = {1 - tv:.4f}")

# %% [markdown]
# ## 2. The optimal acceptance for k drafts, three ways of drafting
#
# ``optimal_acceptance`` returns the exact optimum with its certificate (the cut H of the dual).

# %%
ks = [1, 2, 3, 4, 6, 8]
laws = {"i.i.d.": otspec.iid, "w/o repl.": otspec.without_replacement, "greedy": otspec.greedy}
optimum = {name: [otspec.optimal_acceptance(p, law(q, k)).value for k in ks] for name, law in laws.items()}
for name, vals in optimum.items():
    print(f"{name:10s}", " ".join(f"{v:.4f}" for v in vals))

# %% [markdown]
# ## 3. What the verifiers achieve
#
# ``otspec.report.compare`` lists every verifier that applies to a draft law, with its exact
# acceptance (closed form or kernel) and the gap to the optimum.

# %%
for row in compare(p, otspec.iid(q, 4)):
    print(f"{row.name:14s} {row.acceptance:.4f}  shortfall {row.shortfall:.4f}  ({row.how})")

kseq = [vs.kseq.acceptance(p, otspec.iid(q, k)).value for k in ks]
rrs = [vs.rrs.acceptance(p, otspec.iid(q, k)).value for k in ks]
greedy = [vs.greedy_optimal.acceptance(p, otspec.greedy(q, k)).value for k in ks]

# %% [markdown]
# ## 4. Plot: acceptance against k, with the optimum and SpecTr's (1 - 1/e) line

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
plot.acceptance_vs_k(
    ks, {"K-SEQ": kseq, "RRS": rrs, "greedy verifier": greedy}, optimum=optimum, e_line="i.i.d.", ax=ax1, title="acceptance vs k"
)
gaps = {
    "K-SEQ": np.subtract(optimum["i.i.d."], kseq),
    "RRS": np.subtract(optimum["i.i.d."], rrs),
    "greedy verifier": np.subtract(optimum["greedy"], greedy),
}
plot.verifier_gaps(gaps, groups=[f"k={k}" for k in ks], ax=ax2, title="gap to the optimum of its draft law")

# %% [markdown]
# ## 5. Calibration: does a sampler accept as often as the theory says?
#
# Draw draft tuples, run the verifier's sampler, and compare each realized acceptance (0 or 1) with
# the exact conditional acceptance of that tuple, read off the verifier's exact kernel. A correct
# sampler's bin means lie on the diagonal within their intervals.

# %%
k = 3
law = otspec.iid(q, k)
kernel = vs.kseq.kernel(p, law)  # exact pi(y | drafts) for every draft tuple
index = {tuple(t): i for i, t in enumerate(kernel.tuples.tolist())}
cond = kernel.per_tuple_acceptance()

drafts = law.sample(rng, 4000)
y = vs.kseq.sample_batch(p, law, drafts, rng=rng)
expected = cond[[index[tuple(d)] for d in drafts.tolist()]]
realized = (drafts == y[:, None]).any(axis=1).astype(float)
ax = plot.calibration(expected, realized, label="K-SEQ sampler", n_bins=8, title="K-SEQ, k = 3")
summary = plot.calibration_bins(expected, realized, n_bins=8)
print(summary)

# %% [markdown]
# A classic bug samples the drafts from one distribution and verifies against another (e.g. a
# temperature applied to the draft logits but not to the q handed to the verifier). The rate then
# drifts from the promised acceptance (and the output is no longer distributed as p):

# %%
q_wrong = otspec.synthetic.softmax(np.log(q) / 1.6)
bad = otspec.iid(q_wrong, k).sample(rng, 4000)
realized_bad = (bad == vs.kseq.sample_batch(p, law, bad, rng=rng)[:, None]).any(axis=1).astype(float)
promised = vs.kseq.acceptance(p, law).value
for name, r in (("correct", realized), ("wrong q", realized_bad)):
    z = (r.mean() - promised) / np.sqrt(promised * (1 - promised) / r.size)
    print(f"{name:8s} realized {r.mean():.4f} vs promised {promised:.4f}  (z = {z:+.1f})")

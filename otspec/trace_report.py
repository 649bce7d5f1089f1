r"""Theory vs practice over a decoding run, recomputed from a :class:`~otspec.io.Trace` alone
(numpy only: a trace saved by :func:`otspec_gpu.decode` is summarised without torch).

For records :math:`r = 1..n` with realized accepted count :math:`\tau_r` and the exact expectation
:math:`e_r` of the same round (:mod:`otspec.theory`), :math:`E[\tau_r - e_r] = 0` when the
implementation is right, whatever the contexts were; the report gives the mean difference with a
99% normal confidence interval :math:`\bar d \pm z_{0.995}\, s_d / \sqrt{n}` and says whether it
contains 0. Single-step rounds accept or not, with probability :math:`e_r` given the past, so
their standard error is the exact :math:`\sqrt{\sum_r e_r (1 - e_r)} / n` instead of the sample
estimate (which is 0 when, say, every one of a few rounds accepted). Conditioning on the drafted path (chains, trees) or tuple (single-step) makes
:math:`e_r` integrate out only the accept coins, so the interval is narrow.

Efficiency: ``target_calls_per_token`` = records / generated tokens (each record is one target
forward for its prompt); ``mean_accepted_length`` = 1 + mean tau over records (vLLM's metric, bonus included; computed
from the verifier's tau, not from the emitted count, which the last round of a prompt clips at
``max_new_tokens``);
``tokens_per_s`` = generated tokens / (prefill + draft + target + verify + rollback time), the
theory computation excluded; ``verify_share`` = verify time / (draft + target + verify + rollback).
Trees decoded with ``tree_interval`` also report the means of the rounds' certified bounds on the
tree optimum (``tree_optimum_lower``, ``tree_optimum_upper``; :func:`otspec.tree_interval`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from otspec.io import Trace

__all__ = ["AGREE_ATOL", "Z99", "Agreement", "Report", "summarize"]

#: Two-sided 99% standard normal quantile.
Z99 = 2.5758293035489004
#: Slack on the interval ends: the exact expectations are float64 sums of ~V terms.
AGREE_ATOL = 1e-9


@dataclass(frozen=True)
class Agreement:
    """Realized mean vs exact expected mean over ``n`` records, with a 99% CI of the difference.

    Attributes
    ----------
    label : str
        What is compared (e.g. ``"accepted tokens | path"``).
    realized : float
        Mean realized value over the records.
    expected : float
        Mean exact expectation over the same records.
    diff : float
        ``realized - expected`` (0 in expectation for a correct implementation).
    ci_low, ci_high : float
        99% confidence interval of ``diff`` (NaN when ``n == 0``).
    n : int
        Number of records with a finite expectation.
    """

    label: str
    realized: float
    expected: float
    diff: float
    ci_low: float
    ci_high: float
    n: int

    @property
    def decided(self) -> bool:
        """False when the records cannot give a finite interval (no record, or one record whose
        variance is estimated from the sample): then there is no verdict, only "too few rounds"."""
        return self.n > 0 and math.isfinite(self.ci_low) and math.isfinite(self.ci_high)

    @property
    def verdict(self) -> str:
        """``"agree"``, ``"DISAGREE"`` or ``"too few rounds"`` (no finite interval)."""
        if not self.decided:
            return "too few rounds"
        return "agree" if self.agrees else "DISAGREE"

    @property
    def agrees(self) -> bool:
        """True when the 99% interval of the difference contains 0 (within :data:`AGREE_ATOL`)."""
        # AGREE_ATOL absorbs float64 rounding when every difference is 0 (a zero-width interval).
        return bool(self.ci_low - AGREE_ATOL <= 0.0 <= self.ci_high + AGREE_ATOL)


def _agreement(label: str, realized: np.ndarray, expected: np.ndarray, *, bernoulli: bool = False) -> Agreement:
    r"""``bernoulli``: the realized values are 0/1 with success probability ``expected`` given the
    past, so the variance of the mean difference is exactly :math:`\sum_r e_r (1 - e_r) / n^2`
    (a martingale sum); otherwise the sample variance of the differences is used."""
    ok = np.isfinite(expected)
    r, e = realized[ok].astype(np.float64), expected[ok]
    n = int(r.size)
    if n == 0:
        nan = math.nan
        return Agreement(label, nan, nan, nan, nan, nan, 0)
    d = r - e
    if bernoulli:  # e is a probability; clipped, as a sum of float64 terms may exceed 1 by an ulp
        ec = np.clip(e, 0.0, 1.0)
        se = math.sqrt(float(np.sum(ec * (1.0 - ec)))) / n
    else:
        se = float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    half = Z99 * se
    m = float(d.mean())
    return Agreement(label, float(r.mean()), float(e.mean()), m, m - half, m + half, n)


@dataclass(frozen=True)
class Report:
    """Summary of one run (see the module docstring); ``theory`` maps column -> mean over records.

    Attributes
    ----------
    config : dict
        The run's settings (:attr:`otspec_gpu.decoding.DecodeResult.config`).
    records : int
        Number of (round, prompt) records: target forwards per prompt.
    rounds : int
        Number of batched rounds.
    tokens : int
        Generated tokens over all prompts.
    target_calls_per_token : float
        ``records / tokens``.
    mean_accepted_length : float
        1 + mean :math:`\\tau` over records (bonus token included).
    tokens_per_s : float
        Generated tokens per second of decoding work (theory time excluded).
    verify_share : float
        Fraction of the round time spent in verification.
    time_s : dict
        Seconds per phase (``prefill``, ``draft``, ``target``, ``verify``, ``rollback``, ``theory``).
    agreement : tuple of Agreement
        Realized against exact expected acceptance (conditional on the drafts, and for
        single-step rounds also unconditional).
    theory : dict
        Mean of each exact ``exp_*`` column of the trace (other verifiers on the same paths).
    optimum : float
        Mean optimal acceptance over the records (NaN when not computed).
    optimum_how : str
        What ``optimum`` is.
    """

    config: dict
    records: int
    rounds: int
    tokens: int
    target_calls_per_token: float
    mean_accepted_length: float
    tokens_per_s: float
    verify_share: float
    time_s: dict
    agreement: tuple
    theory: dict = field(default_factory=dict)
    optimum: float = math.nan
    optimum_how: str = ""

    @property
    def mean_acceptance_length(self) -> float:
        """``mean_accepted_length`` under its name in the metric dictionary (:mod:`otspec.metrics`): 1 + mean tau."""
        return self.mean_accepted_length

    def to_dict(self) -> dict:
        """JSON-ready form (``otspec decode --json``).

        Returns
        -------
        dict
            Every field, each agreement with its ``agrees`` flag and its ``verdict`` (``"agree"``,
            ``"DISAGREE"`` or ``"too few rounds"``) added.
        """
        d = asdict(self)
        d["agreement"] = [dict(asdict(a), agrees=a.agrees, verdict=a.verdict) for a in self.agreement]
        return d

    def table(self) -> list[tuple[str, str]]:
        """(label, value) rows for printing.

        Returns
        -------
        list of tuple of str
            ``(quantity, formatted value)`` rows: the configuration, each agreement with its
            interval and verdict, theory means, the optimum and the efficiency figures.
        """
        rows = [
            (
                "verifier",
                f"{self.config.get('verifier')} ({self.config.get('mode')}, k={self.config.get('drafts')}, gamma={self.config.get('gamma')})",
            ),
            ("records / tokens", f"{self.records} / {self.tokens}"),
        ]
        for a in self.agreement:
            if a.decided:
                value = f"{a.realized:.4f} vs {a.expected:.4f}  diff {a.diff:+.4f} [99% CI {a.ci_low:+.4f}, {a.ci_high:+.4f}] {a.verdict}"
            else:
                value = f"{a.realized:.4f} vs {a.expected:.4f}  diff {a.diff:+.4f}; too few rounds for a verdict ({a.n} record(s))"
            rows.append((f"{a.label}: realized vs expected", value))
        for name, v in sorted(self.theory.items()):
            rows.append((f"mean {name}", f"{v:.4f}"))
        if not math.isnan(self.optimum):
            rows.append((f"optimum ({self.optimum_how})", f"{self.optimum:.4f}"))
        rows += [
            ("target calls / token", f"{self.target_calls_per_token:.4f}"),
            ("mean accepted length", f"{self.mean_accepted_length:.4f}"),
            ("tokens / s", f"{self.tokens_per_s:.2f}"),
            ("verification share of round", f"{100 * self.verify_share:.2f}%"),
        ]
        return rows

    def _repr_html_(self) -> str:
        """The :meth:`table` rows as an HTML table (Jupyter shows it in place of the ``repr``)."""
        from otspec._display import html_table

        return html_table(("quantity", "value"), self.table(), caption="decode report")


def summarize(trace: Trace) -> Report:
    """The :class:`Report` of a trace (in memory or reloaded with :func:`otspec.io.load_trace`).

    Parameters
    ----------
    trace : otspec.io.Trace
        The per-record columns and the run's config.

    Returns
    -------
    Report
        Efficiency figures and the theory-vs-practice agreement (module docstring).
    """
    c, cfg = trace.columns, trace.config
    tau = c["tau"].astype(np.float64)
    n = int(tau.size)
    tokens = int(c["n_emit"].sum())
    t = {p: float(c[f"round_t_{p}"].sum()) for p in ("draft", "target", "verify", "rollback", "theory")}
    t["prefill"] = float(cfg.get("prefill_s", 0.0))
    work = t["draft"] + t["target"] + t["verify"] + t["rollback"]
    mode = cfg.get("mode")
    agreement = []
    theory = {}
    optimum, how = math.nan, ""
    if "th_expected" in c:
        if mode == "single":
            agreement.append(_agreement("acceptance | drafts", tau, c["th_expected_cond"], bernoulli=True))
            agreement.append(_agreement("acceptance", tau, c["th_expected"], bernoulli=True))
        else:
            agreement.append(_agreement("accepted tokens | path", tau, c["th_expected"]))
        for name in trace.theory_columns():
            if name.startswith("exp_"):
                theory[name[4:]] = float(np.nanmean(c[f"th_{name}"])) if np.isfinite(c[f"th_{name}"]).any() else math.nan
        if mode == "single":
            optimum, how = float(c["th_optimum"].mean()), "alpha*(p, Q) exact per round"
        elif mode == "chain":
            optimum, how = float(c["th_exp_block"].mean()), "block optimum: mean of block E[tau|path], unbiased"
            theory["opt_first (max P(tau>=1))"] = float(c["th_opt_first"].mean())
    if "th_tree_lower" in c and np.isfinite(c["th_tree_lower"]).any():  # trees: the certified interval for T*, per round
        theory["tree_optimum_lower"] = float(np.nanmean(c["th_tree_lower"]))
        theory["tree_optimum_upper"] = float(np.nanmean(c["th_tree_upper"]))
    return Report(
        config=dict(cfg),
        records=n,
        rounds=int(c["round_t_draft"].size),
        tokens=tokens,
        target_calls_per_token=n / tokens if tokens else math.nan,
        mean_accepted_length=1.0 + float(tau.mean()) if n else math.nan,
        tokens_per_s=tokens / (work + t["prefill"]) if work > 0 else math.nan,
        verify_share=t["verify"] / work if work > 0 else math.nan,
        time_s=t,
        agreement=tuple(agreement),
        theory=theory,
        optimum=optimum,
        optimum_how=how,
    )

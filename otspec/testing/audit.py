r"""The whole battery of verifier checks, with the smallest counterexample of every failed property.

:func:`audit` is what ``otspec audit MODULE:OBJECT`` runs (see :doc:`testing`). For a single-step
verifier it checks, on random and adversarial small problems (V <= 5, k <= 3, every draft-law kind
the verifier applies to):

``kernel``
    every conditional output law :math:`\pi(\cdot \mid \bar x)` is a distribution (exact);
``lossless``
    :math:`\sum_{\bar x} Q(\bar x)\pi(\cdot \mid \bar x) = p` (exact; for a verifier known only by
    its sampler: a chi-square test of its output against p);
``acceptance``
    the verifier's own ``acceptance`` equals the kernel's exact value;
``optimum``
    acceptance :math:`\le \alpha^*(p, Q)` (no lossless rule can do better);
``ratio``
    acceptance / optimum, its minimum over all problems and over problems with k >= 2 next to
    :math:`1 - 1/e` (information, not a verdict);
``sampler``
    the sampler against the kernel, draft tuple by draft tuple (chi-square; false alarm and power
    stated);
``tv_budget`` (only when a budget :math:`\varepsilon` is declared, ``tv_budget=`` / ``--tv-budget``)
    a lossy rule's output law is within TV :math:`\varepsilon` of p (exact from the kernel; for a
    sampler, the output-law test shifted by :math:`\varepsilon`, false alarm and power stated), and
    its ``optimum`` row checks acceptance :math:`\le \min(1, \alpha^* + \varepsilon)`, the lossy
    frontier;
``bad_inputs``
    a target that is not a distribution, a wrong-length target, out-of-vocabulary or wrong-length
    drafts, drafts of probability 0, a law it does not apply to and a seed in place of a
    ``numpy.random.Generator`` must raise (``ValueError`` / ``TypeError``).

Chain verifiers get ``lossless`` (the stream criterion), ``optimum`` and ``ratio`` against
:func:`otspec.block_optimum`.

Problems are tried from the smallest up, and a failure is then shrunk (drop a token, drop a draft,
simplify the law, round the weights) while it still fails; the result is a pasteable snippet.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec.testing._bad_inputs import bad_inputs_property
from otspec.testing._chain_audit import audit_chain
from otspec.testing._findings import VerifierAssertionError
from otspec.testing._problems import AuditProblem, random_problems, step_problems, wide_range_problems
from otspec.testing._runner import USER_EXITS, check_timeout, exit_finding, guarded, replay_snippet, run_check, shrink
from otspec.testing.adapters import as_verifier, object_spec
from otspec.testing.budget import budget_finding, frontier_finding
from otspec.testing.chain_forms import ChainVerifier
from otspec.testing.exact import acceptance_finding, check_lossless, kernel_finding
from otspec.testing.forms import ConditionalVerifier, SamplerVerifier
from otspec.testing.optimum import optimum_finding, ratio_from, reference_optimum
from otspec.testing.power import assert_output_law, detectable_tv, tv_budget_value
from otspec.testing.results import AuditReport, Counterexample, PropertyResult
from otspec.testing.samplers import assert_sampler_lossless, assert_sampler_matches
from otspec.verifiers import Verifier

__all__ = ["DEFAULT_TIMEOUT", "ONE_MINUS_INV_E", "audit"]

#: :math:`1 - 1/e`, the multiplicative guarantee of SpecTr's K-SEQ for i.i.d. drafts.
ONE_MINUS_INV_E = 1.0 - math.exp(-1.0)

#: Default seconds one check may take: generous (a pure-Python sampler drawing 60 000 tokens at
#: 1 ms each takes a minute), so only a hung verifier reaches it.
DEFAULT_TIMEOUT = 600.0


# ------------------------------------------------------------------------------------------------
# The audit


# long-function: the public entry's numpydoc docstring states every option; the body is a short dispatch
def audit(
    verifier: Any,
    *,
    seed: int = 0,
    problems: int = 120,
    draws: int = 60_000,
    sampler_problems: int = 3,
    false_alarm: float = 1e-6,
    atol: float = EXACT_ATOL,
    spec: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    tv_budget: float | None = None,
) -> AuditReport:
    r"""Run the whole battery of checks on ``verifier`` and return an :class:`AuditReport`.

    Parameters
    ----------
    verifier : any form accepted by :func:`otspec.testing.as_verifier`
    seed : int
        Seed of the random problems and of the sampler draws (the run is reproducible).
    problems : int
        Problems from the catalogue (chosen at random, then tried from the smallest up); beyond the
        catalogue's size, that many more seeded random problems (weights from 0..7 or 1 ... 1e12).
        The wide-range problems (probabilities 1e-3 ... 1e-12 and 2.5e-308) are always added.
    draws : int
        Sampler draws per sampled problem (split over its draft tuples).
    sampler_problems : int
        How many problems the sampler tests use.
    false_alarm : float
        False-alarm probability of each sampler test.
    atol : float
        Tolerance of the exact checks.
    spec : str, optional
        ``MODULE:OBJECT`` used in the counterexample snippets (found automatically when possible).
    timeout : float or None
        Seconds one check (one property on one problem) may take before it fails; ``None`` or 0:
        no limit. Enforced with ``SIGALRM`` in the main thread of a POSIX process only.
    tv_budget : float, optional
        The TV distance to the target a lossy verifier declares (per step, in ``[0, 1)``): adds the
        ``tv_budget`` row and checks acceptance against the frontier :math:`\min(1, \alpha^* +
        \varepsilon)`. Ignored (a skipped row) for a verifier declared lossless.

    Returns
    -------
    AuditReport
        One verdict per property, with the smallest counterexample of each failure.

    Raises
    ------
    InvalidVerifierError
        If ``verifier`` is not a form :func:`otspec.testing.as_verifier` accepts.
    InvalidOptionError
        If ``tv_budget`` is not a number in ``[0, 1)``.

    Examples
    --------
    >>> from otspec.testing import audit
    >>> def keep_first(p, q, drafts):          # always keeps the first draft: lossy
    ...     out = [0.0] * len(p); out[drafts[0]] = 1.0; return out
    >>> report = audit(keep_first, problems=30, draws=5_000)
    >>> report["lossless"].verdict, report.exit_code
    ('fail', 1)
    >>> print(report["lossless"].counterexample.problem)
    p = np.array([0, 1], dtype=float)
    law = otspec.iid(np.array([1, 0], dtype=float), 1)
    """
    eps = None if tv_budget is None else tv_budget_value(tv_budget)
    with check_timeout(timeout):
        try:
            v = guarded(lambda: as_verifier(verifier))
        except VerifierAssertionError as exc:  # a Verifier class whose constructor exits
            name = getattr(verifier, "__name__", type(verifier).__name__)
            return _stopped(name, "verifier", True, spec, seed, exc)
        spec = spec or object_spec(verifier) or object_spec(v)
        rng = np.random.default_rng(seed)
        form = _form(v)
        try:
            if isinstance(v, ChainVerifier):
                props = audit_chain(v, rng, seed, problems, atol, spec)
            else:
                props = _audit_step(v, rng, seed, problems, draws, sampler_problems, false_alarm, atol, spec, eps)
        except USER_EXITS as exc:  # an exit outside a single check (e.g. in applies_to)
            return _stopped(v.name, form, bool(v.lossless), spec, seed, exit_finding(exc))
    return AuditReport(verifier=v.name, form=form, lossless_claim=bool(v.lossless), spec=spec, seed=int(seed), properties=tuple(props))


def _form(v) -> str:
    if isinstance(v, ChainVerifier):
        return "chain"
    if isinstance(v, SamplerVerifier):
        return "sampler"
    if isinstance(v, ConditionalVerifier):
        return "conditional"
    return str(getattr(v, "audit_form", "verifier"))


def _stopped(name: str, form: str, lossless: bool, spec, seed: int, finding: VerifierAssertionError) -> AuditReport:
    """The report of an audit the verifier's code stopped (exit, interrupt, timeout): one failed row."""
    row = PropertyResult("user_code", "fail", f"the audit stopped: the verifier {finding}", 0)
    return AuditReport(verifier=name, form=form, lossless_claim=lossless, spec=spec, seed=int(seed), properties=(row,))


# long-function: the audit's checks run in a fixed order, each a short call with its report
def _audit_step(v, rng, seed, n_problems, draws, n_sampler, false_alarm, atol, spec, eps=None) -> list:
    catalogue = [pr for pr in step_problems(rng, 40, 64) if _applies(v, pr)]
    if not catalogue:  # the catalogue covers every kind and k <= 3 that the other problems use
        return [
            PropertyResult(name, "skip", "the verifier applies to none of the audit's draft laws (kinds / k)")
            for name in ("kernel", "lossless", "acceptance", "optimum", "ratio", "sampler", "bad_inputs")
            + (("tv_budget",) if eps is not None else ())
        ]
    order = rng.permutation(len(catalogue))[:n_problems]
    sampled = sorted((catalogue[i] for i in order), key=lambda pr: pr.size())  # the sampler tests use these
    wide = [pr for pr in wide_range_problems(64) if _applies(v, pr)]
    extra = random_problems(rng, max(0, n_problems - len(catalogue)), 64, keep=lambda pr: _applies(v, pr))
    chosen = sampled + sorted(wide, key=lambda pr: pr.size()) + sorted(extra, key=lambda pr: pr.size())
    exact = not isinstance(v, SamplerVerifier)
    name = v.name
    out = []
    memo: dict = {}

    def get(pr: AuditProblem, what: str):
        """The kernel, the acceptance estimate or the optimum of one problem, computed once."""
        key = (pr, what)
        if key not in memo:
            p, law = pr.build()
            if what == "kernel":
                memo[key] = guarded(lambda: v.kernel(p, law))
            elif what == "acceptance":
                # a sampler's acceptance is a Monte Carlo estimate: a quarter of the draws suffice
                n = draws if exact else max(2000, draws // 4)
                memo[key] = guarded(lambda: v.acceptance(p, law, n_samples=n, rng=np.random.default_rng(seed)))
            else:
                memo[key] = reference_optimum(p, law)
        return memo[key]

    def exact_property(
        prop: str, check: Callable[[AuditProblem], VerifierAssertionError | None], call: str, imports: str, ok: str, probs=chosen
    ):
        for n, pr in enumerate(probs, 1):
            err = run_check(lambda pr=pr: check(pr))
            if err is not None:
                small, err = shrink(pr, lambda c: run_check(lambda: check(c)), err)
                snippet = replay_snippet(prop, name, spec, seed, small.code(), call, imports)
                return PropertyResult(prop, "fail", str(err).splitlines()[0], n, Counterexample(small.code(), str(err), snippet))
        return PropertyResult(prop, "pass", ok.format(n=len(probs)), len(probs))

    if exact:
        kernel_call = f"assert_kernel_valid(verifier, p, law, atol={atol!r})"
        out.append(
            exact_property(
                "kernel",
                lambda pr: kernel_finding(v.name, get(pr, "kernel"), pr.build()[1], atol=atol),
                kernel_call,
                "assert_kernel_valid",
                "every pi(.|x) is a distribution on {n} problems",
            )
        )
        if v.lossless:
            out.append(
                exact_property(
                    "lossless",
                    lambda pr: check_lossless(v, *pr.build(), atol=atol, kernel=get(pr, "kernel")),
                    f"assert_lossless(verifier, p, law, atol={atol!r})",
                    "assert_lossless",
                    "output law == p (exact, atol " + f"{atol:g}" + ") on {n} problems",
                )
            )
        else:
            tv = max(_run_value(lambda pr=pr: _tv(v, *pr.build()), 0.0) for pr in chosen)
            out.append(
                PropertyResult(
                    "lossless", "info", f"declared lossy: largest TV(output law, p) = {tv:.4g} over {len(chosen)} problems", len(chosen)
                )
            )
        acc_call = f"assert_acceptance_matches_kernel(verifier, p, law, atol={atol!r})"
        out.append(
            exact_property(
                "acceptance",
                lambda pr: acceptance_finding(v.name, get(pr, "acceptance"), get(pr, "kernel"), pr.build()[1], atol=atol),
                acc_call,
                "assert_acceptance_matches_kernel",
                "acceptance() == kernel acceptance on {n} problems",
            )
        )
    else:
        out.append(PropertyResult("kernel", "skip", "sampler only: no exact kernel"))
        out.append(_sampled_lossless(v, sampled, seed, draws, false_alarm, spec, max(n_sampler, 4)))
        out.append(PropertyResult("acceptance", "skip", "sampler only: acceptance is a Monte Carlo estimate"))

    if v.lossless:
        probs = chosen if exact else sampled[: max(n_sampler, 4)]
        what = "acceptance" if exact else "the 99% interval of the Monte Carlo acceptance"
        out.append(
            exact_property(
                "optimum",
                lambda pr: optimum_finding(v.name, ratio_from(get(pr, "acceptance"), get(pr, "optimum")), pr.build()[1], atol=atol),
                f"assert_within_optimum(verifier, p, law, n_samples={draws if exact else max(2000, draws // 4)}, rng=np.random.default_rng({seed}))",
                "assert_within_optimum",
                what + " <= optimum on {n} problems",
                probs,
            )
        )
    elif eps is not None and exact:
        out.append(
            exact_property(
                "optimum",
                lambda pr: frontier_finding(v.name, get(pr, "acceptance"), get(pr, "optimum"), pr.build()[1], eps, atol=atol),
                f"assert_within_tv_budget(verifier, p, law, {eps!r}, atol={atol!r})",
                "assert_within_tv_budget",
                f"acceptance <= min(1, optimum + {eps:g}), the lossy frontier, on " + "{n} problems",
            )
        )
    else:
        out.append(PropertyResult("optimum", "skip", "declared lossy: may exceed the lossless optimum"))
    if eps is not None:
        out.append(_budget(v, chosen, sampled, seed, draws, n_sampler, false_alarm, atol, spec, eps, exact, exact_property, get))
    out.append(_ratio(v, chosen if exact else sampled[: max(n_sampler, 4)], get))
    if exact:
        out.append(_sampler(v, sampled, seed, draws, n_sampler, false_alarm, spec, get))
    else:
        out.append(PropertyResult("sampler", "skip", "sampler only: nothing to compare it with (see lossless)"))
    out.append(bad_inputs_property(v, sampled, spec, seed))
    return out


def _budget(v, chosen, sampled, seed, draws, n_sampler, false_alarm, atol, spec, eps, exact, exact_property, get) -> PropertyResult:
    """The ``tv_budget`` row: exact from the kernel, or the shifted output-law test of a sampler."""
    if v.lossless:
        return PropertyResult("tv_budget", "skip", f"declared lossless: the lossless check is stricter than TV <= {eps:g}")
    if exact:
        return exact_property(
            "tv_budget",
            lambda pr: budget_finding(v.name, get(pr, "kernel"), *pr.build(), eps, atol=atol),
            f"assert_within_tv_budget(verifier, p, law, {eps!r}, atol={atol!r})",
            "assert_within_tv_budget",
            f"TV(output law, p) <= {eps:g} (exact, atol {atol:g}) on " + "{n} problems",
        )
    probs = [pr for pr in sampled if pr.V >= 3][: max(n_sampler, 4)] or sampled[: max(n_sampler, 4)]
    level = false_alarm / max(len(probs), 1)  # Bonferroni over the problems
    statement = ""
    for n, pr in enumerate(probs, 1):
        p, law = pr.build()
        delta = detectable_tv(draws, alpha=level, beta=1e-3, V=pr.V)
        holder = {}

        def check(p=p, law=law, delta=delta, holder=holder):
            holder["r"] = assert_output_law(
                v,
                p,
                law,
                delta=min(delta, 0.999),
                alpha=level,
                beta=1e-3,
                method="sampling",
                rng=np.random.default_rng(seed),
                tv_budget=eps,
            )

        err = run_check(check)
        if err is not None:
            call = f"assert_within_tv_budget(verifier, p, law, {eps!r}, delta={min(delta, 0.999):.6g}, alpha={level:.6g}, rng=np.random.default_rng({seed}))"
            snippet = replay_snippet("tv_budget", v.name, spec, seed, pr.code(), call, "assert_within_tv_budget")
            return PropertyResult("tv_budget", "fail", str(err).splitlines()[0], n, Counterexample(pr.code(), str(err), snippet))
        statement = holder["r"].statement
    if not probs:
        return PropertyResult("tv_budget", "skip", "no problem to sample")
    return PropertyResult(
        "tv_budget",
        "pass",
        f"sampled output law within TV {eps:g} of p on {len(probs)} problems (Bonferroni); the last check {statement}",
        len(probs),
    )


def _applies(v: Verifier, pr: AuditProblem) -> bool:
    try:
        return bool(v.applies_to(pr.build()[1]))
    except Exception:
        return False


def _run_value(fn, default):
    try:
        return fn()
    except Exception:
        return default


def _tv(v, p, law) -> float:
    return 0.5 * float(np.abs(v.kernel(p, law).output_law() - p).sum())


def _ratio(v, probs, get) -> PropertyResult:
    lo_all, lo_multi, where = math.inf, math.inf, ""
    n, total = 0, 0.0
    for pr in probs:
        try:
            r = ratio_from(get(pr, "acceptance"), get(pr, "optimum"))
        except Exception:  # noqa: BLE001 - the acceptance property reports it
            continue
        if r.optimum <= 0:
            continue
        n += 1
        total += r.ratio
        lo_all = min(lo_all, r.ratio)
        if pr.k >= 2 and r.ratio < lo_multi:
            lo_multi, where = r.ratio, pr.code().replace("\n", "; ")
    if n == 0:
        return PropertyResult("ratio", "skip", "no problem with a positive optimum")
    text = f"acceptance / optimum: mean {total / n:.4f}, minimum {lo_all:.4f} over {n} problems"
    if lo_multi < math.inf:
        rel = ">=" if lo_multi >= ONE_MINUS_INV_E else "<"
        text += f"; minimum with k >= 2 {lo_multi:.4f} {rel} 1 - 1/e = {ONE_MINUS_INV_E:.4f} (at {where})"
    return PropertyResult("ratio", "info", text, n)


def _sampler(v, probs, seed, draws, n_sampler, false_alarm, spec, get) -> PropertyResult:
    cap = max(1, draws // 5000)  # at least 5000 draws per draft tuple
    # problems whose kernel is random for most tuples (a one-hot row tests nothing but its support),
    # the largest under the cap first, one per law kind before a second of any kind
    cands = []
    for pr in sorted(probs, key=lambda pr: -pr.size()[2]):
        if pr.size()[2] > cap:
            continue
        try:
            pi = np.asarray(get(pr, "kernel").pi)
        except Exception:  # noqa: BLE001 - the kernel property reports it
            continue
        if np.mean(np.count_nonzero(pi > 1e-9, axis=1) >= 2) >= 0.5:
            cands.append(pr)
    picks, kinds = [], set()
    for pr in cands:
        if pr.kind not in kinds and len(picks) < n_sampler:
            picks.append(pr)
            kinds.add(pr.kind)
    for pr in cands:
        if pr not in picks and len(picks) < n_sampler:
            picks.append(pr)
    if not picks:
        return PropertyResult("sampler", "skip", f"no problem small enough for {draws} draws")
    results = []
    for n, pr in enumerate(sorted(picks, key=lambda pr: pr.size()), 1):
        p, law = pr.build()
        holder = {}

        def check(p=p, law=law, holder=holder):
            holder["r"] = assert_sampler_matches(v, p, law, n=draws, false_alarm=false_alarm, rng=np.random.default_rng(seed))

        err = run_check(check)
        if err is not None:
            call = f"assert_sampler_matches(verifier, p, law, n={draws}, false_alarm={false_alarm!r}, rng=np.random.default_rng({seed}))"
            snippet = replay_snippet("sampler", v.name, spec, seed, pr.code(), call, "assert_sampler_matches")
            return PropertyResult("sampler", "fail", str(err).splitlines()[0], n, Counterexample(pr.code(), str(err), snippet))
        results.append(holder["r"])
    power = min(r.power for r in results)
    detect = max(r.detectable_tv for r in results)
    return PropertyResult(
        "sampler",
        "pass",
        f"chi-square per draft tuple on {len(results)} problems, {draws} draws each, false alarm {false_alarm:g}; "
        f"power >= {power:.3f} against a TV error of {results[0].tv:g} per tuple; TV >= {detect:.3g} caught w.p. 0.99",
        len(results),
    )


def _sampled_lossless(v, probs, seed, draws, false_alarm, spec, n_problems) -> PropertyResult:
    tested = 0
    for pr in probs:
        if pr.V < 3 and len(probs) > n_problems:  # binary problems hide most sampler bugs; prefer V >= 3
            continue
        tested += 1
        p, law = pr.build()
        err = run_check(
            lambda p=p, law=law: assert_sampler_lossless(v, p, law, n=draws, false_alarm=false_alarm, rng=np.random.default_rng(seed))
        )
        if err is not None:
            call = f"assert_sampler_lossless(verifier, p, law, n={draws}, false_alarm={false_alarm!r}, rng=np.random.default_rng({seed}))"
            snippet = replay_snippet("lossless", v.name, spec, seed, pr.code(), call, "assert_sampler_lossless")
            return PropertyResult("lossless", "fail", str(err).splitlines()[0], tested, Counterexample(pr.code(), str(err), snippet))
        if tested >= n_problems:
            break
    return PropertyResult(
        "lossless",
        "pass",
        f"sampled output law matches p (chi-square, {draws} draws, false alarm {false_alarm:g}) on {tested} problems",
        tested,
    )

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
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec.testing._base import Verifier
from otspec.testing._code import array_code, law_code
from otspec.testing.adapters import (
    ChainVerifier,
    ConditionalVerifier,
    SamplerVerifier,
    as_verifier,
    object_spec,
)
from otspec.testing.asserts import (
    VerifierAssertionError,
    acceptance_finding,
    assert_sampler_lossless,
    assert_sampler_matches,
    check_chain_lossless,
    check_lossless,
    kernel_finding,
    optimum_finding,
    ratio_from,
    reference_optimum,
)

__all__ = ["ONE_MINUS_INV_E", "AuditReport", "Counterexample", "PropertyResult", "audit"]

#: :math:`1 - 1/e`, the multiplicative guarantee of SpecTr's K-SEQ for i.i.d. drafts.
ONE_MINUS_INV_E = 1.0 - math.exp(-1.0)

_KINDS = ("iid", "without_replacement", "greedy", "product", "explicit")


# ------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Counterexample:
    """The smallest failing problem found for one property.

    ``problem`` is the code of the problem (``p = ...; law = ...``), ``message`` the assertion's
    message, ``snippet`` a complete Python script that re-raises it, ``path`` where the CLI saved
    the snippet (``None`` until saved).

    Attributes
    ----------
    problem : str
        Python code building the problem (``p = ...; law = ...``).
    message : str
        The failed assertion's message.
    snippet : str
        A self-contained script that reproduces the failure.
    path : str or None
        Where the snippet was written, once saved.
    """

    problem: str
    message: str
    snippet: str
    path: str | None = None


@dataclass(frozen=True)
class PropertyResult:
    """One row of the audit table: ``verdict`` is ``"pass"``, ``"fail"``, ``"skip"`` or ``"info"``.

    Attributes
    ----------
    name : str
        The property (``"lossless"``, ``"kernel"``, ``"acceptance"``, ``"optimum"``, ...).
    verdict : str
        ``"pass"``, ``"fail"``, ``"skip"`` (does not apply) or ``"info"`` (reported, not judged).
    summary : str
        One line of numbers behind the verdict.
    checked : int
        Number of problems the property was checked on.
    counterexample : Counterexample or None
        The smallest failing problem, when the verdict is ``"fail"``.
    """

    name: str
    verdict: str
    summary: str
    checked: int = 0
    counterexample: Counterexample | None = None


@dataclass(frozen=True)
class AuditReport:
    """Everything :func:`audit` found. ``ok`` is False when any property failed; ``exit_code`` is
    what ``otspec audit`` returns (1 on any failure, 0 otherwise). ``report[name]`` is the
    :class:`PropertyResult` of one property.

    Attributes
    ----------
    verifier : str
        The audited verifier's name.
    form : str
        How it was given (conditional law, sampler, Verifier class, chain verifier).
    lossless_claim : bool
        Whether it claims to be lossless (an approximate rule is audited for the other properties).
    spec : str or None
        ``MODULE:OBJECT`` the counterexample snippets import it from.
    seed : int
        Seed of the run.
    properties : tuple of PropertyResult
        One result per property, in table order.
    """

    verifier: str
    form: str
    lossless_claim: bool
    spec: str | None
    seed: int
    properties: tuple

    @property
    def ok(self) -> bool:
        """True when no property failed (skipped and informational rows do not count)."""
        return all(r.verdict != "fail" for r in self.properties)

    @property
    def exit_code(self) -> int:
        """What ``otspec audit`` exits with: 0 when :attr:`ok`, 1 otherwise."""
        return 0 if self.ok else 1

    def __getitem__(self, name: str) -> PropertyResult:
        for r in self.properties:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dict(self) -> dict:
        """JSON-ready form of the report (``otspec audit --json``).

        Returns
        -------
        dict
            Every field (properties and counterexamples as nested dicts) plus ``"ok"``.
        """
        d = asdict(self)
        d["ok"] = self.ok
        return d

    def __repr__(self) -> str:
        rows = ", ".join(f"{r.name}={r.verdict}" for r in self.properties)
        return f"AuditReport({self.verifier!r}, {rows})"


# ------------------------------------------------------------------------------------------------
# Problems, as small integer weights (exact, printable, shrinkable)


@dataclass(frozen=True)
class _Problem:
    p: tuple
    kind: str
    k: int
    qs: tuple  # one weight tuple (iid/wor/greedy), k of them (product), () (explicit)
    tuples: tuple = ()  # explicit only
    tw: tuple = ()

    @property
    def V(self) -> int:
        return len(self.p)

    def valid(self) -> bool:
        if sum(self.p) <= 0 or self.k < 1 or self.V < 2:
            return False
        if self.kind == "explicit":
            return bool(self.tuples) and all(len(t) == self.k for t in self.tuples) and all(w > 0 for w in self.tw)
        if any(sum(q) <= 0 for q in self.qs):
            return False
        if self.kind in ("without_replacement", "greedy"):
            return self.k <= sum(1 for x in self.qs[0] if x > 0)
        return len(self.qs) == (self.k if self.kind == "product" else 1)

    def build(self):
        import otspec

        p = _norm(self.p)
        if self.kind == "product":
            return p, otspec.product([_norm(q) for q in self.qs])
        if self.kind == "explicit":
            return p, otspec.explicit([list(t) for t in self.tuples], _norm(self.tw), vocab_size=self.V)
        return p, getattr(otspec, self.kind)(_norm(self.qs[0]), self.k)

    def size(self) -> tuple:
        _, law = self.build()
        return (self.V, self.k, law.num_tuples(), sum(self.p) + sum(map(sum, self.qs)) + sum(self.tw), _KINDS.index(self.kind))

    def code(self) -> str:
        p, law = self.build()
        return f"p = {array_code(p)}\nlaw = {law_code(law)}"

    def shrinks(self) -> Iterator[_Problem]:
        """Simpler problems, most aggressive first."""
        if self.kind != "iid" and self.qs:
            yield replace(self, kind="iid", qs=(self.qs[0],), tuples=(), tw=())
        if self.k > 1:
            if self.kind == "product":
                yield replace(self, k=self.k - 1, qs=self.qs[:-1])
            elif self.kind == "explicit":
                yield replace(self, k=self.k - 1, tuples=tuple(t[:-1] for t in self.tuples))
            else:
                yield replace(self, k=self.k - 1)
        for j in range(self.V):
            yield self._drop(j)
        if self.kind == "explicit":
            for i in range(len(self.tuples)):
                yield replace(self, tuples=self.tuples[:i] + self.tuples[i + 1 :], tw=self.tw[:i] + self.tw[i + 1 :])
        arrays = [("p", None)] + [("qs", i) for i in range(len(self.qs))]
        for name, i in arrays:
            w = self.p if name == "p" else self.qs[i]
            for j, x in enumerate(w):
                for new in ([1] if x > 1 else []) + ([x // 2] if x > 3 else []) + [0]:
                    if new != x:
                        yield self._set(name, i, j, new)

    def _drop(self, j: int) -> _Problem:
        def cut(w):
            return tuple(w[:j]) + tuple(w[j + 1 :])

        if self.kind == "explicit":
            keep = [(tuple(t), w) for t, w in zip(self.tuples, self.tw, strict=False) if j not in t]
            tuples = tuple(tuple(x - (x > j) for x in t) for t, _ in keep)
            return replace(self, p=cut(self.p), tuples=tuples, tw=tuple(w for _, w in keep))
        return replace(self, p=cut(self.p), qs=tuple(cut(q) for q in self.qs))

    def _set(self, name: str, i: int | None, j: int, value: int) -> _Problem:
        if name == "p":
            w = list(self.p)
            w[j] = value
            return replace(self, p=tuple(w))
        qs = [list(q) for q in self.qs]
        qs[i][j] = value
        return replace(self, qs=tuple(tuple(q) for q in qs))


def _norm(w) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum()


def _weight_pairs(rng: np.random.Generator, n_random: int) -> list:
    """(p, q) integer weights: an adversarial catalogue, then random ones (zeros included)."""
    out = []
    for V in (2, 3, 4):
        ramp = tuple(range(1, V + 1))
        out += [
            (ramp, ramp),  # p == q: everything must be accepted
            ((1,) * (V // 2) + (0,) * (V - V // 2), (0,) * (V // 2) + (1,) * (V - V // 2)),  # disjoint supports
            ((0,) + ramp[1:], ramp[::-1]),  # p = 0 at a token q proposes most
            (ramp[::-1], (0,) + ramp[1:]),  # q = 0 where p is largest: reached only by residual draws
            ((1,) * V, (50,) + (1,) * (V - 1)),  # a peaky draft against a flat target
            (tuple(1 if i == V - 1 else 0 for i in range(V)), ramp),  # one-hot target
            (ramp, (2, 2) + (1,) * (V - 2)),  # ties in q (greedy's top set)
        ]
    for _ in range(n_random):
        V = int(rng.integers(2, 6))
        p = rng.integers(0, 7, size=V)
        q = rng.integers(0, 7, size=V)
        p[rng.integers(V)] += 1
        q[rng.integers(V)] += 1
        out.append((tuple(int(x) for x in p), tuple(int(x) for x in q)))
    return out


def _problems(rng: np.random.Generator, n_random: int, max_tuples: int) -> list:
    probs = []
    for pw, qw in _weight_pairs(rng, n_random):
        V = len(pw)
        other = tuple(int(x) + 1 for x in rng.permutation(np.asarray(qw)))  # a second drafter
        for k in (1, 2, 3):
            if V**k > max_tuples:
                continue
            probs.append(_Problem(pw, "iid", k, (qw,)))
            probs.append(_Problem(pw, "without_replacement", k, (qw,)))
            probs.append(_Problem(pw, "greedy", k, (qw,)))
            probs.append(_Problem(pw, "product", k, (qw,) + (other,) * (k - 1)))
            m = int(rng.integers(1, 5))
            tuples = tuple(tuple(int(x) for x in rng.integers(0, V, size=k)) for _ in range(m))
            probs.append(_Problem(pw, "explicit", k, (), tuples, tuple(int(x) for x in rng.integers(1, 5, size=m))))
    seen, out = set(), []
    for pr in probs:
        if pr.valid() and pr not in seen:
            seen.add(pr)
            out.append(pr)
    return out


# ------------------------------------------------------------------------------------------------
# Running one check on one problem


def _run(check: Callable[[], Any]) -> VerifierAssertionError | None:
    """Run a check: ``None`` if it holds, the error (any exception the verifier raised) otherwise."""
    try:
        out = check()
    except VerifierAssertionError as exc:
        return exc
    except Exception as exc:  # the verifier's own code failed on valid input: that is a finding too
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return VerifierAssertionError(
            f"raised {type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})", {"exception": type(exc).__name__}
        )
    return out if isinstance(out, VerifierAssertionError) else None


def _shrink(
    problem: Any,
    fails: Callable[[Any], VerifierAssertionError | None],
    first: VerifierAssertionError,
    budget: int = 150,
    *,
    remember: bool = True,
):
    """Greedy shrinking: take the first simpler problem that still fails, until none does.

    ``problem`` is a single-step or chain problem (``shrinks``, ``valid``, ``size``); each call of
    ``fails`` costs one unit of ``budget``. With ``remember`` a candidate already tried is skipped
    (it costs no budget the second time); without it, it is tried again."""
    best, err = problem, first
    tried: set = set()
    progress = True
    while progress and budget > 0:
        progress = False
        for cand in best.shrinks():
            if (remember and cand in tried) or not cand.valid():
                continue
            if remember:
                tried.add(cand)
            try:
                if cand.size() >= best.size():
                    continue
            except Exception:  # not a valid law after all
                continue
            budget -= 1
            e = fails(cand)
            if e is not None:
                best, err, progress = cand, e, True
                break
            if budget <= 0:
                break
    return best, err


def _snippet(prop: str, name: str, spec: str | None, seed: int, setup: str, call: str, imports: str) -> str:
    load = (
        f'verifier = as_verifier(load_object("{spec}"))'
        if spec
        else 'verifier = as_verifier(load_object("MODULE:OBJECT"))  # the verifier could not be located: put its MODULE:OBJECT here'
    )
    return (
        f'"""Counterexample to property {prop!r} of verifier {name!r}, found by otspec audit (seed {seed})."""\n'
        "import numpy as np\n\n"
        "import otspec\n"
        f"from otspec.testing import {', '.join(['as_verifier', 'load_object'] + ([imports] if imports else []))}\n\n"
        f"{load}\n{setup}\n{call}\n"
    )


# ------------------------------------------------------------------------------------------------
# The audit


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
) -> AuditReport:
    r"""Run the whole battery of checks on ``verifier`` and return an :class:`AuditReport`.

    Parameters
    ----------
    verifier : any form accepted by :func:`otspec.testing.as_verifier`
    seed : int
        Seed of the random problems and of the sampler draws (the run is reproducible).
    problems : int
        At most this many small problems (chosen at random from the catalogue, then tried from the
        smallest up).
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

    Returns
    -------
    AuditReport
        One verdict per property, with the smallest counterexample of each failure.

    Raises
    ------
    InvalidVerifierError
        If ``verifier`` is not a form :func:`otspec.testing.as_verifier` accepts.

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
    v = as_verifier(verifier)
    spec = spec or object_spec(verifier) or object_spec(v)
    rng = np.random.default_rng(seed)
    if isinstance(v, ChainVerifier):
        props = _audit_chain(v, rng, seed, problems, atol, spec)
        form = "chain"
    else:
        form = "sampler" if isinstance(v, SamplerVerifier) else "conditional" if isinstance(v, ConditionalVerifier) else "verifier"
        props = _audit_step(v, rng, seed, problems, draws, sampler_problems, false_alarm, atol, spec)
    return AuditReport(verifier=v.name, form=form, lossless_claim=bool(v.lossless), spec=spec, seed=int(seed), properties=tuple(props))


def _audit_step(v, rng, seed, n_problems, draws, n_sampler, false_alarm, atol, spec) -> list:
    catalogue = [pr for pr in _problems(rng, 40, 64) if _applies(v, pr)]
    if not catalogue:
        return [
            PropertyResult(name, "skip", "the verifier applies to none of the audit's draft laws (kinds / k)")
            for name in ("kernel", "lossless", "acceptance", "optimum", "ratio", "sampler", "bad_inputs")
        ]
    order = rng.permutation(len(catalogue))[:n_problems]
    chosen = sorted((catalogue[i] for i in order), key=lambda pr: pr.size())
    exact = not isinstance(v, SamplerVerifier)
    name = v.name
    out = []
    memo: dict = {}

    def get(pr: _Problem, what: str):
        """The kernel, the acceptance estimate or the optimum of one problem, computed once."""
        key = (pr, what)
        if key not in memo:
            p, law = pr.build()
            if what == "kernel":
                memo[key] = v.kernel(p, law)
            elif what == "acceptance":
                # a sampler's acceptance is a Monte Carlo estimate: a quarter of the draws suffice
                memo[key] = v.acceptance(p, law, n_samples=draws if exact else max(2000, draws // 4), rng=np.random.default_rng(seed))
            else:
                memo[key] = reference_optimum(p, law)
        return memo[key]

    def exact_property(
        prop: str, check: Callable[[_Problem], VerifierAssertionError | None], call: str, imports: str, ok: str, probs=chosen
    ):
        for n, pr in enumerate(probs, 1):
            err = _run(lambda pr=pr: check(pr))
            if err is not None:
                small, err = _shrink(pr, lambda c: _run(lambda: check(c)), err)
                snippet = _snippet(prop, name, spec, seed, small.code(), call, imports)
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
        out.append(_sampled_lossless(v, chosen, seed, draws, false_alarm, spec, max(n_sampler, 4)))
        out.append(PropertyResult("acceptance", "skip", "sampler only: acceptance is a Monte Carlo estimate"))

    if v.lossless:
        probs = chosen if exact else chosen[: max(n_sampler, 4)]
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
    else:
        out.append(PropertyResult("optimum", "skip", "declared lossy: may exceed the lossless optimum"))
    out.append(_ratio(v, chosen if exact else chosen[: max(n_sampler, 4)], get))
    if exact:
        out.append(_sampler(v, chosen, seed, draws, n_sampler, false_alarm, spec, get))
    else:
        out.append(PropertyResult("sampler", "skip", "sampler only: nothing to compare it with (see lossless)"))
    out.append(_bad_inputs(v, chosen, spec, seed))
    return out


def _applies(v: Verifier, pr: _Problem) -> bool:
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

        err = _run(check)
        if err is not None:
            call = f"assert_sampler_matches(verifier, p, law, n={draws}, false_alarm={false_alarm!r}, rng=np.random.default_rng({seed}))"
            snippet = _snippet("sampler", v.name, spec, seed, pr.code(), call, "assert_sampler_matches")
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
        err = _run(
            lambda p=p, law=law: assert_sampler_lossless(v, p, law, n=draws, false_alarm=false_alarm, rng=np.random.default_rng(seed))
        )
        if err is not None:
            call = f"assert_sampler_lossless(verifier, p, law, n={draws}, false_alarm={false_alarm!r}, rng=np.random.default_rng({seed}))"
            snippet = _snippet("lossless", v.name, spec, seed, pr.code(), call, "assert_sampler_lossless")
            return PropertyResult("lossless", "fail", str(err).splitlines()[0], tested, Counterexample(pr.code(), str(err), snippet))
        if tested >= n_problems:
            break
    return PropertyResult(
        "lossless",
        "pass",
        f"sampled output law matches p (chi-square, {draws} draws, false alarm {false_alarm:g}) on {tested} problems",
        tested,
    )


# ------------------------------------------------------------------------------------------------
# Bad inputs


def _bad_inputs(v, probs, spec, seed) -> PropertyResult:
    import otspec

    base = next((pr for pr in probs if pr.V >= 3), probs[0])
    p, law = base.build()
    d = law.sample(np.random.default_rng(seed), 1)[0]
    V = law.V
    short = np.asarray(p[:-1]) + np.asarray(p[-1]) / (V - 1)
    cases = [
        (
            "p does not sum to 1",
            lambda: v.sample(np.asarray(p) * 0.9, law, d, rng=np.random.default_rng(0)),
            ValueError,
            "verifier.sample(p * 0.9, law, drafts, rng=np.random.default_rng(0))",
        ),
        (
            "p has a NaN",
            lambda: v.sample(np.where(np.arange(V) == 0, np.nan, p), law, d, rng=np.random.default_rng(0)),
            ValueError,
            "verifier.sample(np.where(np.arange(len(p)) == 0, np.nan, p), law, drafts, rng=np.random.default_rng(0))",
        ),
        (
            "p of the wrong length",
            lambda: v.sample(short, law, d, rng=np.random.default_rng(0)),
            ValueError,
            "verifier.sample(p[:-1] + p[-1] / (len(p) - 1), law, drafts, rng=np.random.default_rng(0))",
        ),
        (
            "draft id outside the vocabulary",
            lambda: v.sample(p, law, np.append(d[:-1], V), rng=np.random.default_rng(0)),
            ValueError,
            f"verifier.sample(p, law, np.append(drafts[:-1], {V}), rng=np.random.default_rng(0))",
        ),
        (
            "k + 1 drafts",
            lambda: v.sample(p, law, np.append(d, d[0]), rng=np.random.default_rng(0)),
            ValueError,
            "verifier.sample(p, law, np.append(drafts, drafts[0]), rng=np.random.default_rng(0))",
        ),
        ("a seed instead of a Generator", lambda: v.sample(p, law, d, rng=0), TypeError, "verifier.sample(p, law, drafts, rng=0)"),
    ]
    tuples, _ = law.enumerate()
    present = {tuple(int(x) for x in t) for t in tuples}
    impossible = next((t for t in np.ndindex(*(V,) * law.k) if t not in present), None)
    if impossible is not None:
        cases.append(
            (
                "drafts of probability 0",
                lambda: v.sample(p, law, np.array(impossible), rng=np.random.default_rng(0)),
                ValueError,
                f"verifier.sample(p, law, np.array({list(impossible)}), rng=np.random.default_rng(0))",
            )
        )
    other = next(
        (
            lw
            for lw in (
                otspec.iid(_norm(base.qs[0] if base.qs else (1,) * V), 2),
                otspec.explicit([[0] * law.k], [1.0], vocab_size=V),
                otspec.product([_norm((1,) * V)] * 2),
            )
            if not _safe_applies(v, lw)
        ),
        None,
    )
    if other is not None:
        od = other.sample(np.random.default_rng(0), 1)[0]
        cases.append(
            (
                "a law it does not apply to",
                lambda: v.sample(p, other, od, rng=np.random.default_rng(0)),
                ValueError,
                f"verifier.sample(p, {law_code(other)}, np.array({od.tolist()}), rng=np.random.default_rng(0))",
            )
        )
    failures = []
    for what, call, expected, code in cases:
        try:
            got = call()
        except expected:
            continue
        except Exception as exc:
            failures.append((what, f"raised {type(exc).__name__} ({exc}) instead of {expected.__name__}", code, expected))
            continue
        failures.append((what, f"returned {got!r} instead of raising {expected.__name__}", code, expected))
    if not failures:
        return PropertyResult("bad_inputs", "pass", f"{len(cases)} kinds of bad input raise ValueError / TypeError", len(cases))
    what, msg, code, expected = failures[0]
    setup = base.code() + f"\ndrafts = np.array({d.tolist()})"
    call = f"try:\n    {code}\nexcept {expected.__name__}:\n    pass\nelse:\n    raise AssertionError('no {expected.__name__}')"
    message = f"{what}: sample {msg}" + (
        f" (and {len(failures) - 1} more: {', '.join(f[0] for f in failures[1:])})" if len(failures) > 1 else ""
    )
    snippet = _snippet("bad_inputs", v.name, spec, seed, setup, call, "")
    return PropertyResult("bad_inputs", "fail", message, len(cases), Counterexample(setup, message, snippet))


def _safe_applies(v, law) -> bool:
    try:
        return bool(v.applies_to(law))
    except Exception:
        return True


# ------------------------------------------------------------------------------------------------
# Chain verifiers


@dataclass(frozen=True)
class _ChainProblem:
    p: tuple = ()
    q: tuple = ()
    gamma: int = 1
    dirichlet: tuple = ()  # (V, seed, zero_prob) for a context-dependent pair

    def models(self):
        from otspec import models

        if self.dirichlet:
            V, s, z = self.dirichlet
            return models.dirichlet(V, seed=s, zero_prob=z), models.dirichlet(V, seed=s + 1000, zero_prob=z)
        return models.context_free(_norm(self.p)), models.context_free(_norm(self.q))

    def valid(self) -> bool:
        if self.dirichlet:
            return self.gamma >= 1
        return self.gamma >= 1 and len(self.p) >= 2 and sum(self.p) > 0 and sum(self.q) > 0

    def size(self) -> tuple:
        V = self.dirichlet[0] if self.dirichlet else len(self.p)
        return (self.gamma, V, 0 if not self.dirichlet else 1, sum(self.p) + sum(self.q))

    def code(self) -> str:
        if self.dirichlet:
            V, s, z = self.dirichlet
            return (
                f"p_model = models.dirichlet({V}, seed={s}, zero_prob={z})\n"
                f"q_model = models.dirichlet({V}, seed={s + 1000}, zero_prob={z})\ngamma = {self.gamma}"
            )
        return (
            f"p_model = models.context_free({array_code(_norm(self.p))})\n"
            f"q_model = models.context_free({array_code(_norm(self.q))})\ngamma = {self.gamma}"
        )

    def shrinks(self):
        if self.gamma > 1:
            yield replace(self, gamma=self.gamma - 1)
        if self.dirichlet:
            return
        for j in range(len(self.p)):
            yield replace(self, p=self.p[:j] + self.p[j + 1 :], q=self.q[:j] + self.q[j + 1 :])
        for name in ("p", "q"):
            w = getattr(self, name)
            for j, x in enumerate(w):
                for new in ([1] if x > 1 else []) + [0]:
                    if new != x:
                        yield replace(self, **{name: w[:j] + (new,) + w[j + 1 :]})


def _audit_chain(v: ChainVerifier, rng, seed, n_problems, atol, spec) -> list:
    import otspec

    probs = []
    for pw, qw in _weight_pairs(rng, 12):
        if len(pw) > 3:
            continue
        for g in (1, 2, 3):
            probs.append(_ChainProblem(pw, qw, g))
    for _ in range(4):
        for g in (2, 3):
            probs.append(_ChainProblem(gamma=g, dirichlet=(int(rng.integers(2, 4)), int(rng.integers(0, 10_000)), 0.3)))
    probs = [pr for pr in dict.fromkeys(probs) if pr.valid()]
    order = rng.permutation(len(probs))[:n_problems]
    chosen = sorted((probs[i] for i in order), key=lambda pr: pr.size())
    setup_imports = "from otspec import models\n"

    def chain_snippet(prop, pr, call, imports):
        return _snippet(prop, v.name, spec, seed, setup_imports + pr.code(), call, imports)

    out = [PropertyResult("kernel", "info", "checked with lossless (each path's law of (tau, Y) must sum to 1)")]
    if v.lossless:
        res = None
        for n, pr in enumerate(chosen, 1):

            def check(c):
                return _run(lambda: check_chain_lossless(v, *c.models(), c.gamma, atol=atol))

            err = check(pr)
            if err is not None:
                small, err = _shrink(pr, check, err, 80, remember=False)
                snip = chain_snippet(
                    "lossless", small, f"assert_chain_lossless(verifier, p_model, q_model, gamma, atol={atol!r})", "assert_chain_lossless"
                )
                res = PropertyResult("lossless", "fail", str(err).splitlines()[0], n, Counterexample(small.code(), str(err), snip))
                break
        out.append(
            res
            or PropertyResult(
                "lossless", "pass", f"decoded stream has the target law (exact, atol {atol:g}) on {len(chosen)} model pairs", len(chosen)
            )
        )
    else:
        out.append(PropertyResult("lossless", "skip", "declared lossy"))
    ratios, fail = [], None
    for n, pr in enumerate(chosen, 1):
        pm, qm = pr.models()
        try:
            e = v.expected_accepted(pm, qm, pr.gamma)
            opt = float(otspec.block_optimum(pm, qm, pr.gamma).value)
        except Exception:
            continue
        if v.lossless and e > opt + atol and fail is None:
            msg = f"E[tau] = {e:.6g} above the optimum {opt:.6g} of any lossless chain verifier (gamma = {pr.gamma})"
            fail = PropertyResult(
                "optimum",
                "fail",
                msg,
                n,
                Counterexample(
                    pr.code(),
                    msg,
                    chain_snippet(
                        "optimum", pr, "assert_chain_within_optimum(verifier, p_model, q_model, gamma)", "assert_chain_within_optimum"
                    ),
                ),
            )
        if opt > 0:
            ratios.append(e / opt)
    if v.lossless:
        out.append(fail or PropertyResult("optimum", "pass", f"E[tau] <= block optimum on {len(chosen)} model pairs", len(chosen)))
    else:
        out.append(PropertyResult("optimum", "skip", "declared lossy"))
    out.append(
        PropertyResult("ratio", "info", f"E[tau] / optimum >= {min(ratios):.4f} over {len(ratios)} model pairs", len(ratios))
        if ratios
        else PropertyResult("ratio", "skip", "no model pair with a positive optimum")
    )
    out.append(PropertyResult("sampler", "skip", "chain verifiers are audited through their exact per-path law"))
    out.append(PropertyResult("bad_inputs", "skip", "not defined for chain-verifier functions"))
    return out

r"""The audit's problem battery as one losslessness check with stated power (what the pytest plugin runs).

:func:`check_battery` runs :func:`otspec.testing.power.assert_output_law` on the audit's small
problems (:func:`otspec.testing.audit` draws from the same catalogue: V <= 5, k <= 3, every
draft-law kind the verifier applies to). A verifier with a kernel is checked exactly on every
applicable problem (and a failure is shrunk to the smallest problem that still fails); a sampler is
checked on ``problems`` of them by sampling, each at level :math:`\alpha/m` (Bonferroni), so

* a lossless verifier fails with probability at most :math:`\alpha`;
* a verifier whose output law is at TV :math:`\ge \delta` from :math:`p` on any one tested problem
  fails with probability at least :math:`1 - \beta`.

Examples
--------
>>> from otspec.verifiers import kseq
>>> r = check_battery(kseq)
>>> r.method, r.problems > 20
('exact', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_int_in_range
from otspec.errors import InvalidOptionError
from otspec.testing._findings import VerifierAssertionError
from otspec.testing._problems import AuditProblem, step_problems
from otspec.testing._runner import replay_snippet, run_check, shrink
from otspec.testing.adapters import as_verifier, object_spec
from otspec.testing.forms import SamplerVerifier
from otspec.testing.power import DEFAULT_MAX_DRAWS, assert_output_law, power_statement, sample_size

__all__ = ["BatteryCheck", "battery_problems", "check_battery"]


@dataclass(frozen=True)
class BatteryCheck:
    """What a passed :func:`check_battery` ran, and the power it states.

    Attributes
    ----------
    verifier : str
        The verifier's name.
    method : str
        ``"exact"`` or ``"sampling"``.
    problems : int
        Problems checked.
    draws : int
        Draws per problem (0 when exact).
    largest_tv : float
        Largest TV between the (exact or empirical) output law and ``p`` over the problems.
    statement : str
        The power statement of the whole battery.
    """

    verifier: str
    method: str
    problems: int
    draws: int
    largest_tv: float
    statement: str


def battery_problems(verifier: Any, *, seed: int = 0) -> list[AuditProblem]:
    """The audit's catalogue of small problems that ``verifier`` applies to, smallest first.

    Parameters
    ----------
    verifier : any form accepted by :func:`otspec.testing.as_verifier`
    seed : int
        Seed of the catalogue's random part.

    Returns
    -------
    list of AuditProblem
        Each has ``build() -> (p, law)`` and ``code()`` (pasteable numpy).

    Raises
    ------
    InvalidVerifierError
        If ``verifier`` is not a verifier form.

    Examples
    --------
    >>> from otspec.verifiers import token
    >>> all(pr.k == 1 for pr in battery_problems(token))
    True
    """
    v = as_verifier(verifier)
    out = []
    for pr in step_problems(np.random.default_rng(seed), 40, 64):
        try:
            ok = bool(v.applies_to(pr.build()[1]))
        except Exception:  # noqa: BLE001 - a verifier that cannot say is not run on the problem
            ok = False
        if ok:
            out.append(pr)
    return sorted(out, key=lambda pr: pr.size())


# long-function: one public check; the exact and the sampled branch each report their counterexample
def check_battery(
    verifier: Any,
    *,
    delta: float = 0.01,
    alpha: float = 1e-3,
    beta: float = 1e-3,
    problems: int = 6,
    seed: int = 0,
    method: str = "auto",
    max_draws: int = DEFAULT_MAX_DRAWS,
) -> BatteryCheck:
    r"""Check losslessness on the audit's battery; fail with a counterexample and a replay snippet.

    Parameters
    ----------
    verifier : any form accepted by :func:`otspec.testing.as_verifier`
        A verifier, a batched numpy sampler or conditional (:mod:`otspec.testing.batched`), or a
        batched torch verifier (with ``otspec_gpu`` installed).
    delta : float
        TV tolerance of the sampling check.
    alpha : float
        False-alarm probability of the whole battery.
    beta : float
        Miss probability at TV ``delta`` on any one problem.
    problems : int
        Problems a sampler is checked on (the largest vocabularies of the catalogue first, V >= 3).
    seed : int
        Seed of the catalogue and of the draws.
    method : {"auto", "exact", "sampling"}
        ``"auto"``: exact when the verifier has a kernel.
    max_draws : int
        Refuse a per-problem sample above this.

    Returns
    -------
    BatteryCheck
        Problems, draws and the power statement.

    Raises
    ------
    VerifierAssertionError
        On the first failing problem (exact: shrunk to the smallest failing problem), with the
        problem's code and a replay snippet in the message.
    InvalidOptionError
        If an option is invalid, or the verifier applies to none of the battery's problems.

    Examples
    --------
    >>> from otspec.testing.batched import batched_sampler
    >>> @batched_sampler(kinds="iid", k=1)
    ... def ignore_drafts(p, q, drafts, rng):        # lossless: draws y ~ p whatever the drafts
    ...     return rng.choice(len(p), size=len(drafts), p=p)
    >>> check_battery(ignore_drafts, delta=0.05, problems=2).statement
    'detects any output law at TV >= 0.05 from p with probability >= 0.999 (...'
    """
    v = as_verifier(verifier)
    n_problems = as_int_in_range(problems, "problems")
    if method not in ("auto", "exact", "sampling"):
        raise InvalidOptionError(f"method must be 'auto', 'exact' or 'sampling' (got {method!r}); pick one")
    cat = battery_problems(v, seed=seed)
    if not cat:
        raise InvalidOptionError(
            f"verifier {v.name!r} applies to none of the battery's draft laws (kinds / k); widen its kinds= / k= or use otspec.testing.audit"
        )
    exact = method == "exact" or (method == "auto" and not isinstance(v, SamplerVerifier))
    spec = object_spec(verifier) or object_spec(v)
    if exact:
        chosen, a_each = cat, alpha
    else:
        wide = [pr for pr in cat if pr.V >= 3] or cat  # binary problems hide most sampler bugs
        chosen = sorted(wide, key=lambda pr: (-pr.V, pr.size()))[:n_problems]
        a_each = alpha / len(chosen)
    largest, draws = 0.0, 0
    for i, pr in enumerate(chosen):
        holder: dict = {}

        def check(c: AuditProblem, i=i, holder=holder):
            p, law = c.build()
            holder["r"] = assert_output_law(
                v,
                p,
                law,
                delta=delta,
                alpha=a_each,
                beta=beta,
                method="exact" if exact else "sampling",
                rng=np.random.default_rng([seed, i]),
                max_draws=max_draws,
            )

        err = run_check(lambda pr=pr, check=check: check(pr))
        if err is not None:
            small = pr
            if exact:  # shrinking re-runs the check: cheap when exact, a fresh sample otherwise
                small, err = shrink(pr, lambda c, check=check: run_check(lambda: check(c)), err)
            call = (
                f"assert_output_law(verifier, p, law, delta={delta!r}, alpha={a_each!r}, beta={beta!r}, "
                f"method={'exact' if exact else 'sampling'!r}, rng=np.random.default_rng([{seed}, {i}]))"
            )
            snippet = replay_snippet("output_law", v.name, spec, seed, small.code(), call, "")
            snippet = snippet.replace(
                "from otspec.testing import as_verifier, load_object",
                "from otspec.testing import as_verifier, load_object\nfrom otspec.testing.power import assert_output_law",
            )
            raise VerifierAssertionError(
                f"{err}\ncounterexample:\n{small.code()}\nreplay:\n{snippet}", {**getattr(err, "details", {}), "problem": small.code()}
            ) from None
        r = holder["r"]
        largest = max(largest, r.tv)
        draws = r.n
    if exact:
        statement = power_statement(delta, alpha, beta) + f" on {len(chosen)} problems"
    else:
        n = sample_size(delta, alpha=a_each, beta=beta, V=max(pr.V for pr in chosen))
        statement = (
            power_statement(delta, alpha, beta, n).replace(f"({n} draws;", f"(up to {n} draws on each of {len(chosen)} problems;")
            if len(chosen) > 1
            else power_statement(delta, alpha, beta, n)
        )
    return BatteryCheck(v.name, "exact" if exact else "sampling", len(chosen), draws, largest, statement)

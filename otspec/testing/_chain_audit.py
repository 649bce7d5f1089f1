"""The audit of a chain (block) verifier: stream losslessness, the block optimum, the ratio."""

from __future__ import annotations

from otspec.testing._problems import ChainProblem, weight_pairs
from otspec.testing._runner import guarded, replay_snippet, run_check, shrink
from otspec.testing.chain_asserts import check_chain_lossless
from otspec.testing.chain_forms import ChainVerifier
from otspec.testing.results import Counterexample, PropertyResult

__all__ = ["audit_chain"]


def audit_chain(v: ChainVerifier, rng, seed, n_problems, atol, spec) -> list:
    """The chain rows of the audit table (kernel, lossless, optimum, ratio, sampler, bad_inputs).

    Parameters
    ----------
    v : ChainVerifier
        The verifier.
    rng : numpy.random.Generator
        Draws the problems.
    seed : int
        Seed named in the snippets.
    n_problems : int
        How many problems of the catalogue to check.
    atol : float
        Tolerance of the exact checks.
    spec : str or None
        ``MODULE:OBJECT`` the snippets import the verifier from.

    Returns
    -------
    list of PropertyResult
        One row per property, in table order.
    """
    chosen = _chain_problems(rng, n_problems)

    def chain_snippet(prop, pr, call, imports):
        return replay_snippet(prop, v.name, spec, seed, "from otspec import models\n" + pr.code(), call, imports)

    out = [PropertyResult("kernel", "info", "checked with lossless (each path's law of (tau, Y) must sum to 1)")]
    out.append(_chain_lossless(v, chosen, atol, chain_snippet) if v.lossless else PropertyResult("lossless", "skip", "declared lossy"))
    optimum, ratios = _chain_optimum(v, chosen, atol, chain_snippet)
    out.append(optimum if v.lossless else PropertyResult("optimum", "skip", "declared lossy"))
    out.append(
        PropertyResult("ratio", "info", f"E[tau] / optimum >= {min(ratios):.4f} over {len(ratios)} model pairs", len(ratios))
        if ratios
        else PropertyResult("ratio", "skip", "no model pair with a positive optimum")
    )
    out.append(PropertyResult("sampler", "skip", "chain verifiers are audited through their exact per-path law"))
    out.append(PropertyResult("bad_inputs", "skip", "not defined for chain-verifier functions"))
    return out


def _chain_problems(rng, n_problems: int) -> list:
    """Context-free pairs of the weight catalogue (V <= 3) and Dirichlet models, a random subset,
    smallest first."""
    probs = []
    for pw, qw in weight_pairs(rng, 12):
        if len(pw) > 3:
            continue
        for g in (1, 2, 3):
            probs.append(ChainProblem(pw, qw, g))
    for _ in range(4):
        for g in (2, 3):
            probs.append(ChainProblem(gamma=g, dirichlet=(int(rng.integers(2, 4)), int(rng.integers(0, 10_000)), 0.3)))
    probs = [pr for pr in dict.fromkeys(probs) if pr.valid()]
    order = rng.permutation(len(probs))[:n_problems]
    return sorted((probs[i] for i in order), key=lambda pr: pr.size())


def _chain_lossless(v: ChainVerifier, chosen: list, atol: float, chain_snippet) -> PropertyResult:
    def check(c):
        return run_check(lambda: check_chain_lossless(v, *c.models(), c.gamma, atol=atol))

    for n, pr in enumerate(chosen, 1):
        err = check(pr)
        if err is not None:
            small, err = shrink(pr, check, err, 80, remember=False)
            call = f"assert_chain_lossless(verifier, p_model, q_model, gamma, atol={atol!r})"
            snip = chain_snippet("lossless", small, call, "assert_chain_lossless")
            return PropertyResult("lossless", "fail", str(err).splitlines()[0], n, Counterexample(small.code(), str(err), snip))
    return PropertyResult(
        "lossless", "pass", f"decoded stream has the target law (exact, atol {atol:g}) on {len(chosen)} model pairs", len(chosen)
    )


def _chain_optimum(v: ChainVerifier, chosen: list, atol: float, chain_snippet) -> tuple[PropertyResult, list]:
    """The optimum row (E[tau] <= block optimum, judged for lossless claims) and the ratios."""
    import otspec

    ratios, fail = [], None
    for n, pr in enumerate(chosen, 1):
        pm, qm = pr.models()
        try:
            e = guarded(lambda pm=pm, qm=qm, pr=pr: v.expected_accepted(pm, qm, pr.gamma))
            opt = float(otspec.block_optimum(pm, qm, pr.gamma).value)
        except Exception:  # noqa: BLE001 - the lossless row reports the verifier's failures
            continue
        if v.lossless and e > opt + atol and fail is None:
            msg = f"E[tau] = {e:.6g} above the optimum {opt:.6g} of any lossless chain verifier (gamma = {pr.gamma})"
            call = "assert_chain_within_optimum(verifier, p_model, q_model, gamma)"
            fail = PropertyResult(
                "optimum", "fail", msg, n, Counterexample(pr.code(), msg, chain_snippet("optimum", pr, call, "assert_chain_within_optimum"))
            )
        if opt > 0:
            ratios.append(e / opt)
    return fail or PropertyResult("optimum", "pass", f"E[tau] <= block optimum on {len(chosen)} model pairs", len(chosen)), ratios

"""The audit's bad-input property: invalid targets, drafts, laws and generators must raise."""

from __future__ import annotations

import numpy as np

from otspec.testing._code import law_code
from otspec.testing._problems import normalized
from otspec.testing._runner import guarded, replay_snippet
from otspec.testing.results import Counterexample, PropertyResult

__all__ = ["bad_inputs_property"]


# long-function: a table of bad-input cases, one per line
def bad_inputs_property(v, probs, spec, seed) -> PropertyResult:
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
                otspec.iid(normalized(base.qs[0] if base.qs else (1,) * V), 2),
                otspec.explicit([[0] * law.k], [1.0], vocab_size=V),
                otspec.product([normalized((1,) * V)] * 2),
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
            got = guarded(call)
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
    snippet = replay_snippet("bad_inputs", v.name, spec, seed, setup, call, "")
    return PropertyResult("bad_inputs", "fail", message, len(cases), Counterexample(setup, message, snippet))


def _safe_applies(v, law) -> bool:
    try:
        return bool(v.applies_to(law))
    except Exception:
        return True

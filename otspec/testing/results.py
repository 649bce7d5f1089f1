"""What :func:`otspec.testing.audit` returns: one verdict per property, with counterexamples."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["AuditReport", "Counterexample", "PropertyResult"]


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

    def _repr_html_(self) -> str:
        """The report as an HTML table, one row per property (Jupyter shows it in place of the ``repr``)."""
        from otspec._display import html_table

        rows = [(r.name, r.verdict, r.checked, r.summary) for r in self.properties]
        claim = "lossless" if self.lossless_claim else "approximate"
        verdict = "ok" if self.ok else "FAILED"
        caption = f"audit of {self.verifier} ({self.form}, claims {claim}, seed {self.seed}): {verdict}"
        notes = [f"{r.name}: smallest counterexample {r.counterexample.problem}" for r in self.properties if r.counterexample is not None]
        return html_table(("property", "verdict", "checked", "summary"), rows, caption=caption, notes=notes)

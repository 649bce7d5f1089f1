r"""The summary of a corpus run: per domain and overall, with document-clustered intervals.

For every quantity column (an optimum, a verifier's acceptance, ``one_minus_tv``; for logged traces
each ``_lo`` and ``_hi`` end) the summary holds the mean over positions with a cluster bootstrap
interval over documents (:func:`otspec.stats.clustered_mean`), and for every verifier its share of
the optimum of the same law and k (:func:`otspec.stats.clustered_ratio`: the ratio of means, the
denominator's variance included) and its shortfall from it (:func:`otspec.stats.clustered_difference`,
paired by position). Renderings: a rich table, JSON, markdown, and a plot of the
optima and the verifiers against k.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec.plugin import require
from otspec.stats import DEFAULT_RESAMPLES, clustered_difference, clustered_mean, clustered_ratio

__all__ = ["CorpusSummary", "SummaryRow", "summarize", "plot_summary", "OVERALL"]

OVERALL = "all"
_VER = re.compile(r"^(?P<v>[a-z_]+?)_(?P<law>iid|wor|greedy)_k(?P<k>\d+)$")
_OPT = re.compile(r"^opt_(?P<law>iid|wor|greedy)_k(?P<k>\d+)(?P<end>_lo|_hi)?$")


@dataclass(frozen=True)
class SummaryRow:
    """One quantity in one domain.

    Attributes
    ----------
    domain : str
        A domain, or ``"all"``.
    quantity : str
        The column (``opt_iid_k4``), ``"<verifier column>/<optimum column>"`` for a verifier's share
        of the optimum, or ``"<optimum column>-<verifier column>"`` for its shortfall (paired).
    value, low, high : float
        Mean (or ratio) and its interval.
    n, n_docs : int
        Positions and documents.
    """

    domain: str
    quantity: str
    value: float
    low: float
    high: float
    n: int
    n_docs: int


@dataclass(frozen=True)
class CorpusSummary:
    """Every :class:`SummaryRow` of a run, with the interval's confidence.

    Attributes
    ----------
    rows : tuple of SummaryRow
        Domain-major, then quantity order.
    confidence : float
        Confidence of the intervals.
    """

    rows: tuple
    confidence: float

    def domains(self) -> list[str]:
        """Domains in order (``"all"`` last).

        Returns
        -------
        list of str
            Domain names.
        """
        return list(dict.fromkeys(r.domain for r in self.rows))

    def get(self, domain: str, quantity: str) -> SummaryRow:
        """The row of ``quantity`` in ``domain``.

        Parameters
        ----------
        domain, quantity : str
            Keys.

        Returns
        -------
        SummaryRow
            The row.

        Raises
        ------
        KeyError
            If there is no such row.
        """
        for r in self.rows:
            if r.domain == domain and r.quantity == quantity:
                return r
        raise KeyError((domain, quantity))

    def to_json(self) -> dict:
        """A JSON-ready dict: ``{"confidence": ..., "domains": {domain: {quantity: {...}}}}``.

        Returns
        -------
        dict
            The summary.
        """
        out: dict = {"confidence": self.confidence, "domains": {}}
        for r in self.rows:
            out["domains"].setdefault(r.domain, {})[r.quantity] = dict(value=r.value, low=r.low, high=r.high, n=r.n, n_docs=r.n_docs)
        return out

    def table(self, domain: str) -> tuple[list[str], list[list[str]]]:
        """Columns and formatted rows of one domain.

        Parameters
        ----------
        domain : str
            The domain.

        Returns
        -------
        columns : list of str
            Header.
        rows : list of list of str
            One per quantity.
        """
        pct = int(round(100 * self.confidence))
        cols = ["quantity", "mean", f"{pct}% interval", "positions", "documents"]
        rows = []
        for r in self.rows:
            if r.domain == domain:
                iv = "-" if np.isnan(r.low) else f"[{r.low:.4f}, {r.high:.4f}]"
                rows.append([r.quantity, f"{r.value:.4f}", iv, str(r.n), str(r.n_docs)])
        return cols, rows

    def to_markdown(self) -> str:
        """Markdown tables, one per domain.

        Returns
        -------
        str
            The tables.
        """
        parts = []
        for d in self.domains():
            cols, rows = self.table(d)
            parts.append(f"### {d}\n\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
            parts[-1] += "".join("\n| " + " | ".join(r) + " |" for r in rows)
        return "\n\n".join(parts) + "\n"


def _quantities(names: list[str]) -> list[str]:
    skip = ("doc", "domain", "doc_index", "position", "token")
    return [
        c
        for c in names
        if c not in skip and not c.endswith("_err") and not (not c.startswith("opt_") and c[-3:] in ("_lo", "_hi") and _VER.match(c[:-3]))
    ]


def summarize(
    table: Any, *, confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, domains: bool = True
) -> CorpusSummary:
    """Means and shares of the optimum, per domain and overall, with document-clustered intervals.

    Parameters
    ----------
    table : pyarrow.Table or dict of str to array_like
        The run's rows (:func:`~otspec_gpu.corpus.shards.read_results`).
    confidence : float
        Interval confidence.
    n_resamples : int
        Bootstrap resamples.
    seed : int
        Bootstrap seed.
    domains : bool
        Also summarize each domain (else only ``"all"``).

    Returns
    -------
    CorpusSummary
        The rows.
    """
    cols = {k: np.asarray(v) for k, v in (table.to_pydict().items() if hasattr(table, "to_pydict") else table.items())}
    names = _quantities(list(cols))
    groups = [OVERALL]
    if domains:
        doms = list(dict.fromkeys(cols["domain"].tolist()))
        groups = (doms + [OVERALL]) if len(doms) > 1 else [OVERALL]
    rows = []
    kw = dict(confidence=confidence, n_resamples=n_resamples, seed=seed)
    for g in groups:
        m = np.ones(cols["doc"].size, dtype=bool) if g == OVERALL else cols["domain"] == g
        docs = cols["doc"][m]
        nd = int(np.unique(docs).size)
        for c in names:
            y = cols[c][m].astype(np.float64)
            ok = np.isfinite(y)
            if not ok.any():
                continue
            e = clustered_mean(y[ok], docs[ok], **kw)
            rows.append(SummaryRow(g, c, e.value, e.low, e.high, e.n, nd))
        for c in names:
            mv = _VER.match(c)
            if not mv or c.startswith("opt_"):
                continue
            opt = f"opt_{mv['law']}_k{mv['k']}"
            if opt not in cols:
                continue
            a, b = cols[c][m].astype(np.float64), cols[opt][m].astype(np.float64)
            ok = np.isfinite(a) & np.isfinite(b)
            if not ok.any() or b[ok].sum() == 0:
                continue
            e = clustered_ratio(a[ok], b[ok], docs[ok], **kw)
            rows.append(SummaryRow(g, f"{c}/{opt}", e.value, e.low, e.high, e.n, nd))
            e = clustered_difference(b[ok], a[ok], docs[ok], **kw)
            rows.append(SummaryRow(g, f"{opt}-{c}", e.value, e.low, e.high, e.n, nd))
    return CorpusSummary(tuple(rows), float(confidence))


def _series(summary: CorpusSummary, domain: str) -> tuple[dict, dict, dict]:
    """The curves of one domain: label -> [(k, row)], the k = 1 rows by end, and each label's end."""
    series: dict[str, list] = {}
    base: dict[str, SummaryRow] = {}  # k = 1 (one draft): 1 - TV, or its certified ends
    ends: dict[str, str] = {}
    for r in summary.rows:
        if r.domain != domain:
            continue
        if r.quantity.startswith("one_minus_tv"):
            base[r.quantity[len("one_minus_tv") :]] = r
            continue
        mo, mv = _OPT.match(r.quantity), _VER.match(r.quantity)
        if mo:
            label = f"optimum {mo['law']}{(mo['end'] or '').replace('_', ' ')}"
            ends[label] = mo["end"] or ""
            series.setdefault(label, []).append((int(mo["k"]), r))
        elif mv and "/" not in r.quantity:
            label = f"{mv['v']} ({mv['law']})"
            ends[label] = ""
            series.setdefault(label, []).append((int(mv["k"]), r))
    return series, base, ends


def _panel(ax: Any, summary: CorpusSummary, domain: str) -> None:
    series, base, ends = _series(summary, domain)
    for label, pts in series.items():
        if ends[label] in base:
            pts = [(1, base[ends[label]])] + pts
        pts.sort(key=lambda t: t[0])
        ks = [k for k, _ in pts]
        v = np.array([r.value for _, r in pts])
        lo = np.array([r.low for _, r in pts])
        hi = np.array([r.high for _, r in pts])
        style = "-o" if label.startswith("optimum") else "--s"
        ax.errorbar(ks, v, yerr=[np.nan_to_num(v - lo), np.nan_to_num(hi - v)], fmt=style, capsize=3, label=label, markersize=4)
    ax.set_xscale("log", base=2)
    ticks = sorted({k for pts in series.values() for k, _ in pts} | ({1} if base else set()))
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.minorticks_off()
    ax.set_xlabel("drafts k")
    n_docs = next((r.n_docs for r in summary.rows if r.domain == domain), 0)
    ax.set_title(f"{domain} ({n_docs} documents)", fontsize=9)
    ax.grid(alpha=0.3)


def plot_summary(summary: CorpusSummary, path: Any, *, domains: Any = None) -> Any:
    """Optima and verifiers' acceptance against k (k = 1: ``one_minus_tv``), with their intervals;
    one panel per domain, the overall one last.

    Parameters
    ----------
    summary : CorpusSummary
        A summary.
    path : str or Path
        PNG (or any matplotlib format) to write.
    domains : sequence of str, optional
        Which domains to draw (default: every domain and ``"all"``).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ImportError
        If matplotlib is missing (``pip install "otspec[plots]"``).
    """
    from pathlib import Path

    require("matplotlib", "plots", needed_by="the plot").use("Agg")
    import matplotlib.pyplot as plt

    names = list(domains) if domains is not None else summary.domains()
    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names) + 0.8, 4.2), sharey=True, squeeze=False)
    for ax, d in zip(axes[0], names, strict=True):
        _panel(ax, summary, d)
    axes[0][0].set_ylabel("acceptance (mean over positions)")
    axes[0][-1].legend(fontsize=7)
    pct = int(round(100 * summary.confidence))
    fig.suptitle(f"optimum and verifiers vs k ({pct}% document-clustered intervals)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)

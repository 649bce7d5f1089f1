"""Result objects display as HTML tables in Jupyter (``_repr_html_``), and the tables say what the
objects hold: each test parses the HTML back into rows of cell texts and compares them with the
object's fields."""

from html.parser import HTMLParser

import numpy as np
import pytest

import otspec
from otspec import models
from otspec._display import cell, fields_table, html_table
from otspec.plot import calibration_bins
from otspec.report import ComparisonTable, block_report, compare
from otspec.testing.results import AuditReport, Counterexample, PropertyResult


class _Table(HTMLParser):
    """Caption, rows of cell texts (header first) and the paragraphs after the table."""

    def __init__(self, text):
        super().__init__()
        self.caption, self.rows, self.notes, self._buf, self._in = "", [], [], None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th", "caption", "p"):
            self._in, self._buf = tag, ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[-1].append(self._buf)
        elif tag == "caption":
            self.caption = self._buf
        elif tag == "p":
            self.notes.append(self._buf)
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self._buf += data


P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


def test_cells_are_formatted_by_type():
    assert [cell(None), cell(True), cell(False), cell(np.int64(7)), cell("x")] == ["-", "yes", "no", "7", "x"]
    assert cell(1 / 3) == "0.33333333" and cell(np.float64(2.5)) == "2.5"
    assert [cell(float("nan")), cell(float("inf"))] == ["nan", "inf"]


def test_html_table_escapes_every_text():
    text = html_table(("a<b", "c"), [("<script>", "x & y")], caption="<i>", notes=["1 < 2"])
    assert "<script>" not in text and "<i>" not in text
    t = _Table(text)
    assert t.caption == "<i>"
    assert t.rows == [["a<b", "c"], ["<script>", "x & y"]]
    assert t.notes == ["1 < 2"]
    assert _Table(fields_table("T", [("v", 1)])).rows == [["field", "value"], ["v", "1"]]


def test_acceptance_result_shows_its_certificate():
    r = otspec.optimal_acceptance(P, otspec.iid(Q, 2))
    t = _Table(r._repr_html_())
    fields = dict(t.rows[1:])
    assert t.caption == "AcceptanceResult"
    assert fields["value"] == f"{r.value:.12g}"
    assert fields["status"] == r.status and fields["method"] == r.method
    assert fields["cut"] == str(r.cut.tolist())
    assert fields["error bound"] == f"{r.error_bound:.2e}"
    assert fields["law"] == r.law


def test_compare_returns_a_list_that_displays_as_a_table():
    rows = compare(P, otspec.iid(Q, 2))
    assert isinstance(rows, ComparisonTable) and isinstance(rows, list)
    assert repr(rows) == repr(list(rows)) and rows == list(rows)
    t = _Table(rows._repr_html_())
    assert t.rows[0][:2] == ["verifier", "acceptance"]
    assert [r[0] for r in t.rows[1:]] == [r.name for r in rows]
    assert [r[1] for r in t.rows[1:]] == [cell(r.acceptance) for r in rows]
    assert [r[3] for r in t.rows[1:]] == ["exact" if r.how in ("closed_form", "kernel") else "-" for r in rows]
    # without replacement at V = 300: some verifiers need Monte Carlo, some cannot enumerate the law
    p, q = otspec.synthetic.synthetic_pair(300, seed=0)
    mc = compare(p, otspec.without_replacement(q, 3), n_samples=200)
    t = _Table(mc._repr_html_())
    hows = {r.how for r in mc}
    assert {"monte_carlo", "unavailable"} <= hows
    for shown, r in zip(t.rows[1:], mc, strict=True):
        if r.how == "monte_carlo":
            assert shown[3] == f"[{r.ci_low:.6g}, {r.ci_high:.6g}]"
        elif r.how == "unavailable":
            assert shown[3] == "-" and shown[1] == "nan"
    assert t.notes == [f"{r.name}: {r.reason}" for r in mc if r.reason]


def test_block_report_and_block_optimum_tables():
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    rep = block_report(p, q, 2, lp="no")
    t = _Table(rep._repr_html_())
    assert len(t.rows) == 1 + len(rep.rows)
    assert [r[2] for r in t.rows[1:]] == [cell(r["expected_accepted"]) for r in rep.rows]
    assert t.notes == [f"skipped: {s}" for s in rep.skipped]
    opt = otspec.block_optimum(p, q, 2)
    fields = dict(_Table(opt._repr_html_()).rows[1:])
    assert fields["E[tau] (value)"] == f"{opt.value:.12g}" and fields["gamma"] == "2"


def test_audit_report_table_lists_properties_and_counterexamples():
    cex = Counterexample(problem="p = [1.0]; law = iid([1.0], 1)", message="m", snippet="s")
    rep = AuditReport(
        "mine",
        "conditional law",
        True,
        None,
        3,
        (PropertyResult("lossless", "fail", "TV 0.1", 4, cex), PropertyResult("kernel", "pass", "ok", 4)),
    )
    t = _Table(rep._repr_html_())
    assert "FAILED" in t.caption and "mine" in t.caption
    assert t.rows[1:] == [["lossless", "fail", "4", "TV 0.1"], ["kernel", "pass", "4", "ok"]]
    assert t.notes == ["lossless: smallest counterexample p = [1.0]; law = iid([1.0], 1)"]


def test_calibration_bins_table_has_a_row_per_bin():
    rng = np.random.default_rng(0)
    expected = rng.uniform(size=400)
    realized = (rng.uniform(size=400) < expected).astype(float)
    bins = calibration_bins(expected, realized, n_bins=5)
    t = _Table(bins._repr_html_())
    assert len(t.rows) == 1 + bins.count.size
    assert [int(r[1]) for r in t.rows[1:]] == bins.count.tolist()
    assert [float(r[3]) for r in t.rows[1:]] == pytest.approx(bins.mean_realized, rel=1e-3)


def test_decode_report_table_is_its_text_table():
    from otspec import trace_report as report  # numpy only: runs without torch

    agree = report.Agreement("acceptance", 0.8, 0.79, 0.01, -0.02, 0.04, 100)
    config = {"verifier": "token", "mode": "chain", "drafts": 1, "gamma": 4}
    rep = report.Report(config, 100, 50, 320, 0.31, 3.2, 12.5, 0.05, {"verify": 0.1}, (agree,), {"exp_block": 2.3}, 0.9, "mean")
    t = _Table(rep._repr_html_())
    assert t.caption == "decode report"
    assert [tuple(r) for r in t.rows[1:]] == rep.table()

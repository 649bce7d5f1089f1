"""otspec.plot: the numeric helpers against hand-derived values, the plots on the Agg backend."""

import math

import numpy as np
import pytest

from otspec import plot
from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from otspec.errors import OtspecInputError, ShapeMismatchError
from tests._tolerances import FLOAT64_ULPS_ATOL

mpl = pytest.importorskip("matplotlib", reason="install the [plots] extra")
mpl.use("Agg")


def test_kseq_guarantee_values():
    # 1 - (1 - 1/k)^k by hand: k=1 -> 1, k=2 -> 3/4, k=3 -> 19/27; the limit is 1 - 1/e
    np.testing.assert_allclose(plot.kseq_guarantee([1, 2, 3]), [1.0, 0.75, 19 / 27], rtol=0, atol=FLOAT64_ULPS_ATOL)
    assert plot.kseq_guarantee(10**6) > plot.ONE_MINUS_INV_E
    # (1 - 1/k)^k = e^{-1} (1 - 1/(2k) - O(k^-2)): the gap to the limit is 1/(2ek) to first order
    assert abs(float(plot.kseq_guarantee(10**6)) - plot.ONE_MINUS_INV_E) < 1.0 / (2 * math.e * 10**6) + EXACT_ATOL
    with pytest.raises(OtspecInputError):
        plot.kseq_guarantee(0)


def test_calibration_bins_by_hand():
    e = [0.1, 0.2, 0.3, 0.7, 0.8, 0.9]
    y = [0, 0, 1, 1, 1, 0]
    b = plot.calibration_bins(e, y, n_bins=2)
    assert b.binary and b.count.tolist() == [3, 3]
    np.testing.assert_allclose(b.mean_expected, [0.2, 0.8], atol=FLOAT64_ULPS_ATOL)
    np.testing.assert_allclose(b.mean_realized, [1 / 3, 2 / 3], atol=FLOAT64_ULPS_ATOL)
    # Wilson 95% interval for 1 success in 3, computed from its formula independently
    z, n, ph = 1.959963984540054, 3, 1 / 3
    c = (ph + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert abs(b.ci_low[0] - (c - h)) < FLOAT64_ATOL and abs(b.ci_high[0] - (c + h)) < FLOAT64_ATOL
    # binary outcomes: z = sum(y - e) / sqrt(sum e (1 - e)) = (3 - 3.0) / ... = 0 here
    assert abs(b.z_overall) < FLOAT64_ATOL
    b2 = plot.calibration_bins([0.5, 0.5, 0.5, 0.5], [1, 1, 1, 0], n_bins=1)
    assert abs(b2.z_overall - 1.0 / math.sqrt(4 * 0.25)) < FLOAT64_ATOL  # (3 - 2) / sqrt(1)
    b3 = plot.calibration_bins([0.9] * 10, [1] * 10, n_bins=1)  # every outcome 1: still finite
    assert abs(b3.z_overall - 1.0 / math.sqrt(10 * 0.09)) < FLOAT64_ATOL


def test_calibration_bins_counts_use_normal_interval():
    b = plot.calibration_bins([1.0, 1.0, 2.0, 2.0], [0.5, 1.5, 2.0, 3.0], n_bins=2, strategy="uniform")
    assert not b.binary
    half = 1.959963984540054 * np.std([0.5, 1.5], ddof=1) / math.sqrt(2)
    assert abs(b.ci_low[0] - (1.0 - half)) < FLOAT64_ATOL and abs(b.ci_high[0] - (1.0 + half)) < FLOAT64_ATOL
    d = np.array([0.5, 1.5, 2.0, 3.0]) - np.array([1.0, 1.0, 2.0, 2.0])  # counts: sample-deviation z
    assert abs(b.z_overall - d.mean() / (d.std(ddof=1) / math.sqrt(4))) < FLOAT64_ATOL


def test_calibration_detects_a_biased_sampler():
    # N = 20000 Bernoulli draws: calibrated ones give |z| small; draws at e**1.5 give a large z.
    # Under calibration z ~ N(0, 1): P(|z| > 4) ~ 6e-5 (the false-alarm rate of this check).
    rng = np.random.default_rng(1)
    e = rng.uniform(0.05, 0.95, size=20_000)
    good = (rng.uniform(size=e.size) < e).astype(float)
    bad = (rng.uniform(size=e.size) < e**1.5).astype(float)
    assert abs(plot.calibration_bins(e, good).z_overall) < 4
    assert plot.calibration_bins(e, bad).z_overall < -10


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(expected=[0.1, 0.2], realized=[0.0]),
        dict(expected=[0.1, np.nan], realized=[0.0, 1.0]),
        dict(expected=[0.1, 0.2], realized=[0.0, 1.0], n_bins=3),
        dict(expected=[0.1, 0.2], realized=[0.0, 1.0], strategy="log"),
        dict(expected=[0.1, 0.2], realized=[0.0, 1.0], confidence=0.5),
        dict(expected=[], realized=[]),
    ],
)
def test_calibration_bins_bad_input(kwargs):
    with pytest.raises(OtspecInputError):
        plot.calibration_bins(**kwargs)


def test_plots_draw_on_agg(tmp_path):
    import matplotlib.pyplot as plt

    ks = [1, 2, 4]
    ax = plot.acceptance_vs_k(
        ks,
        {"kseq": [0.6, 0.7, 0.8]},
        optimum={"iid": [0.6, 0.75, 0.85], "wor": [0.6, 0.76, 0.86]},
        ci={"kseq": ([0.5, 0.6, 0.7], [0.7, 0.8, 0.9])},
    )
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "kseq" in labels and any("1-1/e" in s for s in labels)
    # the guarantee line is (1 - 1/e) times the first optimum
    guarantee = next(line for line in ax.get_lines() if "1-1/e" in line.get_label())
    np.testing.assert_allclose(guarantee.get_ydata(), plot.ONE_MINUS_INV_E * np.array([0.6, 0.75, 0.85]))
    ax.figure.savefig(tmp_path / "k.png")
    ax = plot.acceptance_vs_tv([0.3, 0.1, 0.2], {"iid k=2": [0.8, 0.95, 0.9]})
    ax = plot.verifier_gaps({"rrs": [0.05, 0.1], "kseq": [0.02, np.nan]}, groups=[2, 4], ci={"rrs": ([0.04, 0.09], [0.06, 0.11])}, ax=ax)
    rng = np.random.default_rng(0)
    e = rng.uniform(size=200)
    ax = plot.calibration(e, (rng.uniform(size=200) < e).astype(float), label="ok")
    plot.calibration(e, e + 0.01, ax=ax, label="counts")
    assert sum(getattr(line, "_otspec_diagonal", False) for line in ax.get_lines()) == 1
    plot.calibration([2.0, 3.0, 4.0], [2.0, 3.5, 4.0], n_bins=1, ax=ax, label="wider")
    diag = next(line for line in ax.get_lines() if getattr(line, "_otspec_diagonal", False))
    assert diag.get_xdata()[-1] >= 3.0  # stretched to the new series
    ax.figure.savefig(tmp_path / "c.png")
    assert (tmp_path / "k.png").stat().st_size > 0 and (tmp_path / "c.png").stat().st_size > 0
    plt.close("all")


def test_plot_shape_errors():
    with pytest.raises(ShapeMismatchError):
        plot.acceptance_vs_k([1, 2], {"x": [0.1, 0.2, 0.3]})
    with pytest.raises(OtspecInputError):
        plot.acceptance_vs_k([1, 2], {"x": [0.1, 0.2]}, optimum={"iid": [0.2, 0.3]}, e_line="wor")
    import matplotlib.pyplot as plt

    plt.close("all")


def test_missing_matplotlib_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # what the import system does for a missing package
    with pytest.raises(ImportError, match=r"otspec\.plot needs matplotlib\.pyplot, .*`pip install \"otspec\[plots\]\"`"):
        plot.acceptance_vs_k([1], {"x": [0.5]})


def test_tutorial_runs_and_its_numbers_hold(capsys):
    """The notebook-style tutorial (examples/) executes headless; its numbers obey the theory."""
    import runpy
    from pathlib import Path

    import matplotlib.pyplot as plt

    path = Path(__file__).resolve().parents[1] / "examples" / "tutorial_bounds_and_plots.py"
    ns = runpy.run_path(str(path), run_name="__tutorial__")
    opt = ns["optimum"]
    assert abs(opt["i.i.d."][0] - (1 - ns["tv"])) < FLOAT64_ATOL  # k = 1: 1 - TV
    assert all(w >= i - EXACT_ATOL for w, i in zip(opt["w/o repl."], opt["i.i.d."], strict=False))
    assert all(o >= a - EXACT_ATOL for o, a in zip(opt["i.i.d."], ns["kseq"], strict=False))
    np.testing.assert_allclose(ns["greedy"], opt["greedy"], atol=EXACT_ATOL)  # the greedy verifier is optimal for its law
    assert abs(ns["summary"].z_overall) < 4  # N = 4000 draws, false-alarm rate ~6e-5
    plt.close("all")


@pytest.mark.parametrize("n", [10, 13, 25, 3, 6, 7])
def test_wilson_interval_contains_all_or_nothing(n):
    """All-success / all-failure bins: the interval's end is exactly 1 / 0 (rounding once put it a
    few ulps inside, and plot.calibration's errorbar refused the negative error bar)."""
    ones = plot.calibration_bins(np.full(n, 0.9), np.ones(n), n_bins=1)
    zeros = plot.calibration_bins(np.full(n, 0.1), np.zeros(n), n_bins=1)
    assert ones.ci_high[0] == 1.0 and ones.ci_low[0] < 1.0
    assert zeros.ci_low[0] == 0.0 and zeros.ci_high[0] > 0.0
    import matplotlib.pyplot as plt

    plot.calibration(np.full(n, 0.9), np.ones(n), n_bins=1)  # draws without a negative error bar
    plt.close("all")

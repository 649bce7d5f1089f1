"""Run the tutorial notebook ``docs/notebook_tutorial.ipynb`` as a script, headless.

The notebook is the tutorial's one source (the documentation build executes it). This runner
executes its code cells in order, in this module's namespace, with matplotlib's Agg backend, so
``python examples/tutorial_bounds_and_plots.py`` (or ``runpy.run_path``, as tests/test_plot.py does
to check the tutorial's numbers) runs exactly what the documentation shows. It needs the ``plots``
extra (``pip install "otspec[plots]"``); to read or edit the tutorial, open the notebook.
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: plt.show() is a no-op

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebook_tutorial.ipynb"

for _i, _cell in enumerate(json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]):
    if _cell["cell_type"] == "code":
        exec(compile("".join(_cell["source"]), f"{NOTEBOOK.name}, cell {_i}", "exec"))

"""Sphinx configuration for the otspec documentation (built with -W in the test suite).

Everything renders offline: the theme (pydata-sphinx-theme) ships its own assets, MathJax comes from
the ``sphinx-mathjax-offline`` package (copied into ``_static/mathjax``, no CDN), Markdown tables are
parsed locally by ``.. mdinclude::`` (docs/_ext/mdinclude.py), tables of committed results JSON are
built by ``.. jsontable::`` (docs/_ext/jsontable.py), and the tutorial and gallery notebooks are
executed by myst-nb at every build (so a broken example fails the build, and the test suite builds it).
"""

import os
import sys

sys.path.insert(0, os.path.abspath("_ext"))
sys.path.insert(0, os.path.abspath(".."))

project = "otspec"
author = "the otspec developers"
copyright = "2026, the otspec developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "myst_nb",
    "clihelp",
    "mdinclude",
    "jsontable",
]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_typehints = "none"
autodoc_member_order = "bysource"
nitpicky = False
# Pages are .rst and one notebook; the .md files beside them are tables that pages include.
source_suffix = {".rst": "restructuredtext", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_static/**", "tutorial/**", "**.ipynb_checkpoints", "jupyter_execute"]
suppress_warnings = ["toc.not_included", "ref.python"]

# The notebook runs at every build (a few seconds); an exception in a cell fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 120
nb_execution_raise_on_error = True
nb_merge_streams = True
myst_enable_extensions = ["dollarmath"]

html_theme = "pydata_sphinx_theme"
html_title = "otspec"
# Only the stylesheet folder is copied as static files (results and generated tables are read by
# the pages that include them).
html_static_path = ["_static/css"]
html_css_files = ["otspec.css"]
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"index": []}

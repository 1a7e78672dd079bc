"""Sphinx configuration for the pymc-dp documentation site.

Build (warnings are errors)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

or ``scripts/build_docs.sh``. The tutorials in ``tutorials/`` are jupytext-paired MyST notebooks,
executed at build time by MyST-NB with a cache (``docs/_build/.jupyter_cache``); each has a parameter
cell that keeps it small unless ``PYMC_DP_DOCS_SIZE=full`` is set.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The notebooks' kernels inherit the environment: they import pymc_dp from this source tree too.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
# A non-inline MPLBACKEND (e.g. Agg, set for the tests) would keep the notebooks' figures out of the pages.
os.environ.pop("MPLBACKEND", None)

import pymc_dp  # noqa: E402

project = "pymc-dp"
author = "pymc-dp developers"
copyright = "2026, pymc-dp developers"
version = release = pymc_dp.__version__

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
# images/*.md are tables written by the benchmarks (no title): linked from the pages as files, not built.
exclude_patterns = ["images/*.md", "_build", "jupyter_execute", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# MyST: $…$ maths, ::: fences, heading anchors for the pages' cross-links.
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# MyST-NB: notebooks execute at build time, outputs cached between builds (a changed cell re-runs its
# notebook). A cell that raises is reported as a warning with its traceback, which -W turns into a failed
# build (with --keep-going, after every notebook has been tried).
nb_execution_mode = "cache"
nb_execution_cache_path = os.path.join(os.path.dirname(__file__), "_build", ".jupyter_cache")
nb_execution_timeout = 600
nb_execution_raise_on_error = False
nb_execution_show_tb = True
nb_merge_streams = True

# API reference: autosummary stubs for the public names, rendered by numpydoc.
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "pymc_sphinx_theme"
html_title = "pymc-dp"
# The PyMC theme's defaults link PyMC's own accounts, donation page and analytics: none of them here.
html_theme_options = {
    "search_bar_text": "Search pymc-dp",
    "navbar_end": ["theme-switcher"],
    "secondary_sidebar_items": ["page-toc"],
    "google_analytics_id": "",
    "show_prev_next": True,
}
html_static_path: list[str] = []


def _init_signature(app, what, name, obj, options, signature, return_annotation):
    """Show a step method's ``__init__`` signature instead of ``(*args, **kwargs)``.

    PyMC's step methods define ``__new__(cls, *args, **kwargs)``, which autodoc prefers to
    ``__init__``; the parameters users pass are ``__init__``'s.
    """
    import inspect

    if what == "class" and signature == "(*args, **kwargs)" and "__init__" in vars(obj):
        init = inspect.signature(obj.__init__)
        # Drop self; no annotations, as for every other signature (autodoc_typehints = "none").
        params = [p.replace(annotation=inspect.Parameter.empty) for p in list(init.parameters.values())[1:]]
        return str(init.replace(parameters=params, return_annotation=inspect.Signature.empty)), return_annotation
    return None


def setup(app):
    app.connect("autodoc-process-signature", _init_signature)

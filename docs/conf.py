"""Sphinx configuration: MyST pages, numpydoc API reference, sphinx-gallery examples.

Build (warnings are errors, as in CI):

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import skslot

project = "skslot"
author = "skslot developers"
copyright = "2026, skslot developers"
release = version = skslot.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = [
    "_build",
    "examples",
    "results/*/summary.md",
    "results/*.md",
    "generated/*.examples",
]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

templates_path = ["_templates"]
autosummary_generate = True
autodoc_default_options = {"inherited-members": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
}

html_theme = "alabaster"
html_static_path: list[str] = []
html_theme_options = {"description": "SLOT-Align for scikit-learn and Flower"}

"""Sphinx configuration of the documentation site: ``python -m sphinx -W --keep-going -c docs . build/docs``.

The source directory is the repository root, so the pages in ``docs/``, the notebooks in ``notebooks/``
(executed at build time: their plots are drawn) and the source files the pages link to are read where
they are; ``include_patterns`` keeps everything else out.  The guide pages are Markdown (MyST), so the
tests run their ``python`` blocks as they run the README's; the API reference (``docs/api.rst``) is
rendered from the docstrings, which are reStructuredText with doctest examples.
"""

project = "dualbroadcast"
author = "the dualbroadcast authors"
root_doc = "docs/index"
include_patterns = ["docs/**", "notebooks/*.ipynb"]
exclude_patterns = ["docs/_extra/**"]
html_extra_path = ["_extra"]  # index.html at the site's root, which forwards to docs/index.html

extensions = ["myst_nb", "sphinx.ext.autodoc"]
default_role = "py:obj"  # `name` in a docstring links to that name's entry in the API reference
autodoc_member_order = "bysource"
myst_heading_anchors = 3  # #section-title links, as GitHub renders them
nb_execution_mode = "force"  # the notebooks are committed without outputs
nb_execution_raise_on_error = True
nb_execution_timeout = 600

html_theme = "furo"
html_title = "dualbroadcast"
html_show_copyright = False

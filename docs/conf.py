"""Sphinx configuration of the superfabric documentation (``make docs``).

Pages are Markdown, read by myst-parser. Cross-references are checked:
``nitpicky`` turns every unresolved reference into a warning, and
``tests/test_docs.py`` builds with ``-W`` so a warning fails the suite.
"""

project = "superfabric"
author = "the superfabric authors"
copyright = "2026, the superfabric authors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# docs/results/*.md are written by `make bench` and pulled into results.md
# with {include}; built on their own they would be orphan pages.
exclude_patterns = ["_build", "results/*.md"]

# Headings up to level 3 get anchors, so [text](page.md#anchor) links are
# checked like {ref} targets; a missing one is a warning.
myst_heading_anchors = 3
nitpicky = True

html_theme = "alabaster"
html_title = "superfabric"

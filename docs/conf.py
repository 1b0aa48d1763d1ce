"""Sphinx configuration of the airflow-provider-kerr documentation site (`make docs`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
# autodoc imports the provider, which imports Airflow: keep Airflow's files out of ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", str(ROOT / "docs" / "_build" / "airflow-home"))

from airflow_kerr import __version__  # noqa: E402

project = "airflow-provider-kerr"
author = "airflow-provider-kerr contributors"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "kerr_tables",  # docs/_ext: tables generated from the code (the replay's settings)
    "kerr_results",  # docs/_ext: {result}`figure <file.json:key>`, checked against benchmarks/results/
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "snippets/README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The reference is generated from the docstrings. Signatures carry the type hints; the class
# docstring and the __init__ docstring are joined, so the parameters written on either show.
autoclass_content = "both"
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": True}
# Docstrings are written for people reading the code: plain text with ``literals``. Cross-references
# into Airflow, confluent-kafka and pyspark are not resolved (no intersphinx: the build needs no network).
nitpicky = False

html_theme = "furo"
html_title = f"airflow-provider-kerr {release}"
html_static_path = ["_static"]

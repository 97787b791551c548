"""Sphinx configuration of shardgrid's manual (`make docs`; the test command builds it with every
warning an error, so a broken link, a missing page or a generated table that fails breaks CI)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "shardgrid"
author = "the shardgrid developers"
copyright = "2026, the shardgrid developers"  # noqa: A001 (Sphinx's own name for it)
extensions = ["myst_parser", "shardgrid_reference"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = "shardgrid"
html_static_path: list[str] = []
nitpicky = True

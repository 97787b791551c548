"""Test-wide settings.

Under CI (``CI`` set), hypothesis draws the same examples on every run, so a red build is always
reproducible and never a roll of the dice; local runs keep exploring new examples.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

"""Test-wide settings.

Under CI (``CI`` set), hypothesis draws the same examples on every run, so a red build is always
reproducible and never a roll of the dice; local runs keep exploring new examples.

No property test checks speed (speed lives in the benchmarks), and the suite runs beside member
processes and a JVM on two cores, where one example can stall for a second: hypothesis's
per-example deadline is off everywhere, so a stall is not reported as a failure.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

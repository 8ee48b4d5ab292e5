"""Shared test configuration: the hypothesis profiles.

- "dev" (the default): a quick run for the edit-test loop.
- "ci" (loaded when the environment has CI=true): the property tests at full
  strength; the stripping property test runs at least 2,000 examples.

`HYPOTHESIS_PROFILE=<name>` picks a profile explicitly.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_DATA,
)
settings.register_profile(
    "dev",
    max_examples=150,
    deadline=None,
    suppress_health_check=_SLOW_DATA,
)

settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)

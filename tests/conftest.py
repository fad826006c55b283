"""Shared pytest configuration: hypothesis profiles sized for a small shared machine.

Select a profile with ``HYPOTHESIS_PROFILE=<name>`` (default ``dev``): ``dev`` keeps every
property test fast; ``thorough`` runs many more examples for an occasional deeper check.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

"""Hypothesis settings shared by the stateful tests: short and fixed in the unit run, long
and random under ``tox -e soak`` (``GARM_SOAK_STEPS`` / ``GARM_SOAK_EXAMPLES``)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings


def soak_settings(steps: int, examples: int, *, shrink: bool = True) -> settings:
    """Settings for one stateful test; ``steps``/``examples`` are the unit-run defaults.

    ``shrink`` False skips shrinking in the unit run only (the soak always shrinks): for
    stories whose every step runs charm hooks, shrinking takes minutes.
    """
    soak = bool(os.environ.get("GARM_SOAK_STEPS"))
    return settings(
        max_examples=int(os.environ.get("GARM_SOAK_EXAMPLES", examples)),
        stateful_step_count=int(os.environ.get("GARM_SOAK_STEPS", steps)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=not soak,
        phases=tuple(Phase) if soak or shrink else (Phase.explicit, Phase.reuse, Phase.generate),
    )

"""What a runner of a scaleset going away is, as the drain judges it.

A force-removal GARM took is waited on until the runner is gone (``force_key``): while
its provider fails to delete the VM, GARM's worker wakes from its back-off and writes
``pending_delete`` back over the force (docs/reference/garm-api.md §8.1). Past
``FORCE_STUCK`` the operator is asked. Before a force may be sent, a delete GARM keeps
failing is waited on the same way (``delete_key``, ``STUCK_RUNNER``).
"""

from __future__ import annotations

from datetime import timedelta

from garm.models import Instance, ScaleSet

# GARM's delete retries reach their 5-minute cap within 10 minutes, each round undoing
# the force: three rounds show the provider still failing.
FORCE_STUCK = timedelta(minutes=15)
# How long a retired scaleset's runner may sit where the charm cannot move it before the
# operator is told: past GARM's bootstrap timeout (20 minutes, checked every 5), and
# GARM retries a failing delete at least every 5 minutes.
STUCK_RUNNER = timedelta(minutes=30)


def force_key(scaleset: ScaleSet, instance: Instance) -> str:
    """The wait for GARM to carry out the force-removal of ``instance``."""
    return f"force:{scaleset.name.lower()}:{instance.name}"


def delete_key(scaleset: ScaleSet, instance: Instance) -> str:
    """The wait for GARM to delete ``instance`` while no force may be sent yet."""
    return f"delete:{scaleset.name.lower()}:{instance.name}"


def failed(instance: Instance) -> bool:
    """A runner that will never take a job: its VM errored or the runner failed to start."""
    return instance.status == "error" or instance.runner_status == "failed"


def working(instance: Instance) -> bool:
    """A runner idle or running a job, by ``runner_status`` as the metrics tell it, not failed."""
    return instance.runner_status in ("idle", "active") and not failed(instance)

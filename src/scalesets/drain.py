"""What a runner of a scaleset going away is, as the drain judges it.

``failed`` and ``working`` read a runner as GARM reports it. A force-removal GARM took
is waited on until the runner is gone (``force_key``): GARM answers it 200 and marks the
runner ``pending_force_delete``, but while its provider fails to delete the VM, GARM's
instance worker sleeps its back-off holding the runner's lock and, when it wakes, tries
the plain delete it was about to and writes ``pending_delete`` back over the force
(docs/reference/garm-api.md §8.1). So the charm times the wait from the first force GARM
took, in the memory of refusals as every wait on GARM, and past ``FORCE_STUCK`` sends it
no more and asks the operator to act (``force_stuck``). Before a force may be sent (the
drain deadline not passed, or none), a runner GARM keeps failing to delete is waited on
the same way (``delete_key``), and put to the operator without a force (``delete_stuck``).
"""

from __future__ import annotations

from datetime import timedelta

from garm.models import Instance, ScaleSet

# How long the charm waits for GARM to carry out a force-removal it took. GARM's delete
# retries reach their 5-minute cap within 10 minutes of the first failure, and from then
# on its worker sleeps through every moment a force could be read: each round undoes the
# force. Three rounds (a force sent again after each, once the runner has sat 5 minutes
# in ``pending_delete``) show the provider still failing; more only cost writes.
FORCE_STUCK = timedelta(minutes=15)
# How long a runner of a retired scaleset may sit unchanged where the charm cannot move
# it before the operator is told: in a status GARM will not remove, past the drain
# deadline (GARM's own bootstrap timeout, 20 minutes checked every 5, has had its chance
# to move it); or in ``pending_delete`` before a force may be sent (the deadline not
# passed, or none set), where GARM deletes a runner in seconds and retries a failing
# delete at least every 5 minutes.
STUCK_RUNNER = timedelta(minutes=30)


def force_key(scaleset: ScaleSet, instance: Instance) -> str:
    """The wait for GARM to carry out the force-removal of ``instance``."""
    return f"force:{scaleset.name.lower()}:{instance.name}"


def force_stuck(scaleset: ScaleSet, instance: Instance) -> str:
    """What the operator reads of a force-removal GARM has not carried out in time."""
    return (
        f"GARM has not carried out the force-removal of runner {instance.name} of "
        f"{scaleset.name} in 15 minutes: its provider cannot delete the VM and GARM's own "
        "retries undo the force; fix the provider, or delete the VM (GARM then removes the "
        "runner)"
    )


def delete_key(scaleset: ScaleSet, instance: Instance) -> str:
    """The wait for GARM to delete ``instance`` while no force may be sent yet."""
    return f"delete:{scaleset.name.lower()}:{instance.name}"


def delete_stuck(scaleset: ScaleSet, instance: Instance) -> str:
    """What the operator reads of a runner GARM has not deleted in ``STUCK_RUNNER``."""
    return (
        f"GARM has not deleted runner {instance.name} of {scaleset.name} in 30 minutes: its "
        "provider cannot delete the VM (/var/log/garm/garm.log); it is force-removed only "
        "past drain-deadline-minutes"
    )


def failed(instance: Instance) -> bool:
    """A runner that will never take a job: its VM errored or the runner failed to start."""
    return instance.status == "error" or instance.runner_status == "failed"


def working(instance: Instance) -> bool:
    """A runner that serves: registered and waiting for a job, or running one.

    ``runner_status`` alone, as GARM's runners metric and the charm's tell it, so the
    status line and an alert on the metrics agree; a runner that also ``failed`` is not.
    """
    return instance.runner_status in ("idle", "active") and not failed(instance)

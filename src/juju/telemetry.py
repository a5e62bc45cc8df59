"""The cos-agent relation's side in Juju: this unit's databag for the collector on its machine.

What goes in it is ``observe.cos_agent``'s to say; this module finds the relations, the
Juju topology and the charm's files, and writes. Telemetry never fails a hook: what
cannot be built is logged and what was published before stays.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

import ops
from cosl import JujuTopology

from observe import cos_agent
from observe.token import LeaderGarm

logger = logging.getLogger(__name__)


def publish(charm: ops.CharmBase, root: Path, now: datetime, leader: LeaderGarm | None) -> None:
    """Tell the collector on this machine what to scrape, alert on and show.

    Every unit hands it the rules and dashboards under ``root``; the leader also the
    scrape jobs, with GARM's metrics token, renewed only when this pass reached GARM.
    """
    relations = charm.model.relations[cos_agent.RELATION]
    if not relations:
        return
    try:
        telemetry = cos_agent.load_telemetry(root, JujuTopology.from_charm(charm))
    except Exception as exc:  # telemetry never fails a hook
        logger.error("cos-agent data not built: %s", exc)
        return
    for relation in relations:
        try:
            cos_agent.publish(relation.data[charm.unit], telemetry, now, leader)
        except ops.ModelError as exc:
            logger.warning("cos-agent data not published on %s: %s", relation.id, exc)

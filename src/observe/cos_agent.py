"""The provider side of the ``cos_agent`` interface: what this unit tells its collector.

A collector subordinate (opentelemetry-collector, grafana-agent) reads one key of this
unit's databag, ``config``: JSON its ``CosAgentProviderUnitData`` model parses
(``charms.grafana_agent.v0.cos_agent`` LIBPATCH 26, the same in both collectors):
``metrics_alert_rules`` and ``log_alert_rules`` (rule groups, Juju topology labels added),
``dashboards`` (LZMA then base64), ``metrics_scrape_jobs`` (Prometheus ``scrape_configs``,
taken as they are) and ``log_slots`` (snaps only). A collector's leader forwards the rules
and dashboards of whichever unit it meets first, so every unit publishes them; the scrape
jobs only the leader, where GARM and the charm's metrics run.

GARM's metrics token (``token``) goes in the ``garm`` job's bearer credentials, as the
interface has no other way (no Juju secret is read for a scrape job). Who can read it
there, and for how long: docs/explanation/security.md, "The metrics token". Nothing here
logs it. GARM's logs reach the collector through ``/var/log/**/*log``, not this interface.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import MutableMapping
from datetime import datetime
from pathlib import Path
from typing import Any

from cosl import DashboardPath40UID, JujuTopology, LZMABase64
from cosl.rules import AlertRules, generic_alert_groups

from observe.endpoint import PORT as CHARM_METRICS_PORT
from observe.token import HeldToken, LeaderGarm, renewed

logger = logging.getLogger(__name__)

RELATION = "cos-agent"
KEY = "config"  # the one key the collectors read (CosAgentProviderUnitData.KEY)
# The held token's record (HeldToken.record), not the token: that is in the garm job.
TOKEN_KEY = "garm-metrics-token"  # noqa: S105 (a key name, not a secret)
GARM_JOB = "garm"
CHARM_JOB = "garm-charm"
METRICS_RULES_DIR = "src/prometheus_alert_rules"
LOGS_RULES_DIR = "src/loki_alert_rules"
DASHBOARDS_DIR = "src/grafana_dashboards"


# What every unit publishes alike, under their keys of ``config``: alert rules, dashboards.
Telemetry = dict[str, Any]


def scrape_jobs(
    api_port: int, token: str | None, https: bool = False, ca: str = ""
) -> list[dict[str, Any]]:
    """The leader's two scrape jobs: GARM's ``/metrics`` and the charm's own.

    Without a token GARM's job is still published: GARM answers 401, ``up`` reads 0.
    Over HTTPS GARM's certificate (it names ``127.0.0.1``) is checked against ``ca``, inline
    (``tls_config.ca``, since prometheus/common 0.43, grafana-agent 0.35): both collectors
    are confined snaps that cannot read the charm's file. With no CA, the collector's own
    trust store refuses GARM: the scrape fails visibly, never unchecked.
    """
    garm: dict[str, Any] = {
        "job_name": GARM_JOB,
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}],
    }
    if https:
        garm["scheme"] = "https"
        if ca:
            garm["tls_config"] = {"ca": ca}
    if token:
        garm["authorization"] = {"type": "Bearer", "credentials": token}
    charm = {
        "job_name": CHARM_JOB,
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [f"127.0.0.1:{CHARM_METRICS_PORT}"]}],
    }
    return [garm, charm]


def load_telemetry(charm_root: Path, topology: JujuTopology) -> Telemetry:
    """Rules and dashboards from the charm's files, as the collectors expect them.

    Rules get cosl's topology labels, and the generic HostDown/HostMetricsMissing rules
    are added, as the library's provider does.
    """
    metrics = AlertRules(query_type="promql", topology=topology)
    metrics.add_path(charm_root / METRICS_RULES_DIR)
    metrics.add(
        copy.deepcopy(generic_alert_groups.application_rules),
        group_name_prefix=topology.identifier,
    )
    logs = AlertRules(query_type="logql", topology=topology)
    logs.add_path(charm_root / LOGS_RULES_DIR)
    charm_name = topology.charm_name or topology.application
    return {
        "metrics_alert_rules": metrics.as_dict(),
        "log_alert_rules": logs.as_dict(),
        "dashboards": _dashboards(charm_root, charm_name),
    }


def _dashboards(charm_root: Path, charm_name: str) -> tuple[str, ...]:
    """Each dashboard with a uid stable per charm and file, and its charm tag."""
    encoded = []
    for path in sorted((charm_root / DASHBOARDS_DIR).glob("*.json")):
        dashboard = json.loads(path.read_text())
        relative = str(path.relative_to(charm_root))
        dashboard["uid"] = DashboardPath40UID.generate(charm_name, relative)
        tags = list(dashboard.get("tags") or [])
        if not any(str(tag).startswith("charm: ") for tag in tags):
            tags.append(f"charm: {charm_name}")
        dashboard["tags"] = tags
        encoded.append(LZMABase64.compress(json.dumps(dashboard)))
    return tuple(encoded)


def publish(
    databag: MutableMapping[str, str],
    telemetry: Telemetry,
    now: datetime,
    leader: LeaderGarm | None,
) -> None:
    """Bring this unit's cos-agent databag up to date; ``leader`` None on non-leaders.

    The token held is the one last published in the ``garm`` job, renewed when due
    (``token.renewed``). A non-leader drops the scrape jobs and any token.
    """
    held = None
    jobs: list[dict[str, Any]] = []
    if leader is not None:
        published = HeldToken.from_record(_published_token(databag), databag.get(TOKEN_KEY))
        held = renewed(published, now, leader)
        jobs = scrape_jobs(leader.api_port, held.token if held else None, leader.https, leader.ca)
    if held is None:
        databag.pop(TOKEN_KEY, None)
    else:
        _put(databag, TOKEN_KEY, held.record())
    # The shape ``CosAgentProviderUnitData`` parses.
    config = {**telemetry, "metrics_scrape_jobs": jobs, "log_slots": []}
    _put(databag, KEY, json.dumps(config))


def _published_token(databag: MutableMapping[str, str]) -> str | None:
    """The bearer token of the ``garm`` job this unit last published; None when none reads."""
    try:
        jobs = json.loads(databag.get(KEY) or "{}")["metrics_scrape_jobs"]
        [garm] = [job for job in jobs if job["job_name"] == GARM_JOB]
        token = garm["authorization"]["credentials"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return token if isinstance(token, str) else None


def _put(databag: MutableMapping[str, str], key: str, value: str) -> None:
    """Write only a changed value, so an unchanged hook sets off no relation-changed."""
    if databag.get(key) != value:
        databag[key] = value

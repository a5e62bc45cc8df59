"""The provider side of the ``cos_agent`` interface: what this unit tells its collector.

A collector subordinate (opentelemetry-collector, or the older grafana-agent) on this
unit's machine reads one key of this unit's databag, ``config``: a JSON object the
collectors parse with their ``CosAgentProviderUnitData`` model (``charms.grafana_agent.v0.
cos_agent``, LIBPATCH 26, identical in canonical/opentelemetry-collector-operator
0357b4b2 and canonical/grafana-agent-operator de1252e7)::

    metrics_alert_rules  dict       Prometheus rule groups, Juju topology labels added
    log_alert_rules      dict       Loki rule groups, likewise ({} when there are none)
    dashboards           list[str]  each dashboard's JSON, LZMA-compressed then base64
    metrics_scrape_jobs  list[dict] Prometheus scrape_configs; the collector adds the
                                    principal's juju_* labels to every static_config
    log_slots            list[str]  "snap:slot" log slots; for snaps only
    subordinate          bool|None  unused; left out
    tracing_protocols    list|None  left out: the charm sends no traces

Rules and dashboards are the same on every unit: a collector copies them into its peer
data and its leader forwards, per principal application, the first copy it meets, which
may come from any unit. So every unit publishes them, and the scrape jobs only on the
leader: GARM, and the charm's own metrics endpoint, run on the leader alone.

The leader also hands the collector GARM's metrics token (``token``: which one, when it
is renewed, and what it opens), as the bearer credentials of the ``garm`` scrape job: the
interface has no other way. ``CosAgentProviderUnitData`` is plain JSON in a unit databag
and ``metrics_scrape_jobs`` are Prometheus ``scrape_configs`` taken as they are (the
library's own example puts ``authorization: {credentials: ...}`` in one); nothing in the
library or either collector reads a Juju secret for a scrape job. So the token is where
relation data is, once (``TOKEN_KEY`` holds only when and under which secret it was
fetched), and can be read:

- in Juju: by every user with read access to the model (``juju show-unit`` shows this
  unit's data as ``local-unit`` and, from the collector's side, as ``related-units``), by
  model admins (``juju exec``, ``juju ssh`` and ``relation-get`` on either unit), and in
  the controller's database, as any relation data;
- by the collector unit on this machine, the only unit that joins the relation (it is
  container-scoped); the collector does not copy scrape jobs to its peers
  (``CosAgentPeersUnitData`` has none) nor send them to Prometheus, it scrapes here;
- on this machine, by every local account: the collector writes the job into its
  configuration, readable by all (opentelemetry-collector
  ``/etc/otelcol/config.d/<unit>.yaml``, ``LocalPath.write_text``'s default 0644;
  grafana-agent ``/etc/grafana-agent.yaml``, ``open(path, "w")``: 0644 under a 022
  umask), and rewrites it when this databag changes.

Whoever has it can read GARM's ``/metrics`` from anywhere that reaches GARM's API port
(GARM listens on every address, for the runners) until its ``exp``. After a renewal the
databag holds the new token only; one expired and not renewed is withdrawn; a unit that
does not lead, or leads but may not run GARM yet (``juju.fence``), holds none from its
next hook on; Juju deletes the databag with the relation. A token replaced or withdrawn
stays good until its ``exp`` all the same: GARM cannot revoke it. Nothing here logs it.

Logs: neither collector reads a principal's log files through this interface except a
snap's (``log_slots``), and GARM is no snap. Both read ``/var/log/**/*log`` on the
machine, labelled with the collector's own topology (same model; juju_application is the
collector's), and grafana-agent also reads the journal. The charm's own logs are Juju's
(``/var/log/juju/unit-garm-N.log``) and go the same way.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import MutableMapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cosl import DashboardPath40UID, JujuTopology, LZMABase64
from cosl.rules import AlertRules, generic_alert_groups

from observe.token import HeldToken, LeaderGarm, renewed

logger = logging.getLogger(__name__)

RELATION = "cos-agent"
KEY = "config"  # the one key the collectors read (CosAgentProviderUnitData.KEY)
# The held token's record (HeldToken.record), not the token: that is in the garm job.
TOKEN_KEY = "garm-metrics-token"  # noqa: S105 (a key name, not a secret)
GARM_JOB = "garm"
CHARM_JOB = "garm-charm"
CHARM_METRICS_PORT = 9099
METRICS_RULES_DIR = "src/prometheus_alert_rules"
LOGS_RULES_DIR = "src/loki_alert_rules"
DASHBOARDS_DIR = "src/grafana_dashboards"


@dataclass(frozen=True)
class Telemetry:
    """What every unit publishes alike: alert rules and dashboards."""

    metrics_alert_rules: dict[str, Any]
    log_alert_rules: dict[str, Any]
    dashboards: tuple[str, ...]


def scrape_jobs(
    api_port: int, token: str | None, https: bool = False, ca: str = ""
) -> list[dict[str, Any]]:
    """The leader's two scrape jobs: GARM's ``/metrics`` and the charm's own.

    Without a token GARM's job is still published: GARM then answers 401 and
    ``up{job="garm"}`` reads 0, as it would were GARM down, which the charm's
    status says more about.

    Over HTTPS (``https``: GARM serves only that on its port then) the collector checks
    GARM's certificate against ``ca``, the CA the charm's own client checks it by, given
    inline (``tls_config.ca``): both collectors are confined snaps that cannot read the
    charm's file of it. Prometheus' ``tls_config`` has taken an inline CA since
    prometheus/common 0.43 (grafana-agent 0.35; the grafana-agent charm installs 0.44.6,
    opentelemetry-collector's Prometheus receiver is newer still). The certificate names
    ``127.0.0.1`` (``garm.tls.serving_hosts``), the scrape's target, so no
    ``server_name`` is needed. Whatever listens on GARM's port while GARM does not (a
    restart, a lease stop, a fence wait) is sent no token then: the handshake fails
    first. A CA that cannot be read leaves none here, and the collector's own trust
    store then refuses GARM: the scrape fails visibly, never unchecked.
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

    Rules get the Juju topology labels (cosl), and Prometheus's own rules for every
    application (HostDown, HostMetricsMissing) are added as the library's provider does;
    the metrics backend puts the topology into each expression from those labels.
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
    return Telemetry(
        metrics_alert_rules=metrics.as_dict(),
        log_alert_rules=logs.as_dict(),
        dashboards=_dashboards(charm_root, charm_name),
    )


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


def unit_config(telemetry: Telemetry, jobs: list[dict[str, Any]]) -> str:
    """The value of ``config``, in the shape ``CosAgentProviderUnitData`` parses."""
    return json.dumps(
        {
            "metrics_alert_rules": telemetry.metrics_alert_rules,
            "log_alert_rules": telemetry.log_alert_rules,
            "dashboards": list(telemetry.dashboards),
            "metrics_scrape_jobs": jobs,
            "log_slots": [],
        }
    )


def publish(
    databag: MutableMapping[str, str],
    telemetry: Telemetry,
    now: datetime,
    leader: LeaderGarm | None,
) -> None:
    """Bring this unit's cos-agent databag up to date; ``leader`` None on non-leaders.

    On the leader, fetches a new metrics token when ``renewal_due`` says so and GARM can
    be asked; a failed fetch keeps the token held while it has not expired (it may still
    be good) and is logged, the next hook tries again. The token held is the one this
    unit last published in its ``garm`` job. A non-leader drops the scrape jobs and any
    token.
    """
    if leader is None:
        jobs: list[dict[str, Any]] = []
        databag.pop(TOKEN_KEY, None)
    else:
        published = HeldToken.from_record(_published_token(databag), databag.get(TOKEN_KEY))
        held = renewed(published, now, leader)
        if held is None:
            databag.pop(TOKEN_KEY, None)
        else:
            _put(databag, TOKEN_KEY, held.record())
        jobs = scrape_jobs(leader.api_port, held.token if held else None, leader.https, leader.ca)
    _put(databag, KEY, unit_config(telemetry, jobs))


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

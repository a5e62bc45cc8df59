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

GARM's ``/metrics`` wants a metrics token (a JWT with ``read_metrics``, from ``GET
/api/v1/metrics-token``; lifetime ``[jwt_auth] time_to_live``; signed with the JWT
secret, so a new secret voids it). Only the leader holds one. It is renewed once half its
lifetime has passed or the JWT secret changed, and kept in this unit's databag (under
``TOKEN_KEY``, with when and under which secret it was fetched) besides the scrape job
that carries it: the cos-agent relation is container-scoped, so the only unit that reads
the databag is the collector on this machine (and, as for every databag, a Juju
administrator). The collector then writes it into its own configuration on this machine.
The token grants reading GARM's metrics and nothing else (GARM's API refuses it: it names
no user). It is never logged: nothing here puts it in a message, an exception or a repr.

Logs: neither collector reads a principal's log files through this interface except a
snap's (``log_slots``), and GARM is no snap. Both read ``/var/log/**/*log`` on the
machine, labelled with the collector's own topology (same model; juju_application is the
collector's), and grafana-agent also reads the journal. The charm's own logs are Juju's
(``/var/log/juju/unit-garm-N.log``) and go the same way.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cosl import DashboardPath40UID, JujuTopology, LZMABase64
from cosl.rules import AlertRules, generic_alert_groups

from garm.client import GarmError

logger = logging.getLogger(__name__)

RELATION = "cos-agent"
KEY = "config"  # the one key the collectors read (CosAgentProviderUnitData.KEY)
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


@dataclass(frozen=True)
class HeldToken:
    """The metrics token this unit holds, and when and under which JWT secret it came."""

    token: str = field(repr=False)
    fetched_at: datetime
    secret_fingerprint: str

    def to_json(self) -> str:
        """The form kept in the databag under ``TOKEN_KEY``."""
        return json.dumps(
            {
                "token": self.token,
                "fetched-at": self.fetched_at.isoformat(),
                "jwt-secret-fingerprint": self.secret_fingerprint,
            }
        )

    @classmethod
    def from_json(cls, text: str | None) -> HeldToken | None:
        """Back from ``to_json``; None when absent or unreadable (a new one is fetched)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            held = cls(
                data["token"],
                datetime.fromisoformat(data["fetched-at"]),
                data["jwt-secret-fingerprint"],
            )
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(held.token, str) or not isinstance(held.secret_fingerprint, str):
            return None
        if held.fetched_at.tzinfo is None:
            return None
        return held


@dataclass(frozen=True)
class LeaderGarm:
    """The leader's GARM, as far as this hook knows it.

    ``jwt_secret`` is None when it cannot be read now, and ``fetch_token`` None when GARM
    did not answer this hook: either way the held token is kept as it is.
    """

    api_port: int
    jwt_secret: str | None = field(default=None, repr=False)
    fetch_token: Callable[[], str] | None = field(default=None, repr=False)


def secret_fingerprint(jwt_secret: str) -> str:
    """A short digest that tells one JWT secret from another and reveals nothing of it."""
    return hashlib.sha256(b"garm-jwt-secret\0" + jwt_secret.encode()).hexdigest()[:16]


def token_expiry(token: str) -> datetime | None:
    """The ``exp`` of a JWT, read without verifying it; None when it has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    segment = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        payload = json.loads(base64.urlsafe_b64decode(segment))
    except (ValueError, binascii.Error):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        return datetime.fromtimestamp(exp, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def renewal_due(held: HeldToken | None, now: datetime, fingerprint: str) -> str | None:
    """Why a new metrics token is needed now, or None to keep ``held``.

    A token is renewed once half its lifetime (from when it was fetched to its ``exp``)
    has passed, which leaves the other half to retry in, and at once when GARM's JWT
    secret is not the one it was signed with.
    """
    if held is None:
        return "no metrics token held"
    if held.secret_fingerprint != fingerprint:
        return "GARM's JWT secret changed"
    expires = token_expiry(held.token)
    if expires is None:
        return "the metrics token has no expiry"
    lifetime = expires - held.fetched_at
    if now >= expires or now >= held.fetched_at + lifetime / 2:
        return "half the metrics token's lifetime has passed"
    return None


def scrape_jobs(api_port: int, token: str | None) -> list[dict[str, Any]]:
    """The leader's two scrape jobs: GARM's ``/metrics`` and the charm's own.

    Without a token GARM's job is still published: GARM then answers 401 and
    ``up{job="garm"}`` reads 0, as it would were GARM down, which the charm's
    status says more about.
    """
    garm: dict[str, Any] = {
        "job_name": GARM_JOB,
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}],
    }
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
    be asked; a failed fetch keeps the token held (it may still be good) and is logged,
    the next hook tries again. A non-leader drops the scrape jobs and any token.
    """
    if leader is None:
        jobs: list[dict[str, Any]] = []
        databag.pop(TOKEN_KEY, None)
    else:
        held = _renewed(HeldToken.from_json(databag.get(TOKEN_KEY)), now, leader)
        if held is not None:
            _put(databag, TOKEN_KEY, held.to_json())
        jobs = scrape_jobs(leader.api_port, held.token if held else None)
    _put(databag, KEY, unit_config(telemetry, jobs))


def _renewed(held: HeldToken | None, now: datetime, leader: LeaderGarm) -> HeldToken | None:
    if leader.jwt_secret is None or leader.fetch_token is None:
        return held
    fingerprint = secret_fingerprint(leader.jwt_secret)
    why = renewal_due(held, now, fingerprint)
    if why is None:
        return held
    try:
        token = leader.fetch_token()
    except GarmError as exc:
        # GarmError texts name the route and GARM's error, never a token.
        logger.warning("GARM's metrics token not renewed (%s): %s", why, exc)
        return held
    except Exception as exc:  # telemetry never fails a hook
        # Anything else (the admin login unreadable, a transport error): its kind only,
        # as its text is not known to be free of what was sent.
        logger.warning("GARM's metrics token not renewed (%s): %s", why, type(exc).__name__)
        return held
    logger.info("GARM's metrics token renewed: %s", why)
    return HeldToken(token, now, fingerprint)


def _put(databag: MutableMapping[str, str], key: str, value: str) -> None:
    """Write only a changed value, so an unchanged hook sets off no relation-changed."""
    if databag.get(key) != value:
        databag[key] = value

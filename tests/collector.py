"""What a COS collector reads of this charm's cos-agent databag, as the collectors model it."""

from __future__ import annotations

import json

import pydantic


class CollectorUnitData(pydantic.BaseModel):
    """What the collector parses from ``config`` (shape of CosAgentProviderUnitData)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    metrics_alert_rules: dict
    log_alert_rules: dict
    dashboards: list[str]
    subordinate: bool | None = None
    metrics_scrape_jobs: list[dict]
    log_slots: list[str]
    tracing_protocols: list[str] | None = None


class CollectorPeerData(pydantic.BaseModel):
    """What the collector copies into its peer data (shape of CosAgentPeersUnitData)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    unit_name: str
    relation_id: str
    relation_name: str
    metrics_alert_rules: dict | None
    log_alert_rules: dict | None
    dashboards: list[str] | None


def collector_reads(databag: dict[str, str]) -> CollectorUnitData:
    return CollectorUnitData(**json.loads(databag["config"]))

"""The cos-agent databag as the collectors read it, and GARM's metrics token.

``CollectorUnitData`` below is written for this test from the shape (field names and
types) of ``CosAgentProviderUnitData`` in the collectors' copy of the interface library,
``lib/charms/grafana_agent/v0/cos_agent.py`` (LIBPATCH 26), at
canonical/opentelemetry-collector-operator 0357b4b2da3e496a5fb9d40f28a86cfedc1c8dae and,
identical, canonical/grafana-agent-operator de1252e7966c0b2ff1c613dbec341efd303d708b.
The requirer reads the unit databag key ``config`` with
``CosAgentProviderUnitData(**json.loads(raw))`` (pydantic v2, extra keys ignored), then:
scrape jobs get the principal's ``juju_*`` labels on every static_config; rules and
dashboards go to its peer data (``CosAgentPeersUnitData``: the same three fields,
optional) and from there, per principal application, to the backends; each dashboard is
``json.loads(LZMABase64.decompress(...))`` and titled from its ``title``.
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cosl import DashboardPath40UID, JujuTopology, LZMABase64

from garm.client import GarmApiError, GarmClient, GarmUnreachable
from observe import cos_agent
from observe.token import HeldToken, LeaderGarm, secret_fingerprint, token_expiry
from tests.collector import CollectorPeerData, CollectorUnitData, collector_reads
from tests.garm_double import DEFAULT_JWT_TTL, GarmDouble, _jwt_sign
from tests.tokens import jwt

ROOT = Path(__file__).resolve().parents[3]
TOPOLOGY = JujuTopology(
    model="ci",
    model_uuid="3f9c6d2e-1b7a-4c55-8a0e-2f1d9b7c6e40",
    application="garm",
    unit="garm/0",
    charm_name="garm",
)
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
SECRET = "J" * 40 + "wt-5ecret!"
LOG_EXPR = 'count_over_time({filename=~".*garm.log"} |= "ERROR" [5m]) > 0'


def labelled_jobs(data: CollectorUnitData, topology: JujuTopology) -> list[dict[str, Any]]:
    """The requirer's ``metrics_jobs``: the principal's topology on every static_config."""
    jobs = json.loads(json.dumps(data.metrics_scrape_jobs))
    for job in jobs:
        for static in job.get("static_configs", []):
            labels = topology.as_dict(excluded_keys=["charm_name"])
            static["labels"] = {
                **static.get("labels", {}),
                **{f"juju_{k}": v for k, v in labels.items() if v},
            }
    return jobs


@pytest.fixture
def telemetry(tmp_path: Path) -> cos_agent.Telemetry:
    """A charm root with one rule file of each kind and one dashboard."""
    rules = tmp_path / "src" / "prometheus_alert_rules"
    rules.mkdir(parents=True)
    (rules / "garm.rules").write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "garm",
                        "rules": [
                            {
                                "alert": "GarmDown",
                                "expr": 'up{job="garm"} == 0',
                                "for": "5m",
                                "labels": {"severity": "critical"},
                            }
                        ],
                    }
                ]
            }
        )
    )
    logs = tmp_path / "src" / "loki_alert_rules"
    logs.mkdir(parents=True)
    (logs / "errors.rules").write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "garm-logs",
                        "rules": [
                            {
                                "alert": "GarmLogsErrors",
                                "expr": LOG_EXPR,
                            }
                        ],
                    }
                ]
            }
        )
    )
    boards = tmp_path / "src" / "grafana_dashboards"
    boards.mkdir(parents=True)
    (boards / "garm.json").write_text(json.dumps({"title": "GARM", "panels": []}))
    return cos_agent.load_telemetry(tmp_path, TOPOLOGY)


class Fetcher:
    """Stands in for the charm's call to GARM: hands out tokens and counts calls."""

    def __init__(self, lifetime: timedelta = timedelta(hours=24)):
        self.lifetime = lifetime
        self.now = NOW
        self.calls = 0
        self.issued: list[str] = []
        self.error: Exception | None = None

    def __call__(self) -> str:
        self.calls += 1
        if self.error is not None:
            raise self.error
        token = jwt(
            {
                "n": self.calls,
                "read_metrics": True,
                "exp": int((self.now + self.lifetime).timestamp()),
            }
        )
        self.issued.append(token)
        return token


def leader(fetch: Fetcher, secret: str = SECRET) -> LeaderGarm:
    return LeaderGarm(api_port=9997, jwt_secret=secret, fetch_token=fetch)


# --- the databag as the collector reads it ----------------------------------------------


def test_leader_databag_parses_as_the_collector_reads_it(telemetry):
    fetch, databag = Fetcher(), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))

    data = collector_reads(databag)
    assert data.log_slots == []  # GARM is no snap
    assert data.subordinate is None and data.tracing_protocols is None
    [token] = fetch.issued
    assert labelled_jobs(data, TOPOLOGY) == [
        {
            "job_name": "garm",
            "metrics_path": "/metrics",
            "static_configs": [
                {
                    "targets": ["127.0.0.1:9997"],
                    "labels": {
                        "juju_model": "ci",
                        "juju_model_uuid": TOPOLOGY.model_uuid,
                        "juju_application": "garm",
                        "juju_unit": "garm/0",
                    },
                }
            ],
            "authorization": {"type": "Bearer", "credentials": token},
        },
        {
            "job_name": "garm-charm",
            "metrics_path": "/metrics",
            "static_configs": [
                {
                    "targets": ["127.0.0.1:9099"],
                    "labels": {
                        "juju_model": "ci",
                        "juju_model_uuid": TOPOLOGY.model_uuid,
                        "juju_application": "garm",
                        "juju_unit": "garm/0",
                    },
                }
            ],
        },
    ]
    # What the collector copies to its peers validates too, and its rules dump to YAML.
    peer = CollectorPeerData(
        unit_name="garm/0",
        relation_id="7",
        relation_name="cos-agent",
        metrics_alert_rules=data.metrics_alert_rules,
        log_alert_rules=data.log_alert_rules,
        dashboards=data.dashboards,
    )
    assert yaml.safe_load(yaml.safe_dump(peer.metrics_alert_rules)) == data.metrics_alert_rules


def test_rules_carry_the_topology_and_the_generic_groups(telemetry):
    groups = {g["name"]: g for g in telemetry["metrics_alert_rules"]["groups"]}
    assert set(groups) == {
        "ci_3f9c6d2e_garm_garm_rules",  # from the file, named after the topology
        "ci_3f9c6d2e_garm_HostHealth_rules",  # what every cos_agent provider adds
    }
    [rule] = groups["ci_3f9c6d2e_garm_garm_rules"]["rules"]
    assert rule["labels"] == {
        "severity": "critical",
        "juju_model": "ci",
        "juju_model_uuid": TOPOLOGY.model_uuid,
        "juju_application": "garm",
        "juju_charm": "garm",
    }
    [log_group] = telemetry["log_alert_rules"]["groups"]
    assert log_group["rules"][0]["labels"]["juju_application"] == "garm"


def test_dashboards_decode_as_the_collector_decodes_them(telemetry):
    [encoded] = telemetry["dashboards"]
    content = json.loads(LZMABase64.decompress(encoded))
    assert content["title"] == "GARM"
    assert content["uid"] == DashboardPath40UID.generate(
        "garm", "src/grafana_dashboards/garm.json"
    )
    assert DashboardPath40UID.is_valid(content["uid"])
    assert content["tags"] == ["charm: garm"]


def test_no_rule_files_still_gives_a_valid_databag(tmp_path):
    telemetry = cos_agent.load_telemetry(tmp_path, TOPOLOGY)
    databag: dict[str, str] = {}
    cos_agent.publish(databag, telemetry, NOW, None)
    data = collector_reads(databag)
    assert data.log_alert_rules == {}
    assert data.dashboards == []
    assert [g["name"] for g in data.metrics_alert_rules["groups"]] == [
        "ci_3f9c6d2e_garm_HostHealth_rules"
    ]


def test_the_charms_own_files_load():
    """The rules and dashboards shipped in src/ (whatever is there now) parse and encode."""
    telemetry = cos_agent.load_telemetry(ROOT, TOPOLOGY)
    databag: dict[str, str] = {}
    cos_agent.publish(databag, telemetry, NOW, None)
    data = collector_reads(databag)
    for encoded in data.dashboards:
        assert json.loads(LZMABase64.decompress(encoded))["uid"]
    for group in data.metrics_alert_rules["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["juju_application"] == "garm"


def test_non_leader_publishes_the_same_rules_and_dashboards_and_no_scrape_job(telemetry):
    """A collector's leader forwards the rules and dashboards of whichever unit of an
    application it meets first in its peer data: a unit without them would drop them."""
    led: dict[str, str] = {}
    cos_agent.publish(led, telemetry, NOW, leader(Fetcher()))
    follower: dict[str, str] = {}
    cos_agent.publish(follower, telemetry, NOW, None)

    on_leader, on_follower = collector_reads(led), collector_reads(follower)
    assert on_follower.metrics_scrape_jobs == []
    assert on_follower.metrics_alert_rules == on_leader.metrics_alert_rules
    assert on_follower.log_alert_rules == on_leader.log_alert_rules
    assert on_follower.dashboards == on_leader.dashboards
    assert cos_agent.TOKEN_KEY not in follower


def test_deposed_leader_drops_its_jobs_and_token(telemetry):
    databag: dict[str, str] = {}
    cos_agent.publish(databag, telemetry, NOW, leader(Fetcher()))
    cos_agent.publish(databag, telemetry, NOW, None)
    assert collector_reads(databag).metrics_scrape_jobs == []
    assert cos_agent.TOKEN_KEY not in databag
    assert "credentials" not in databag["config"]


def test_an_unchanged_databag_is_not_written_again(telemetry):
    class Recording(dict):
        writes = 0

        def __setitem__(self, key, value):
            type(self).writes += 1
            super().__setitem__(key, value)

    databag = Recording()
    fetch = Fetcher()
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    first = Recording.writes
    cos_agent.publish(databag, telemetry, NOW + timedelta(minutes=5), leader(fetch))
    assert Recording.writes == first
    assert fetch.calls == 1


# --- the metrics token in the databag ---------------------------------------------------


def test_publish_renews_at_half_life_and_on_secret_change(telemetry):
    fetch, databag = Fetcher(), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    later = NOW + timedelta(hours=11)
    cos_agent.publish(databag, telemetry, later, leader(fetch))
    assert fetch.calls == 1

    fetch.now = NOW + timedelta(hours=12)
    cos_agent.publish(databag, telemetry, fetch.now, leader(fetch))
    assert fetch.calls == 2
    assert _credentials(databag) == fetch.issued[-1]

    cos_agent.publish(databag, telemetry, fetch.now, leader(fetch, secret=SECRET + "-new"))
    assert fetch.calls == 3
    assert _credentials(databag) == fetch.issued[-1]
    kept = HeldToken.from_record(_credentials(databag), databag[cos_agent.TOKEN_KEY])
    assert kept is not None
    assert kept.secret_fingerprint == secret_fingerprint(SECRET + "-new")


def test_a_failed_fetch_keeps_the_held_token_and_never_logs_it(telemetry, caplog):
    caplog.set_level(logging.DEBUG)
    fetch, databag = Fetcher(), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    [token] = fetch.issued

    fetch.error = GarmUnreachable("GET /metrics-token: ConnectionError")
    cos_agent.publish(databag, telemetry, NOW, leader(fetch, secret="rotated-" + SECRET))
    assert _credentials(databag) == token  # the old one, maybe still good; retried next hook
    assert "not renewed (GARM's JWT secret changed)" in caplog.text

    fetch.error = GarmApiError("GET", "/metrics-token", 409, "urls_required", "")
    cos_agent.publish(databag, telemetry, NOW, leader(fetch, secret="rotated-" + SECRET))
    fetch.error = None
    cos_agent.publish(databag, telemetry, NOW, leader(fetch, secret="rotated-" + SECRET))
    assert _credentials(databag) == fetch.issued[-1]
    assert "renewed: GARM's JWT secret changed" in caplog.text
    for issued in fetch.issued:
        assert issued not in caplog.text
        assert issued.split(".")[2] not in caplog.text


def test_no_token_yet_still_publishes_the_garm_job_without_credentials(telemetry):
    databag: dict[str, str] = {}
    no_garm = LeaderGarm(api_port=9997, jwt_secret=SECRET, fetch_token=None)
    cos_agent.publish(databag, telemetry, NOW, no_garm)
    jobs = collector_reads(databag).metrics_scrape_jobs
    assert [j["job_name"] for j in jobs] == ["garm", "garm-charm"]
    assert "authorization" not in jobs[0]
    assert cos_agent.TOKEN_KEY not in databag


def test_an_unreadable_secret_keeps_the_token_without_asking_garm(telemetry):
    fetch, databag = Fetcher(), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    blind = LeaderGarm(api_port=9997, jwt_secret=None, fetch_token=fetch)
    cos_agent.publish(databag, telemetry, NOW + timedelta(hours=20), blind)
    assert fetch.calls == 1
    assert _credentials(databag) == fetch.issued[0]


def test_the_token_is_in_the_databag_once_and_a_replaced_one_nowhere(telemetry):
    """The collector reads the token in the garm job; the record beside it says only when
    and under which secret it came. After a renewal, no value carries the old one."""
    fetch, databag = Fetcher(), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    [first] = fetch.issued
    assert _copies(databag, first) == {cos_agent.KEY: 1}
    assert set(databag) == {cos_agent.KEY, cos_agent.TOKEN_KEY}

    fetch.now = NOW + timedelta(hours=12)
    cos_agent.publish(databag, telemetry, fetch.now, leader(fetch))
    second = fetch.issued[-1]
    assert _copies(databag, first) == {}
    assert _copies(databag, second) == {cos_agent.KEY: 1}


def test_a_databag_holding_a_copy_of_the_token_in_its_record_loses_the_copy(telemetry):
    """A databag from before the token was kept once: same token, no new one asked for."""
    fetch, databag = Fetcher(), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    [token] = fetch.issued
    databag[cos_agent.TOKEN_KEY] = json.dumps(
        {"token": token, **json.loads(databag[cos_agent.TOKEN_KEY])}
    )
    cos_agent.publish(databag, telemetry, NOW + timedelta(hours=1), leader(fetch))
    assert fetch.calls == 1
    assert _credentials(databag) == token
    assert _copies(databag, token) == {cos_agent.KEY: 1}


@pytest.mark.parametrize(
    "config",
    [
        None,
        "{",
        json.dumps({"metrics_scrape_jobs": []}),
        json.dumps({"metrics_scrape_jobs": [{"job_name": "garm"}]}),
        json.dumps({"metrics_scrape_jobs": [{"job_name": "garm", "authorization": 5}]}),
        json.dumps(
            {"metrics_scrape_jobs": [{"job_name": "garm", "authorization": {"credentials": 5}}]}
        ),
        json.dumps({"metrics_scrape_jobs": ["garm"]}),
    ],
)
def test_a_record_without_a_published_token_gets_a_new_one(telemetry, config):
    fetch, databag = Fetcher(), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    if config is None:
        del databag[cos_agent.KEY]
    else:
        databag[cos_agent.KEY] = config
    cos_agent.publish(databag, telemetry, NOW + timedelta(hours=1), leader(fetch))
    assert fetch.calls == 2
    assert _credentials(databag) == fetch.issued[-1]


def test_an_expired_token_not_renewed_is_withdrawn_with_its_record(telemetry):
    fetch, databag = Fetcher(lifetime=timedelta(hours=24)), {}
    cos_agent.publish(databag, telemetry, NOW, leader(fetch))
    [token] = fetch.issued

    fetch.error = GarmUnreachable("GET /metrics-token: ConnectionError")
    cos_agent.publish(databag, telemetry, NOW + timedelta(hours=23), leader(fetch))
    assert _credentials(databag) == token  # due, not renewed, still good: kept
    cos_agent.publish(databag, telemetry, NOW + timedelta(hours=24), leader(fetch))
    [garm, _] = collector_reads(databag).metrics_scrape_jobs
    assert "authorization" not in garm
    assert cos_agent.TOKEN_KEY not in databag and _copies(databag, token) == {}

    fetch.error, fetch.now = None, NOW + timedelta(hours=25)
    cos_agent.publish(databag, telemetry, fetch.now, leader(fetch))
    assert _credentials(databag) == fetch.issued[-1] != token


def _copies(databag: dict[str, str], token: str) -> dict[str, int]:
    """How many times each key's value carries ``token``."""
    return {key: value.count(token) for key, value in databag.items() if token in value}


def _credentials(databag: dict[str, str]) -> str:
    [garm] = [j for j in collector_reads(databag).metrics_scrape_jobs if j["job_name"] == "garm"]
    return garm["authorization"]["credentials"]


# --- GARM's side: the client and the double --------------------------------------------


@pytest.fixture
def client(garm: GarmDouble):
    c = GarmClient(garm.url, garm.username, garm.password, timeout=(1.0, 2.0))
    yield c
    c.close()


def scrape(garm: GarmDouble, authorization: str | None) -> requests.Response:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return requests.get(f"{garm.url}/metrics", headers=headers, timeout=2)


def test_metrics_token_is_a_garm_jwt_and_opens_metrics(garm, client, clock):
    token = client.get_metrics_token()
    assert garm.metrics_tokens == [token]
    header, payload, _ = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "HS256", "typ": "JWT"}
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert list(claims) == [
        "user",
        "token_id",
        "full_name",
        "is_admin",
        "read_metrics",
        "generation",
        "iss",
        "exp",
    ]
    assert claims["read_metrics"] is True and claims["is_admin"] is False
    assert token_expiry(token) == clock.now + DEFAULT_JWT_TTL

    answer = scrape(garm, f"Bearer {token}")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "garm_health{" in answer.text
    # GARM reads the second word whatever the first is.
    assert scrape(garm, f"Token {token}").status_code == 200


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer  x", "Bearer a b", "Bearer not-a-jwt"],
)
def test_metrics_refuses_without_a_metrics_token(garm, authorization):
    answer = scrape(garm, authorization)
    assert answer.status_code == 401
    assert answer.text == '{"error":"Authentication failed","details":""}\n'


def test_metrics_refuses_a_login_token_an_expired_one_and_a_rotated_secret(garm, client, clock):
    client.login()
    login_token = client._token
    assert scrape(garm, f"Bearer {login_token}").status_code == 401

    token = client.get_metrics_token()
    clock.advance(DEFAULT_JWT_TTL - timedelta(seconds=1))
    assert scrape(garm, f"Bearer {token}").status_code == 200
    clock.advance(timedelta(seconds=1))
    assert scrape(garm, f"Bearer {token}").status_code == 401

    # A JWT GARM signed but without read_metrics (an admin's login) is refused as well.
    admin = _jwt_sign({"user": "u1", "is_admin": True, "exp": 2**40}, garm.jwt_secret)
    assert scrape(garm, f"Bearer {admin}").status_code == 401
    assert scrape(garm, f"Bearer {_jwt_sign({'read_metrics': True}, 'x' * 32)}").status_code == 401

    fresh = client.get_metrics_token()
    garm.set_jwt_secret("Another-JWT-5ecret-" + "y" * 40)
    assert scrape(garm, f"Bearer {fresh}").status_code == 401
    renewed = client.get_metrics_token()  # logs in again: the old login JWT is void too
    assert scrape(garm, f"Bearer {renewed}").status_code == 200


def test_metrics_token_route_gates(garm, client):
    garm.inject("GET", "/metrics-token", status=409, error="urls_required", details="")
    with pytest.raises(GarmApiError) as refused:
        client.get_metrics_token()
    assert refused.value.status == 409
    answer = requests.get(f"{garm.url}/api/v1/metrics-token", timeout=2)
    assert answer.status_code == 401
    assert requests.post(f"{garm.url}/metrics", timeout=2).status_code == 405


def test_metrics_off_is_a_plain_404(garm, client):
    garm.metrics_enabled = False
    answer = scrape(garm, f"Bearer {client.get_metrics_token()}")
    assert answer.status_code == 404
    assert answer.text == "404 page not found\n"
    garm.unexpected.clear()  # the request was meant to miss


def test_a_token_less_answer_is_an_error_without_the_body(garm, client):
    garm.inject("GET", "/metrics-token", status=200, error="", details="")
    with pytest.raises(GarmApiError) as refused:
        client.get_metrics_token()
    assert "no token" in str(refused.value)


CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_garm_over_https_is_scraped_over_https_on_loopback_checked_against_its_ca():
    plain, _ = cos_agent.scrape_jobs(9997, "tok")
    secure, charm = cos_agent.scrape_jobs(9997, "tok", https=True, ca=CA_PEM)

    # GARM answers only HTTPS on its port once it has a certificate: a plain scrape of it
    # would read nothing. The collector checks GARM by its CA, inline (a confined
    # collector cannot read the charm's file of it), so that whatever holds GARM's port
    # while GARM is down is sent no token; the certificate names the loopback target.
    assert "scheme" not in plain and "tls_config" not in plain
    assert secure["scheme"] == "https"
    assert secure["tls_config"] == {"ca": CA_PEM}
    assert secure["static_configs"] == [{"targets": ["127.0.0.1:9997"]}]
    assert secure["authorization"] == plain["authorization"]
    # The charm's own endpoint is plain HTTP on loopback either way.
    assert "scheme" not in charm


def test_garm_over_https_is_never_scraped_unchecked():
    # A CA that could not be read leaves the collector its own trust store, which
    # refuses GARM's certificate: the scrape fails visibly rather than goes unchecked.
    secure, _ = cos_agent.scrape_jobs(9997, "tok", https=True)
    assert secure["scheme"] == "https"
    assert "insecure_skip_verify" not in json.dumps(secure)
    assert "tls_config" not in secure

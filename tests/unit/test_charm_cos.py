"""The cos-agent relation through ops.testing, GARM as the double over HTTP.

Hooks run as Juju runs them on the principal when a collector subordinate comes and
leadership moves; what the charm leaves in its unit databag is read with the collector's
model (``tests/unit/observe/test_cos_agent.py``), and the token it publishes is tried on the
double's ``/metrics`` as the collector would scrape it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import timedelta

import pytest
import requests
from ops import testing

from juju.secrets import INTERNAL_SECRET_LABEL
from observe import cos_agent
from tests.charm_states import CONFIGURATOR_SECRETS, admin_secret, configurator
from tests.collector import CollectorUnitData, collector_reads
from tests.databags import EXAMPLE_UNIT
from tests.garm_double import DEFAULT_JWT_TTL, GarmDouble
from tests.juju_events import leader_settings_changed

pytestmark = pytest.mark.usefixtures("machine")

JWT_SECRET = "J" * 40 + "wt-5ecret!"
ROTATED_SECRET = "R" * 40 + "otated-5ecret!"


def internal(jwt_secret: str = JWT_SECRET) -> testing.Secret:
    return testing.Secret(
        {"jwt-secret": jwt_secret, "db-passphrase": "Db-Pa55phrase-0123456789abcdefgh"},
        label=INTERNAL_SECRET_LABEL,
        owner="app",
    )


def collector(local: dict[str, str] | None = None) -> testing.Relation:
    """The cos-agent relation as the principal sees it: one collector unit, its own."""
    return testing.Relation(
        "cos-agent",
        remote_app_name="opentelemetry-collector",
        id=7,
        remote_units_data={0: {}},
        local_unit_data=local or {},
    )


def state_of(garm: GarmDouble, resources, *relations, leader=True, jwt_secret=JWT_SECRET):
    port = int(garm.url.rsplit(":", 1)[1])
    return testing.State(
        leader=leader,
        config={"api-port": port},
        relations=relations,
        secrets=[admin_secret(garm), internal(jwt_secret), *CONFIGURATOR_SECRETS],
        resources=resources,
    )


def published(state: testing.State) -> dict[str, str]:
    relation = state.get_relation(7)
    return dict(relation.local_unit_data)


def with_bag(state: testing.State, bag: dict[str, str], **changes) -> testing.State:
    """The next hook's state: this unit's cos-agent databag as the last hook left it."""
    relations = [
        dataclasses.replace(r, local_unit_data=bag) if r.id == 7 else r for r in state.relations
    ]
    return dataclasses.replace(state, relations=relations, **changes)


def token_in(data: CollectorUnitData) -> str | None:
    [garm] = [j for j in data.metrics_scrape_jobs if j["job_name"] == "garm"]
    return garm.get("authorization", {}).get("credentials")


def copies(bag: dict[str, str], token: str | None) -> dict[str, int]:
    """How many times each value of the databag carries ``token``."""
    assert token, "a token to look for"
    return {key: value.count(token) for key, value in bag.items() if token in value}


def scrape(garm: GarmDouble, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(f"{garm.url}/metrics", headers=headers, timeout=2).status_code


def test_relation_events_publish_jobs_rules_dashboards_and_a_working_token(
    ctx, world, resources, caplog
):
    caplog.set_level(logging.DEBUG)
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)

    state = ctx.run(ctx.on.relation_created(relation), state)
    bag = published(state)
    data = collector_reads(bag)
    assert [j["job_name"] for j in data.metrics_scrape_jobs] == ["garm", "garm-charm"]
    port = world.url.rsplit(":", 1)[1]
    assert data.metrics_scrape_jobs[0]["static_configs"] == [{"targets": [f"127.0.0.1:{port}"]}]
    assert data.metrics_alert_rules["groups"]  # at least the generic HostHealth group
    assert data.log_slots == []
    token = token_in(data)
    assert world.metrics_tokens == [token]
    assert scrape(world, token) == 200

    # joined and changed (the collector writing its side) run the pass again: no new token.
    state = with_bag(state, bag)
    state = ctx.run(ctx.on.relation_joined(state.get_relation(7), remote_unit=0), state)
    state = with_bag(state, bag)
    state = ctx.run(ctx.on.relation_changed(state.get_relation(7), remote_unit=0), state)
    assert published(state) == bag
    assert len(world.metrics_tokens) == 1

    logged = caplog.text + "\n".join(line.message for line in ctx.juju_log)
    assert token is not None and token not in logged
    assert token.split(".")[2] not in logged


def test_the_token_is_renewed_at_half_life_and_when_the_jwt_secret_changes(
    ctx, world, resources, clock, caplog, machine
):
    caplog.set_level(logging.DEBUG)
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)
    state = ctx.run(ctx.on.relation_created(relation), state)
    first = token_in(collector_reads(published(state)))

    clock.advance(DEFAULT_JWT_TTL / 2 - timedelta(minutes=1))
    state = ctx.run(ctx.on.update_status(), with_bag(state, published(state)))
    assert token_in(collector_reads(published(state))) == first

    clock.advance(timedelta(minutes=1))
    state = ctx.run(ctx.on.update_status(), with_bag(state, published(state)))
    second = token_in(collector_reads(published(state)))
    assert second != first and world.metrics_tokens == [first, second]
    assert scrape(world, second) == 200
    # The databag carries the new one once, in the job, and the old one nowhere; GARM
    # cannot revoke the old one, which opens /metrics until its exp all the same.
    assert copies(published(state), second) == {cos_agent.KEY: 1}
    assert copies(published(state), first) == {}
    assert scrape(world, first) == 200

    # GARM's JWT secret changes: the next hook writes GARM's config and restarts it (the
    # double is told, as GARM would read the new secret), then gets a new token.
    world.set_jwt_secret(ROTATED_SECRET)
    assert scrape(world, second) == 401
    rotated = dataclasses.replace(
        with_bag(state, published(state)),
        secrets=[admin_secret(world), internal(ROTATED_SECRET), *CONFIGURATOR_SECRETS],
    )
    state = ctx.run(ctx.on.update_status(), rotated)
    assert ROTATED_SECRET in machine.paths.config_file.read_text()
    third = token_in(collector_reads(published(state)))
    assert third not in (first, second) and scrape(world, third) == 200
    assert copies(published(state), second) == {}

    logged = caplog.text + "\n".join(line.message for line in ctx.juju_log)
    for token in world.metrics_tokens:
        assert token.split(".")[2] not in logged
    assert "metrics token renewed: half the metrics token's lifetime has passed" in logged
    assert "metrics token renewed: GARM's JWT secret changed" in logged


def test_leadership_moves_the_scrape_jobs_and_the_token(ctx, world, resources):
    relation = collector()
    leader = ctx.run(
        ctx.on.relation_created(relation),
        state_of(world, resources, configurator(EXAMPLE_UNIT), relation),
    )
    on_leader = collector_reads(published(leader))

    # Deposed: the old leader keeps rules and dashboards, drops the jobs and the token.
    deposed = ctx.run(leader_settings_changed(), with_bag(leader, published(leader), leader=False))
    bag = published(deposed)
    on_follower = collector_reads(bag)
    assert on_follower.metrics_scrape_jobs == []
    assert cos_agent.TOKEN_KEY not in bag
    assert copies(bag, token_in(on_leader) or "no token") == {}
    assert on_follower.metrics_alert_rules == on_leader.metrics_alert_rules
    assert on_follower.dashboards == on_leader.dashboards

    # Elected: a unit that never held a token gets its own from its GARM.
    elected = ctx.run(ctx.on.leader_elected(), with_bag(deposed, bag, leader=True))
    token = token_in(collector_reads(published(elected)))
    assert token is not None and token == world.metrics_tokens[-1]
    assert len(world.metrics_tokens) == 2


def test_a_follower_joining_publishes_without_scrape_jobs(ctx, world, resources):
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation, leader=False)
    state = ctx.run(ctx.on.relation_joined(relation, remote_unit=0), state)
    data = collector_reads(published(state))
    assert data.metrics_scrape_jobs == []
    assert data.metrics_alert_rules["groups"]
    assert world.metrics_tokens == []


def test_garm_not_answering_keeps_the_held_token_until_it_expires(
    ctx, world, resources, clock, caplog
):
    caplog.set_level(logging.DEBUG)
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)
    state = ctx.run(ctx.on.relation_created(relation), state)
    token = token_in(collector_reads(published(state)))

    world.inject("*", ".*", drop=True, times=1000)
    clock.advance(DEFAULT_JWT_TTL / 2)  # due, still good
    asked = len(world.requests)
    state = ctx.run(ctx.on.update_status(), with_bag(state, published(state)))
    # The pass found GARM not answering: the charm does not go on to ask it for a token.
    assert "/metrics-token" not in [r.path for r in world.requests[asked:]]
    assert token_in(collector_reads(published(state))) == token

    clock.advance(DEFAULT_JWT_TTL / 2)  # expired: withdrawn, with its record
    state = ctx.run(ctx.on.update_status(), with_bag(state, published(state)))
    world.clear_faults()
    bag = published(state)
    assert token_in(collector_reads(bag)) is None
    assert cos_agent.TOKEN_KEY not in bag and token is not None and copies(bag, token) == {}
    assert scrape(world, token) == 401  # GARM refuses it too: it expired
    assert world.metrics_tokens == [token]
    assert "expired before it was renewed: it is withdrawn" in caplog.text

    state = ctx.run(ctx.on.update_status(), with_bag(state, published(state)))
    renewed = token_in(collector_reads(published(state)))
    assert renewed == world.metrics_tokens[-1] != token
    assert scrape(world, renewed) == 200


def test_an_upgrade_drops_the_copy_an_older_charm_kept_beside_the_job(ctx, world, resources):
    """Before, the record under TOKEN_KEY held the token too: the upgrade keeps the token
    and drops the copy, asking GARM for no new one."""
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)
    state = ctx.run(ctx.on.relation_created(relation), state)
    bag = published(state)
    token = token_in(collector_reads(bag))
    assert token is not None
    older = {
        **bag,
        cos_agent.TOKEN_KEY: json.dumps({"token": token, **json.loads(bag[cos_agent.TOKEN_KEY])}),
    }

    state = ctx.run(ctx.on.upgrade_charm(), with_bag(state, older))
    assert published(state) == bag
    assert copies(published(state), token) == {cos_agent.KEY: 1}
    assert world.metrics_tokens == [token]


def test_a_failed_token_fetch_is_logged_without_the_token(ctx, world, resources, clock, caplog):
    caplog.set_level(logging.DEBUG)
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)
    state = ctx.run(ctx.on.relation_created(relation), state)
    token = token_in(collector_reads(published(state)))

    clock.advance(DEFAULT_JWT_TTL / 2)
    world.inject("GET", "/metrics-token", status=500, error="boom", details="")
    state = ctx.run(ctx.on.update_status(), with_bag(state, published(state)))
    assert token_in(collector_reads(published(state))) == token
    warnings = [line.message for line in ctx.juju_log if line.level == "WARNING"]
    assert any("metrics token not renewed" in w and "500 boom" in w for w in warnings)
    assert token is not None and token.split(".")[2] not in caplog.text


def test_no_relation_no_token(ctx, world, resources):
    ctx.run(ctx.on.update_status(), state_of(world, resources, configurator(EXAMPLE_UNIT)))
    assert world.metrics_tokens == []
    assert not any(r.path == "/metrics-token" for r in world.requests)


def test_a_pass_that_stopped_early_asks_garm_for_no_token(ctx, world, resources, clock):
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)
    state = ctx.run(ctx.on.relation_created(relation), state)
    token = token_in(collector_reads(published(state)))

    clock.advance(DEFAULT_JWT_TTL / 2)  # due
    world.inject("GET", "/controller", status=500, error="database is locked", times=5)
    asked = len(world.requests)
    state = ctx.run(ctx.on.update_status(), with_bag(state, published(state)))
    world.clear_faults()
    assert state.unit_status.name == "waiting"
    assert "/metrics-token" not in [r.path for r in world.requests[asked:]]
    assert token_in(collector_reads(published(state))) == token


def test_a_leader_whose_config_cannot_be_read_leaves_the_collector_as_it_was(
    ctx, world, resources
):
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)
    state = ctx.run(ctx.on.relation_created(relation), state)
    bag = published(state)
    broken = with_bag(state, bag, config={**state.config, "api-port": 0})
    state = ctx.run(ctx.on.config_changed(), broken)
    assert state.unit_status.name == "blocked"
    # Its scrape jobs and token stand: the port it would scrape is not known.
    assert published(state) == bag


def test_the_first_hook_without_secrets_keeps_the_scrape_jobs(ctx, world, resources):
    relation = collector()
    state = state_of(world, resources, configurator(EXAMPLE_UNIT), relation)
    state = dataclasses.replace(state, secrets=[*CONFIGURATOR_SECRETS])  # none of its own
    state = ctx.run(ctx.on.relation_created(relation), state)
    assert state.unit_status.name == "waiting"
    jobs = collector_reads(published(state)).metrics_scrape_jobs
    assert [j["job_name"] for j in jobs] == ["garm", "garm-charm"]

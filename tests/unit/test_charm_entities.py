"""A configurator unit moved between an org and a repo, through the real charm.

The databags are the real garm-configurator's: it publishes the keys of
``_configure_garm_relation`` (canonical/github-runner-operators,
``charms/garm-configurator/src/charm.py``) with ``update``, so the ``org`` or ``repo`` it
no longer uses stays behind. Hooks as Juju runs them: the configurator's change arrives
as ``relation-changed`` on the garm leader; the choice lives in the peer relation, so a
new leader reads it.
"""

from __future__ import annotations

import dataclasses

import ops
import pytest
from ops import testing

from charm import GarmCharm
from juju import entities
from juju.peers import PEERS
from tests.charm_states import (
    CONFIGURATOR_SECRETS,
    configurator,
    in_full,
    make_state,
    publish,
    relate_postgresql,
)
from tests.databags import EXAMPLE_UNIT

pytestmark = pytest.mark.usefixtures("machine")

CFG0 = "garm-configurator/0"


def real_configurator(**entity: str) -> dict[str, str]:
    """Unit 0's databag, every key the real configurator writes, with its org and/or repo."""
    phase_a = {
        "name": "sm-x64",
        "provider_name": "garm-configurator-0",
        "image_id": "0c8a2b6e-5d1f-4e3a-8b7c-9d0e1f2a3b4c",
        "flavor": "m1.small",
        "os_arch": "amd64",
        "min_idle_runner": "0",
        "max_runner": "2",
        "labels": "self-hosted,linux,x64",
        "runner_group": "Default",
        "pre_install_scripts": "",
        "dockerhub_mirror": "",
        "runner_http_proxy": "",
        "aproxy_exclude_addresses": "",
        "aproxy_redirect_ports": "",
        "otel_collector_endpoint": "",
        "pre_job_script": "",
        **entity,
    }
    # Phase B, as the configurator's leader adds it once the image is known.
    phase_b = {k: v for k, v in EXAMPLE_UNIT.items() if k.startswith(("openstack_", "github_"))}
    return {**phase_a, **phase_b}


def served(world) -> list[str]:
    """What each live (enabled) scaleset serves: ``org:<name>`` or ``repo:<owner/name>``."""
    return sorted(
        f"org:{s['org_name']}" if s.get("org_name") else f"repo:{s['repo_name']}"
        for s in world.scalesets()
        if s["enabled"]
    )


def changed(ctx, state: testing.State, data: dict[str, str]) -> testing.State:
    """The configurator unit published ``data``: garm's leader runs relation-changed."""
    relation = next(r for r in state.relations if r.endpoint == "garm-configurator")
    state, relation = publish(state, relation.id, 0, data)
    return ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)


def remembered(state: testing.State) -> dict[str, entities.Seen]:
    peer = state.get_relations(PEERS)[0]
    assert isinstance(peer, testing.PeerRelation)
    memory, whole = entities.read(peer.local_app_data.get(entities.KEY))
    assert whole
    return memory


def start(ctx, world, resources, data: dict[str, str]) -> testing.State:
    state = make_state(world, resources, configurator(data), testing.PeerRelation(PEERS, id=9))
    return ctx.run(ctx.on.install(), state)


def test_a_switch_from_org_to_repo_moves_the_scaleset_to_the_repo(ctx, world, resources, later):
    state = start(ctx, world, resources, real_configurator(org="example-org"))
    assert served(world) == ["org:example-org"]
    later()
    # juju config garm-configurator org= repo=example-org/ci: the org stays behind.
    state = changed(ctx, state, real_configurator(org="example-org", repo="example-org/ci"))
    for _ in range(4):
        later()
        state = ctx.run(ctx.on.update_status(), state)
    assert served(world) == ["repo:example-org/ci"]
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert remembered(state)[CFG0] == entities.Seen("example-org", "example-org/ci", "repo")


def test_a_switch_back_to_another_org_moves_it_again(ctx, world, resources, later):
    world.add_org("other-org")
    state = start(ctx, world, resources, real_configurator(org="example-org"))
    both = real_configurator(org="example-org", repo="example-org/ci")
    state = changed(ctx, state, both)
    back = real_configurator(repo="example-org/ci", org="other-org")  # key order differs
    state = changed(ctx, state, back)
    for _ in range(4):
        later()
        state = ctx.run(ctx.on.update_status(), state)
    assert served(world) == ["org:other-org"]
    assert remembered(state)[CFG0].use == "org"


def test_both_at_first_sight_block_naming_the_unit_and_leave_the_scaleset(
    ctx, world, resources, later
):
    # Upgraded from a revision that kept no memory, with a unit that had switched.
    state = start(ctx, world, resources, real_configurator(org="example-org"))
    before = world.scalesets()
    peer = state.get_relations(PEERS)[0]
    assert isinstance(peer, testing.PeerRelation)
    kept = {k: v for k, v in peer.local_app_data.items() if k != entities.KEY}
    forgotten = dataclasses.replace(peer, local_app_data=kept)
    state = dataclasses.replace(
        state, relations=[r for r in state.relations if r.id != peer.id] + [forgotten]
    )
    state = changed(ctx, state, real_configurator(org="example-org", repo="example-org/ci"))
    later()
    state = ctx.run(ctx.on.update_status(), state)
    assert in_full(ctx, state) == ops.BlockedStatus(
        f"Fix {CFG0}: publishes both org 'example-org' and repo 'example-org/ci' and which is "
        f"current is not known: juju run garm/leader choose-entity unit={CFG0} use=org "
        "(or use=repo)"
    )
    assert world.scalesets() == before  # nothing acted on a guess

    # The operator says which; the next pass follows it.
    state = ctx.run(ctx.on.action("choose-entity", params={"unit": CFG0, "use": "repo"}), state)
    assert ctx.action_results == {
        "unit": CFG0,
        "serves": "repo example-org/ci",
        "ignored": "org example-org",
        "next": "the next pass acts on it (now: juju run garm/leader reconcile)",
    }
    for _ in range(4):
        later()
        state = ctx.run(ctx.on.update_status(), state)
    assert served(world) == ["repo:example-org/ci"]


def test_a_new_leader_keeps_the_choice(ctx, world, resources, later):
    # On PostgreSQL from the start, so that another unit may take GARM over.
    state = ctx.run(
        ctx.on.install(), make_state(world, resources, testing.PeerRelation(PEERS, id=9))
    )
    state, database = relate_postgresql(ctx, state)
    relation = configurator(real_configurator(org="example-org"))
    state = dataclasses.replace(state, relations=[*state.relations, relation])
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert served(world) == ["org:example-org"]
    state = changed(ctx, state, real_configurator(org="example-org", repo="example-org/ci"))
    peer = state.get_relations(PEERS)[0]
    assert isinstance(peer, testing.PeerRelation)
    # garm/1 leads now: the relations come with it, the peer data as garm/0 left it.
    other = testing.Context(GarmCharm, app_name="garm", unit_id=1)
    fresh = make_state(
        world,
        resources,
        *[r for r in state.relations if r.endpoint == "garm-configurator"],
        testing.PeerRelation(PEERS, id=9, local_app_data=dict(peer.local_app_data)),
        database,
        secrets=list(state.secrets),
    )
    state = other.run(other.on.leader_elected(), fresh)
    for _ in range(4):
        later()
        state = other.run(other.on.update_status(), state)
    assert served(world) == ["repo:example-org/ci"]
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")


@pytest.mark.parametrize(
    ("params", "failure"),
    [
        ({"unit": "garm-configurator/9", "use": "org"}, "No related garm-configurator unit"),
        ({"unit": CFG0, "use": "repo"}, "Nothing to choose: garm-configurator/0 publishes only"),
    ],
)
def test_choose_entity_refuses_what_it_cannot_do(ctx, world, resources, params, failure):
    state = start(ctx, world, resources, real_configurator(org="example-org"))
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("choose-entity", params=params), state)
    assert failed.value.message.startswith(failure)


def test_choose_entity_on_a_non_leader_says_where_to_run_it(ctx, world, resources):
    both = real_configurator(org="example-org", repo="example-org/ci")
    state = make_state(world, resources, configurator(both), testing.PeerRelation(PEERS, id=9))
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(
            ctx.on.action("choose-entity", params={"unit": CFG0, "use": "org"}),
            dataclasses.replace(state, leader=False),
        )
    assert "juju run garm/leader choose-entity" in failed.value.message


def test_a_huge_value_published_beside_the_other_is_refused_not_quoted(ctx, world, resources):
    # Relation data is hostile: a status carries only values the contract allows.
    huge = real_configurator(org="example-org", repo="example-org/" + "x" * 200_000)
    state = make_state(world, resources, configurator(huge), testing.PeerRelation(PEERS, id=9))
    state = ctx.run(ctx.on.install(), state)
    assert state.unit_status == ops.BlockedStatus(
        f"Fix {CFG0}: invalid repo: longer than 255 characters"
    )
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("choose-entity", params={"unit": CFG0, "use": "org"}), state)
    assert failed.value.message == (
        f"{CFG0}'s data is refused, whichever it means: invalid repo: longer than 255 characters"
    )


def test_an_org_the_charm_cannot_register_is_put_to_the_operator(ctx, world, resources, later):
    # The configurator names an org GARM does not have, and its GitHub App's key was never
    # granted to garm: the charm has nothing to register the org with. It said "…is not
    # registered in GARM yet" forever; now the wait ends: blocked after 15 minutes, with
    # what to check, and it goes on by itself once the key is readable.
    password, key = CONFIGURATOR_SECRETS
    data = real_configurator(org="new-org")
    state = make_state(
        world, resources, configurator(data), testing.PeerRelation(PEERS, id=9), secrets=[password]
    )
    state = ctx.run(ctx.on.install(), state)
    statuses = []
    for _ in range(32):  # 16 minutes of the timer's passes
        later()
        state = ctx.run(ctx.on.update_status(), state)
        statuses.append(in_full(ctx, state))
    waiting = ops.WaitingStatus(
        f"Waiting for {CFG0}: organization 'new-org' is not registered in GARM yet; "
        f"{CFG0}: GitHub App key secret not readable yet"
    )
    assert statuses[:28] == [waiting] * 28  # 14 minutes: still a wait
    assert statuses[-1] == ops.BlockedStatus(
        f"Fix {CFG0}: organization 'new-org' is not registered in GARM after 15 minutes: "
        "check that its configurator publishes a GitHub App for it (github_app_id, "
        "github_installation_id, a readable key) and /var/log/garm/garm.log"
    )
    assert world.scalesets() == []
    granted = dataclasses.replace(state, secrets=[*state.secrets, key])
    state = ctx.run(ctx.on.update_status(), granted)
    assert served(world) == ["org:new-org"]
    assert in_full(ctx, state) == ops.ActiveStatus("1 scaleset in sync")

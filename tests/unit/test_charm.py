"""The charm through ops.testing, with real databags and GARM as the double over HTTP.

Each test is a sequence of hooks as Juju would run them; the charm's client talks to the
GARM double on loopback (``api-port`` points at it), so what a hook writes is what GARM
holds afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tomllib
from datetime import timedelta
from pathlib import Path

import ops
import pytest
from ops import testing

from garm.client import GarmClient
from juju.secrets import ADMIN_SECRET_LABEL, INTERNAL_SECRET_LABEL, strong_secret
from tests.charm_states import (
    CONFIGURATOR_SECRETS,
    INTERNAL_SECRET,
    backend,
    configurator,
    in_full,
    make_state,
    providers_in_config,
    publish,
    relate_postgresql,
    tags,
)
from tests.databags import (
    EXAMPLE_UNIT,
    KEY_SECRET_URI,
    PASSWORD_SECRET_URI,
    SECOND_UNIT,
    SOLE_UNIT,
)
from tests.garm_double import CONSOLIDATION_INTERVAL, FAKE_APP_KEY, GarmDouble
from tests.juju_events import reconcile_tick
from tests.postgresql import PASSWORD as DB_PASSWORD
from tests.postgresql import (
    REL_ID,
)
from tests.wire import T0

pytestmark = pytest.mark.usefixtures("machine")


def test_deploy_relate_creates_the_scaleset(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(ctx.on.install(), make_state(world, resources))
    assert state.unit_status == ops.BlockedStatus(
        "Integrate with garm-configurator: juju integrate garm garm-configurator"
    )
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    # Created, registered and enabled within the hook: nothing left in progress.
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    (created,) = world.scalesets()
    assert created["enabled"] is True
    assert created["max_runners"] == 10
    assert created["min_idle_runners"] == 1
    assert created["image"] == EXAMPLE_UNIT["image_id"]
    # The unit's proxy: the charm's aproxy script first, then the configurator's own.
    assert list(created["extra_specs"]["pre_install_scripts"]) == [
        "00-aproxy.sh",
        "pre_install.sh",
    ]
    assert created["extra_specs"]["pre_install_scripts"]["pre_install.sh"] == (
        "IyEvYmluL2Jhc2gKYXB0LWdldCBpbnN0YWxsIC15IGpx"
    )
    assert created["extra_specs"]["disable_updates"] is True
    # Its other options: a runner template of its own, in use from the first runner.
    [template] = [t for t in world.templates() if t["name"] == "garm-charm-lg-x64"]
    assert created["template_id"] == template["id"]
    assert "DOCKERHUB_MIRROR=https://registry-mirror.internal:5000" in template["data"]
    assert tags(world) == [["large", "lg-x64", "linux", "self-hosted", "x64"]]


def test_label_change_shows_every_phase_until_converged(ctx, world, resources, later):
    unit = dict(SOLE_UNIT)
    relation = configurator(unit)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    (old,) = world.scalesets()
    job = world.add_runner(old["id"], runner_status="active")
    later()

    state, relation = publish(state, relation.id, 0, {**unit, "labels": "self-hosted,linux,arm64"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    # The replacement's listener is not up yet: the old generation keeps the jobs.
    replacing = f"Replacing scaleset sm-x64 ({old['name']})"
    assert state.unit_status == ops.ActiveStatus(f"{replacing}: handing over")
    assert len(world.scalesets()) == 2

    later()
    state = ctx.run(reconcile_tick(), state)
    assert state.unit_status == ops.ActiveStatus(f"{replacing}: draining 1 runner")

    # Retired, the old scaleset has no listener: GARM hears of the job's end at its next
    # consolidation with GitHub, and the next pass deletes the empty scaleset.
    world.finish_job(job)
    later(CONSOLIDATION_INTERVAL)
    later()
    state = ctx.run(reconcile_tick(), state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert tags(world) == [["arm64", "linux", "self-hosted", "sm-x64"]]


# --- what GARM refuses: held back alone, on one back-off, the operator told -----------------


def test_a_refused_field_waits_out_its_back_off_and_holds_no_other_field(
    ctx, world, resources, later
):
    # A runner group GitHub does not know: GARM answers 404 to the update. Every PUT
    # went out again on every pass, 21 in 21, and held the image change with it.
    world.runner_groups = set()
    relation = configurator(SOLE_UNIT)
    peers = testing.PeerRelation("garm-peers", id=9)  # where the refusals are remembered
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0),
        make_state(world, resources, relation, peers),
    )
    (scaleset,) = world.scalesets()
    changed = {**SOLE_UNIT, "runner_group": "ghost", "image_id": "new-image-uuid"}
    state, relation = publish(state, relation.id, 0, changed)
    grouped = []
    for _ in range(21):  # the timer's passes, 30 s apart: ten minutes
        state = ctx.run(reconcile_tick(), state)
        grouped.append(sum("runner_group" in str(w.body) for w in world.writes()))
        later()
    # Tried at once with the image (refused whole), then alone to find the field GARM
    # refuses, then after 1, 2 and 4 minutes: five PUTs, not twenty-one.
    assert grouped[-1] == 5
    assert world.scalesets()[0]["image"] == "new-image-uuid"  # not held with it
    assert world.scalesets()[0].get("github-runner-group", "Default") == "Default"
    assert state.unit_status == ops.BlockedStatus(
        f"Fix GARM refused to update runner_group of scaleset sm-x64 ({scaleset['name']}) "
        "(4 times): runner group ghost does not exist"
    )
    # Fixed by the operator: sent at once, and the refusal forgotten.
    state, relation = publish(state, relation.id, 0, {**changed, "runner_group": "Default"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")


def test_a_refused_field_never_holds_a_flip_flop(ctx, world, resources, later):
    # Labels changed back while the old generation drains, in the same change as a field
    # GARM refuses: the re-enable rode in the refused PUT, so the labels asked for went
    # unserved and the interim generation served labels nobody asked for.
    world.runner_groups = set()
    unit = dict(SOLE_UNIT)
    relation = configurator(unit)
    peers = testing.PeerRelation("garm-peers", id=9)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0),
        make_state(world, resources, relation, peers),
    )
    (old,) = world.scalesets()
    world.add_runner(old["id"], runner_status="active")  # a job: the old one drains
    later()
    state, relation = publish(state, relation.id, 0, {**unit, "labels": "self-hosted,linux,arm64"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    later()
    state = ctx.run(reconcile_tick(), state)
    assert not next(s for s in world.scalesets() if s["id"] == old["id"]).get("enabled")
    # Back to the old labels, and a runner group GitHub does not know, at once.
    back = {**unit, "runner_group": "ghost"}
    state, relation = publish(state, relation.id, 0, back)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    again = next(s for s in world.scalesets() if s["id"] == old["id"])
    assert again.get("enabled") and again["max_runners"] == int(unit["max_runner"])
    for _ in range(3):
        later()
        state = ctx.run(reconcile_tick(), state)
    # The interim generation is retired and gone; the labels asked for are served.
    assert [s["id"] for s in world.scalesets()] == [old["id"]]
    assert "runner_group of scaleset sm-x64" in state.unit_status.message
    assert "creating replacement" not in state.unit_status.message


def test_departed_unit_scaleset_is_retired_and_removed(ctx, world, resources, later):
    relation = configurator(EXAMPLE_UNIT, SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1), make_state(world, resources, relation)
    )
    assert len(world.scalesets()) == 2
    for _ in range(3):
        later()  # the one that stays gets its warm runner (min-idle 1): it can take over

    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1), state)
    # No runner to drain (min-idle 0): retired, deleted and seen gone in the hook.
    assert len(world.scalesets()) == 1
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    # Once departed, Juju no longer lists the unit.
    gone = dataclasses.replace(relation, remote_units_data={0: EXAMPLE_UNIT})
    state = ctx.run(reconcile_tick(), dataclasses.replace(state, relations=[gone]))
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    (left,) = world.scalesets()
    assert "lg-x64" in [t["name"] for t in left["tags"]]


def a_runner_its_provider_cannot_delete(
    ctx, world, resources, *, deadline: int
) -> tuple[testing.State, dict, str]:
    """A label change retires a generation with one busy runner whose VM its provider
    cannot delete; ``deadline`` is ``drain-deadline-minutes``. The waits are timed in
    the peer relation. The state, the retired generation and the runner's name."""
    relation = configurator(SOLE_UNIT)
    peers = testing.PeerRelation("garm-peers", id=9)
    config = {"drain-deadline-minutes": deadline}
    state = make_state(world, resources, relation, peers, config=config)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    (old,) = world.scalesets()
    busy = world.add_runner(old["id"], runner_status="active")
    changed = {**SOLE_UNIT, "labels": "self-hosted,linux,arm64"}
    state, _ = publish(state, relation.id, 0, changed)
    world.provider_cannot_delete(busy)
    return state, old, busy


def recovers(ctx, state: testing.State, world, clock, old: dict) -> None:
    """The provider deletes VMs again: GARM's own retries remove the runner, and the
    timer's passes then delete the old generation and settle."""
    world.providers_recover()
    for _ in range(12):
        clock.advance(timedelta(seconds=30))
        world.tick()
        state = ctx.run(reconcile_tick(), state)
    assert old["id"] not in [s["id"] for s in world.scalesets()]
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")


def test_a_force_garm_never_carries_out_is_put_to_the_operator_and_not_sent_forever(
    ctx, world, resources, clock
):
    # Real GARM retries the failed delete with back-off and re-stamps updated_at each
    # time, so the runner is forced from the charm's own sighting (5 minutes in
    # pending_delete). But GARM's instance worker sleeps its back-off holding the
    # runner's lock and, woken, writes pending_delete back over the force: it is never
    # carried out. The charm sent it again after each round, every ~5 minutes, and said
    # "force-removing" forever. Now the wait ends: blocked, naming the runner, and no
    # force after that; once the provider deletes again, GARM's own retry removes it.
    state, old, busy = a_runner_its_provider_cannot_delete(ctx, world, resources, deadline=1)
    statuses = []
    for second in range(0, 45 * 60, 30):  # the timer's passes, every 30 s
        clock.advance(timedelta(seconds=30))
        world.tick()
        if second == 60:  # its job ends; the row goes pending_delete, and stays
            world.set_runner(busy, status="pending_delete", runner_status="terminated")
        state = ctx.run(reconcile_tick(), state)
        statuses.append((clock.now, in_full(ctx, state)))
    forced = [at for _, _, at, force in world.removals if force]
    assert forced and forced[0] - T0 <= timedelta(seconds=60 + 5 * 60 + 60)
    assert old["id"] in [s["id"] for s in world.scalesets()]  # GARM never carried it out
    stuck = (
        f"Stuck: sm-x64: GARM has not carried out the force-removal of runner {busy} of "
        f"{old['name']} in 15 minutes: its provider cannot delete the VM and GARM's own "
        "retries undo the force; fix the provider, or delete the VM (GARM then removes the "
        f"runner) (Replacing scaleset sm-x64 ({old['name']}): "
    )
    assert statuses[-1][1] == ops.BlockedStatus(stuck + "draining 1 runner)")
    blocked_at = next(
        at for at, status in statuses if status.name == "blocked" and stuck in status.message
    )
    # Blocked 15 minutes after the first force GARM took (a timer's pass later at most).
    assert blocked_at - forced[0] <= timedelta(minutes=15, seconds=30)
    # It was sent again after each of GARM's rounds, and never after the operator was asked.
    assert 1 < len(forced) <= 4 and forced[-1] < blocked_at
    recovers(ctx, state, world, clock, old)


def test_a_pass_that_cannot_look_at_a_wait_leaves_its_clock_standing(
    ctx, world, resources, clock, machine
):
    # A hook whose goal-state fails (a busy controller) holds every family: its pass does
    # not look at the drain. It forgot the wait on the force all the same, so the next
    # pass sent the force again and 15 minutes started afresh: with one such hook every
    # ten minutes the force was sent for good and nothing was ever put to the operator.
    state, _, busy = a_runner_its_provider_cannot_delete(ctx, world, resources, deadline=1)
    readable, blocked = machine.systemctl.goal_state, []
    for n, second in enumerate(range(0, 45 * 60, 30)):  # the timer's passes
        clock.advance(timedelta(seconds=30))
        world.tick()
        if second == 60:  # its job ends; the row goes pending_delete, and stays
            world.set_runner(busy, status="pending_delete", runner_status="terminated")
        machine.systemctl.goal_state = None if n % 20 == 19 else readable
        state = ctx.run(reconcile_tick(), state)
        if state.unit_status.name == "blocked":
            blocked.append(clock.now)
    forced = [at for _, _, at, force in world.removals if force]
    assert busy in [i["name"] for i in world.instances()]  # GARM never carried it out
    assert blocked and blocked[0] - forced[0] <= timedelta(minutes=15, seconds=30)
    assert forced[-1] < blocked[0]  # and it was never sent again after that


def test_relation_broken_sweeps_and_asks_for_the_integration(ctx, world, resources, later):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    later()
    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_broken(relation), state)
    assert world.scalesets() == []
    # Retired, deleted and seen gone in the hook: nothing left in progress.
    assert state.unit_status == ops.BlockedStatus(
        "Integrate with garm-configurator: juju integrate garm garm-configurator"
    )


def test_garm_down_is_waiting_and_deletes_nothing(ctx, world, resources):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    world.inject("GET", r"/instances/?", drop=True)
    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    assert state.unit_status.name == "waiting"
    assert state.unit_status.message.startswith("GARM unreachable, will retry")
    assert len(world.scalesets()) == 1
    assert world.writes()[-1].method == "POST"  # nothing after the create


def test_malformed_unit_is_named_and_the_other_still_reconciled(ctx, world, resources):
    bad = {**EXAMPLE_UNIT, "max_runner": "ten"}
    relation = configurator(bad, SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    assert state.unit_status == ops.BlockedStatus(
        "Fix garm-configurator/0: invalid max_runner: must be a whole number, got 'ten'"
    )
    assert tags(world) == [["linux", "self-hosted", "sm-x64", "x64"]]
    errors = [log for log in ctx.juju_log if log.level == "ERROR"]
    assert any("garm-configurator/0" in log.message for log in errors)


def test_invalid_data_leaves_the_live_scaleset_serving(ctx, world, resources):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    before = world.scalesets()
    state, relation = publish(state, relation.id, 0, {**SOLE_UNIT, "labels": "bad label!"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status == ops.BlockedStatus(
        "Fix garm-configurator/0: invalid labels: 'bad label!' is not a label "
        "(letters, digits and . _ : + -, at most 64)"
    )
    assert world.scalesets() == before


def test_unit_still_publishing_is_waiting_not_gone(ctx, world, resources):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    before = world.scalesets()
    phase_a = {k: v for k, v in SOLE_UNIT.items() if k != "image_id"}
    state, relation = publish(state, relation.id, 0, phase_a)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status == ops.WaitingStatus(
        "Waiting for garm-configurator/0: image_id not published yet"
    )
    assert world.scalesets() == before


def test_non_leader_stands_by_without_calling_garm(ctx, world, resources):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation, leader=False))
    assert state.unit_status == ops.ActiveStatus("Standing by: the leader unit runs GARM")
    assert world.requests == []


def test_empty_resource_blocks_with_the_remedy(ctx, world, resources):
    # Juju hands a charm an empty file for a resource nobody uploaded yet.
    empty = next(r for r in resources if r.name == "garm-provider-openstack")
    Path(empty.path).write_bytes(b"")
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert state.unit_status == ops.BlockedStatus(
        "Attach the garm-provider-openstack resource: "
        "juju attach-resource garm garm-provider-openstack=<file>"
    )
    assert world.requests == []


def test_invalid_config_blocks_naming_the_option(ctx, world, resources):
    state = make_state(
        world, resources, configurator(SOLE_UNIT), config={"scaleset-name-budget": 3}
    )
    state = ctx.run(ctx.on.config_changed(), state)
    assert state.unit_status == ops.BlockedStatus(
        "Invalid config: scaleset-name-budget: must be 6-64"
    )


def test_an_api_port_the_charm_itself_uses_is_refused(ctx, world, resources, machine):
    state = make_state(world, resources, configurator(SOLE_UNIT), config={"api-port": 9099})
    state = ctx.run(ctx.on.config_changed(), state)
    assert state.unit_status == ops.BlockedStatus(
        "Invalid config: api-port: 9099 is the charm's own metrics port: choose another"
    )
    assert not machine.paths.config_file.exists() and world.requests == []


def test_plan_action_shows_writes_without_doing_them(ctx, world, resources):
    state = make_state(world, resources, configurator(SOLE_UNIT))
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None
    assert ctx.action_results["writes"] == "2"
    # GARM's setup first: this unit's address is not yet GARM's.
    assert ctx.action_results["setup"] == (
        "set GARM's controller URLs (callback_url, metadata_url, webhook_url)"
    )
    assert ctx.action_results["actions"].startswith("create scaleset sm-")
    # The preview folds in its own create: nothing is left under way after it.
    assert ctx.action_results["phases"] == "converged"
    assert ctx.action_results["held"] == ctx.action_results["skipped"] == "none"
    assert world.writes() == []


def test_plan_tells_the_org_the_pass_registers_and_the_scaleset_it_unlocks(ctx, world, resources):
    # It never showed setup writes: "converged" while the next pass registered an org
    # and created a scaleset under it.
    unit = {**EXAMPLE_UNIT, "org": "new-org"}
    state = make_state(world, resources, configurator(unit))
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None
    setup = ctx.action_results["setup"].splitlines()
    assert setup[1:] == [
        "create GitHub credential app-123456-78901234 for garm-configurator/0",
        "register organization new-org for garm-configurator/0",
    ]
    assert ctx.action_results["actions"].startswith("create runner template")
    assert "create scaleset lg-x64" in ctx.action_results["actions"]
    assert world.writes() == [] and world.credentials() == []


def test_plan_lists_the_specs_the_pass_skips_and_why(ctx, world, resources):
    bad = {**SOLE_UNIT, "max_runner": "ten"}
    unknown = {**SECOND_UNIT, "provider_name": "garm-configurator-1", "name": "other"}
    state = make_state(world, resources, configurator(bad, unknown))
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None
    skipped = ctx.action_results["skipped"].splitlines()
    assert len(skipped) == 1, skipped  # told once, not as held and again as skipped
    assert skipped[0].startswith("garm-configurator/0: sm-x64: invalid max_runner")
    assert ctx.action_results["phases"] == "converged"


def test_reconcile_action_runs_a_pass_now(ctx, world, resources):
    state = make_state(world, resources, configurator(SOLE_UNIT))
    out = ctx.run(ctx.on.action("reconcile"), state)
    assert ctx.action_results is not None
    assert ctx.action_results["done"].startswith("create scaleset sm-")
    assert ctx.action_results["status"] == "active: 1 scaleset in sync"
    assert out.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert len(world.scalesets()) == 1


def test_get_credentials_on_the_leader(ctx, world, resources):
    ctx.run(ctx.on.action("get-credentials"), make_state(world, resources))
    assert ctx.action_results == {
        "username": world.username,
        "password": world.password,
        "email": "admin@garm.local",
    }


def test_get_credentials_elsewhere_fails_clearly(ctx, world, resources):
    with pytest.raises(testing.ActionFailed, match="leader"):
        ctx.run(ctx.on.action("get-credentials"), make_state(world, resources, leader=False))


def test_secrets_are_made_in_one_hook_and_used_from_the_next(ctx, world, resources, machine):
    state = dataclasses.replace(make_state(world, resources), secrets=[])
    state = ctx.run(ctx.on.install(), state)
    assert state.unit_status == ops.WaitingStatus(
        "Secrets created; GARM is set up on the next hook"
    )
    assert not machine.paths.config_file.exists()  # nothing used them yet
    (admin,) = [s for s in state.secrets if s.label == ADMIN_SECRET_LABEL]
    (internal,) = [s for s in state.secrets if s.label == INTERNAL_SECRET_LABEL]
    assert len(admin.tracked_content["password"]) == 32
    assert len(internal.tracked_content["db-passphrase"]) == 32
    again = ctx.run(ctx.on.update_status(), state)
    assert {s.label: s.tracked_content for s in again.secrets} == {
        s.label: s.tracked_content for s in state.secrets
    }
    config = tomllib.loads(machine.paths.config_file.read_text())
    assert config["database"]["passphrase"] == internal.tracked_content["db-passphrase"]


def test_no_secret_reaches_logs_status_or_other_action_output(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT, SECOND_UNIT)
    state = make_state(world, resources, relation)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    world.expire_tokens()
    state = ctx.run(ctx.on.update_status(), state)
    world.inject("GET", r"/scalesets/?", status=500)
    state = ctx.run(ctx.on.update_status(), state)
    ctx.run(ctx.on.action("plan"), state)
    plan_output = str(ctx.action_results)
    ctx.run(ctx.on.action("reconcile"), state)
    texts = [log.message for log in ctx.juju_log]
    texts += [state.unit_status.message, plan_output, str(ctx.action_results)]
    secrets = [
        world.password,
        *INTERNAL_SECRET.tracked_content.values(),
        "openstack-Pa55word",
        *(line for line in FAKE_APP_KEY.splitlines() if "-----" not in line),
    ]
    for text in texts:
        assert "Bearer" not in text
        for secret in secrets:
            assert secret not in text


def test_a_refused_github_key_waits_out_its_back_off_and_blocks_naming_the_unit(
    ctx, world, resources, later
):
    # A key with a PKCS#1 header and a corrupt body: GARM answers 400. The create and
    # the org's re-bind were re-sent on every pass, the status waiting for ever.
    corrupt = "-----BEGIN RSA PRIVATE KEY-----\nMIIB*not*base64\n-----END RSA PRIVATE KEY-----\n"
    secrets = [
        testing.Secret({"value": "openstack-Pa55word"}, id=PASSWORD_SECRET_URI),
        testing.Secret({"value": corrupt}, id=KEY_SECRET_URI),
    ]
    relation = configurator(EXAMPLE_UNIT)
    peers = testing.PeerRelation("garm-peers", id=9)
    state = make_state(world, resources, relation, peers, secrets=secrets)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    creates = []
    for _ in range(21):  # the timer's passes, 30 s apart: ten minutes
        creates.append(
            sum(w.method == "POST" and "/github/credentials" in w.path for w in world.writes())
        )
        later()
        state = ctx.run(reconcile_tick(), state)
    # At once, then after 1, 2 and 4 minutes: four in ten minutes, not twenty-two.
    assert creates[-1] == 4
    # The org's re-bind names a credential GARM does not have: it waits, unsent.
    assert not any(w.method == "PUT" and "/organizations" in w.path for w in world.writes())
    assert in_full(ctx, state) == ops.BlockedStatus(
        "Fix GARM refused to create GitHub credential app-123456-78901234 for "
        "garm-configurator/0 (4 times): invalid private_key_bytes"
    )
    # The operator fixes the key: a new request, sent at once, and the refusal forgotten.
    fixed = [s for s in state.secrets if s.id != KEY_SECRET_URI]
    fixed.append(testing.Secret({"value": FAKE_APP_KEY}, id=KEY_SECRET_URI))
    state = ctx.run(reconcile_tick(), dataclasses.replace(state, secrets=fixed))
    assert [c["name"] for c in world.credentials()] == ["app-123456-78901234"]
    assert in_full(ctx, state) == ops.ActiveStatus("1 scaleset in sync")


def test_a_create_github_refused_goes_again_at_once_when_the_key_is_rotated(
    ctx, world, resources, later
):
    # GitHub refused the scale set for the App's key; the operator rotates it. The
    # create does not wait out its back-off: the new key is what might let it through.
    world.inject(
        "POST",
        r"/organizations/.+/scalesets",
        status=400,
        details="creating scale set: POST https://api.github.com/...: 401 Bad credentials",
    )
    relation = configurator(EXAMPLE_UNIT)
    peers = testing.PeerRelation("garm-peers", id=9)
    state = make_state(world, resources, relation, peers)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status.name == "blocked" and world.scalesets() == []
    later()  # 30 s on: well within the minute's back-off
    rotated = FAKE_APP_KEY.replace(FAKE_APP_KEY.splitlines()[1], "cm90YXRlZCBrZXk=")
    secrets = [s for s in state.secrets if s.id != KEY_SECRET_URI]
    secrets.append(testing.Secret({"value": rotated}, id=KEY_SECRET_URI))
    state = ctx.run(reconcile_tick(), dataclasses.replace(state, secrets=secrets))
    assert [w.method for w in world.writes() if "/github/credentials" in w.path][-1] == "PUT"
    assert len(world.scalesets()) == 1
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")


def test_a_refused_controller_url_holds_nothing_else(ctx, world, resources, later):
    world.inject("PUT", r"/controller", status=500, times=100)
    relation = configurator(SOLE_UNIT)
    peers = testing.PeerRelation("garm-peers", id=9)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0),
        make_state(world, resources, relation, peers),
    )
    assert len(world.scalesets()) == 1  # GARM has URLs already: the pass goes on
    assert state.unit_status == ops.WaitingStatus(
        "GARM refused to set GARM's controller URLs (callback_url, metadata_url, webhook_url) "
        "(once): Server error; will retry"
    )
    puts = [len([w for w in world.writes() if w.path == "/controller"])]
    for _ in range(3):
        later()
        state = ctx.run(reconcile_tick(), state)
        puts.append(len([w for w in world.writes() if w.path == "/controller"]))
    assert puts == [1, 1, 2, 2]  # again after its minute, not on every pass


# --- GARM on the machine ----------------------------------------------------------------


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_resources_are_installed_configured_and_started(ctx, world, resources, machine):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))
    paths = machine.paths
    assert machine.users == ["garm"]
    # What was attached is what runs (the resource was checked, then installed).
    attached = next(r for r in resources if r.name == "garm").path
    assert paths.binary.read_bytes() == Path(attached).read_bytes()
    assert mode(paths.binary) == mode(paths.provider_binary) == 0o755
    assert mode(paths.config_dir) == mode(paths.data_dir) == 0o700
    # The charm's own directory (made first as the parent of resources/): root's alone.
    assert mode(paths.staging.parent) == mode(paths.staging) == 0o700
    config = tomllib.loads(paths.config_file.read_text())
    assert mode(paths.config_file) == 0o600
    assert config["apiserver"]["port"] == int(world.url.rsplit(":", 1)[1])
    assert config["database"]["backend"] == "sqlite3"
    assert config["database"]["sqlite3"]["db_file"] == str(paths.sqlite_file)
    assert len(config["database"]["passphrase"]) == 32
    (provider,) = config["provider"]
    assert provider["name"] == "garm-configurator-0"
    clouds = paths.config_dir / "providers" / "garm-configurator-0-clouds.yaml"
    assert "openstack-Pa55word" in clouds.read_text()
    assert mode(clouds) == 0o600
    assert "ExecStart=" in paths.unit_file.read_text()
    assert ["restart", "garm"] in machine.systemctl.calls
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")

    machine.systemctl.calls.clear()
    ctx.run(ctx.on.update_status(), state)
    assert ["restart", "garm"] not in machine.systemctl.calls  # nothing changed


def test_external_url_goes_to_garm_without_a_restart(ctx, world, resources, machine):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(EXAMPLE_UNIT)))
    machine.systemctl.calls.clear()
    changed = dataclasses.replace(state, config={**state.config, "external-url": "http://x:1"})
    ctx.run(ctx.on.config_changed(), changed)
    assert ["restart", "garm"] not in machine.systemctl.calls  # URLs live in GARM's DB
    assert world.controller()["callback_url"] == "http://x:1/api/v1/callbacks"


def test_a_new_provider_rewrites_the_config_and_restarts(ctx, world, resources, machine):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    machine.systemctl.calls.clear()
    second = {**EXAMPLE_UNIT, **SECOND_UNIT}  # Phase B too: a second OpenStack provider
    state, relation = publish(state, relation.id, 1, second)
    ctx.run(ctx.on.relation_changed(relation, remote_unit=1), state)
    config = tomllib.loads(machine.paths.config_file.read_text())
    assert [p["name"] for p in config["provider"]] == [
        "garm-configurator-0",
        "garm-configurator-1",
    ]
    assert ["restart", "garm"] in machine.systemctl.calls


def test_settled_garm_gets_no_write_on_the_next_hook(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT, SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    writes = len(world.writes())
    ctx.run(ctx.on.update_status(), state)
    assert world.writes()[writes:] == []


def test_credentials_and_entities_are_created_from_the_relation(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT)
    ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    (credential,) = world.credentials()
    assert (credential["name"], credential["app_id"], credential["installation_id"]) == (
        "app-123456-78901234",
        123456,
        78901234,
    )
    assert credential["private_key"] == FAKE_APP_KEY
    (org,) = [e for e in world.entities() if e["name"] == "example-org"]
    assert org["credentials_id"] == credential["id"]
    controller = world.controller()
    assert controller["metadata_url"].endswith("/api/v1/metadata")
    assert controller["callback_url"].endswith("/api/v1/callbacks")


def test_rotated_github_key_updates_the_credential(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    rotated = FAKE_APP_KEY.replace("-----END", "AAAA\n-----END")
    secrets = [s for s in state.secrets if s.id != KEY_SECRET_URI]
    secrets.append(testing.Secret({"value": rotated}, id=KEY_SECRET_URI))
    ctx.run(ctx.on.update_status(), dataclasses.replace(state, secrets=secrets))
    (credential,) = world.credentials()
    assert credential["private_key"] == rotated
    assert [r.method for r in world.writes() if "/github/credentials" in r.path] == [
        "POST",
        "PUT",
    ]


def test_a_pkcs8_github_key_is_refused_with_the_remedy(ctx, world, resources):
    pkcs8 = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"
    secrets = [
        testing.Secret({"value": "openstack-Pa55word"}, id=PASSWORD_SECRET_URI),
        testing.Secret({"value": pkcs8}, id=KEY_SECRET_URI),
    ]
    relation = configurator(EXAMPLE_UNIT)
    state = make_state(world, resources, relation, secrets=secrets)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert in_full(ctx, state) == ops.BlockedStatus(
        "Fix garm-configurator/0: GitHub App key must be PKCS#1 (BEGIN RSA PRIVATE KEY); "
        "convert it with openssl rsa -in key.pem -out key-rsa.pem -traditional"
    )
    assert world.credentials() == []


def test_unreadable_password_keeps_the_last_garm_config(ctx, world, resources, machine):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    before = machine.paths.config_file.read_text()
    secrets = [s for s in state.secrets if s.id != PASSWORD_SECRET_URI]
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, secrets=secrets))
    assert machine.paths.config_file.read_text() == before
    assert state.unit_status == ops.WaitingStatus(
        "Waiting for garm-configurator/0: OpenStack password secret not readable yet"
    )


@pytest.fixture
def fresh_garm(clock):
    """A GARM just started: no admin user, no controller URLs."""
    with GarmDouble(clock=clock, initialised=False, urls_set=False) as garm:
        garm.add_provider("garm-configurator-0")
        yield garm
        assert garm.unexpected == []


def test_bootstrap_of_a_fresh_garm_then_nothing_more(ctx, fresh_garm, resources):
    relation = configurator(EXAMPLE_UNIT)
    state = dataclasses.replace(
        make_state(fresh_garm, resources, relation),
        secrets=CONFIGURATOR_SECRETS,
    )
    state = ctx.run(ctx.on.install(), state)  # makes the secrets
    assert fresh_garm.requests == []
    state = ctx.run(ctx.on.start(), state)
    (admin,) = [s for s in state.secrets if s.label == ADMIN_SECRET_LABEL]
    paths = [(r.method, r.path) for r in fresh_garm.requests]
    assert ("POST", "/first-run") in paths
    assert ("PUT", "/controller") in paths
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    login = next(r for r in fresh_garm.requests if r.path == "/first-run")
    assert login.body["password"] == admin.tracked_content["password"]

    first_runs = paths.count(("POST", "/first-run"))
    writes = len(fresh_garm.writes())
    ctx.run(ctx.on.update_status(), state)
    assert [(r.method, r.path) for r in fresh_garm.requests].count(("POST", "/first-run")) == (
        first_runs
    )
    assert fresh_garm.writes()[writes:] == []


def test_postgresql_related_switches_garm_to_it(ctx, world, resources, machine):
    state = ctx.run(ctx.on.install(), make_state(world, resources))
    assert backend(machine) == "sqlite3"
    machine.systemctl.calls.clear()
    state, _ = relate_postgresql(ctx, state)

    config = tomllib.loads(machine.paths.config_file.read_text())
    assert config["database"]["backend"] == "postgresql"
    assert config["database"]["postgresql"]["hostname"] == "db.internal"
    assert config["database"]["postgresql"]["port"] == 5433
    assert config["database"]["postgresql"]["password"] == DB_PASSWORD
    assert ["restart", "garm"] in machine.systemctl.calls
    assert all(DB_PASSWORD not in log.message for log in ctx.juju_log)


def test_garm_holding_scalesets_in_sqlite_is_not_moved(ctx, world, resources, machine):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    state, _ = relate_postgresql(ctx, state)
    assert backend(machine) == "sqlite3"
    assert state.unit_status.name == "blocked"
    assert state.unit_status.message.startswith(
        "Fix postgresql: GARM keeps scalesets in its local sqlite database"
    )


def test_a_lost_postgresql_answer_or_relation_never_falls_back_to_sqlite(
    ctx, world, resources, machine
):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    world.reset()  # a GARM with no scalesets yet
    world.add_provider("garm-configurator-0")
    world.add_org("example-org")
    state, database = relate_postgresql(ctx, state)
    assert backend(machine) == "postgresql"

    unreadable = [
        s
        for s in state.secrets
        if s.owner == "app" or s.id in {PASSWORD_SECRET_URI, KEY_SECRET_URI}
    ]
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, secrets=unreadable))
    assert backend(machine) == "postgresql"
    assert state.unit_status.name == "waiting"

    broken = dataclasses.replace(state, secrets=unreadable)
    state = ctx.run(ctx.on.relation_broken(broken.get_relation(database.id)), broken)
    gone = [r for r in state.relations if r.id != REL_ID]
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations=gone))
    assert backend(machine) == "postgresql"
    assert state.unit_status == ops.BlockedStatus(
        "Fix postgresql: GARM's data is in PostgreSQL: integrate postgresql again"
    )


def test_generated_secrets_have_every_character_class():
    for length in (32, 64):
        value = strong_secret(length)
        assert len(value) == length
        assert any(c.islower() for c in value)
        assert any(c.isupper() for c in value)
        assert any(c.isdigit() for c in value)
        assert any(not c.isalnum() for c in value)


def test_a_unit_that_lost_leadership_stops_its_garm(ctx, world, resources, machine):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert machine.paths.unit_file.exists()
    machine.systemctl.calls.clear()
    follower = dataclasses.replace(state, leader=False)
    state = ctx.run(ctx.on.update_status(), follower)  # update-status is the clock
    assert ["stop", "garm"] in machine.systemctl.calls
    assert ["disable", "garm.service"] in machine.systemctl.calls
    assert state.unit_status == ops.ActiveStatus("Standing by: the leader unit runs GARM")


def test_a_departed_units_provider_stays_while_its_scaleset_drains(
    ctx, world, resources, machine, later
):
    second = {**EXAMPLE_UNIT, **SECOND_UNIT}  # with Phase B: provider garm-configurator-1
    relation = configurator(EXAMPLE_UNIT, second)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1), make_state(world, resources, relation)
    )
    assert providers_in_config(machine) == ["garm-configurator-0", "garm-configurator-1"]
    (draining,) = [s for s in world.scalesets() if s["provider_name"] == "garm-configurator-1"]
    job = world.add_runner(draining["id"], runner_status="active")
    for _ in range(3):
        later()  # the scaleset that stays gets its warm runner: it can take over

    gone = dataclasses.replace(relation, remote_units_data={0: EXAMPLE_UNIT})
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations=[gone]))
    assert state.unit_status.message.startswith("Removing scaleset")
    assert providers_in_config(machine) == ["garm-configurator-0", "garm-configurator-1"]

    world.finish_job(job)  # unseen while retired, until GARM's next consolidation
    later(CONSOLIDATION_INTERVAL)
    later()
    later()
    state = ctx.run(ctx.on.update_status(), state)  # deleted, seen gone
    state = ctx.run(ctx.on.update_status(), state)  # its provider no longer used
    assert providers_in_config(machine) == ["garm-configurator-0"]
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")


def test_invalid_data_keeps_the_units_provider(ctx, world, resources, machine):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    state, relation = publish(state, relation.id, 0, {**EXAMPLE_UNIT, "labels": "bad label!"})
    ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert providers_in_config(machine) == ["garm-configurator-0"]


def test_a_model_proxy_without_scheme_is_given_one_for_garm(
    ctx, world, resources, machine, monkeypatch
):
    monkeypatch.setenv("JUJU_CHARM_HTTP_PROXY", "10.0.0.1:3128")
    monkeypatch.setenv("JUJU_CHARM_NO_PROXY", "127.0.0.1,localhost")
    ctx.run(ctx.on.install(), make_state(world, resources))
    proxy = tomllib.loads(machine.paths.config_file.read_text())["proxy"]
    assert proxy["http_proxy"] == "http://10.0.0.1:3128"
    assert proxy["no_proxy"] == "127.0.0.1,localhost"


# --- hostile configurator data: named in status and logs, nothing else touched ----------

BAD_UNITS = {
    "missing name": {"name": None},
    "missing flavor": {"flavor": None},
    "missing os_arch": {"os_arch": None},
    "missing max_runner": {"max_runner": None},
    "missing provider_name": {"provider_name": None},
    "missing org and repo": {"org": None},
    "both org and repo": {"repo": "owner/name"},
    "max_runner not a number": {"max_runner": "ten"},
    "max_runner negative": {"max_runner": "-3"},
    "max_runner zero": {"max_runner": "0"},
    "max_runner huge": {"max_runner": "9" * 40},
    "max_runner float": {"max_runner": "2.5"},
    "max_runner unicode digits": {"max_runner": "٣"},
    "min above max": {"min_idle_runner": "11"},
    "name with slash": {"name": "a/b"},
    "name with comma": {"name": "a,b"},
    "name with newline": {"name": "ci\nrm -rf /"},
    "name with shell": {"name": "$(reboot)"},
    "name unicode": {"name": "ciş"},
    "name too long": {"name": "n" * 65},
    "name huge": {"name": "n" * 100_000},
    "label with space": {"labels": "linux,has space"},
    "label with newline": {"labels": "linux\nx64"},
    "label injection": {"labels": "linux,'; DROP TABLE tags; --"},
    "too many labels": {"labels": ",".join(f"l{i}" for i in range(40))},
    "label too long": {"labels": "l" * 65},
    "os_arch unknown": {"os_arch": "sparc64"},
    "org with spaces": {"org": "my org"},
    "repo without owner": {"org": None, "repo": "justname"},
    "runner_group newline": {"runner_group": "Default\n[database]"},
    "flavor control char": {"flavor": "m1\x07small"},
    "scripts not json": {"pre_install_scripts": "{not json"},
    "scripts not an object": {"pre_install_scripts": '["echo hi"]'},
    "script name traversal": {"pre_install_scripts": '{"../../etc/cron.d/x": "echo"}'},
    "scripts huge": {"pre_install_scripts": '{"a.sh": "' + "x" * 70_000 + '"}'},
    "duplicate name": {"name": "lg-x64", "provider_name": "garm-configurator-0"},
}


@pytest.mark.parametrize("change", BAD_UNITS.values(), ids=BAD_UNITS.keys())
def test_a_hostile_unit_is_named_and_nothing_else_is_touched(
    ctx, world, resources, change, caplog
):
    good = configurator(EXAMPLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(good, remote_unit=0), make_state(world, resources, good)
    )
    before = world.scalesets()
    writes = len(world.writes())

    bad = {k: v for k, v in {**SECOND_UNIT, **change}.items() if v is not None}
    state, relation = publish(state, good.id, 1, bad)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=1), state)

    assert state.unit_status.name == "blocked"
    assert "garm-configurator/1" in state.unit_status.message
    assert len(state.unit_status.message) < 400
    errors = [log.message for log in ctx.juju_log if log.level == "ERROR"]
    assert any("garm-configurator/1" in message for message in errors)
    assert world.scalesets() == before  # the serving scaleset is untouched
    assert [w for w in world.writes()[writes:] if w.path.startswith("/scalesets")] == []


# --- hostile notes: what a scaleset's extended_state holds never stops a pass -----------

EDGE_NOTES = {
    # No UTC form: astimezone raised OverflowError, and no scaleset was reconciled.
    "edge with an offset": "retired-at=9999-12-31T23:59:59-01:00",
    "offset of a day": "enabled-at=2026-01-01T00:00:00+24:00",
    # A valid stamp, far ahead: the drain deadline added to it overflowed.
    "far future": "retired-at=9999-12-31T23:59:59Z;kept=2;retry-at=9999-12-31T23:59:59Z",
}


@pytest.mark.parametrize("notes", EDGE_NOTES.values(), ids=EDGE_NOTES.keys())
def test_odd_notes_on_a_scaleset_stop_no_pass(ctx, world, resources, later, notes):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    (scaleset,) = world.scalesets()
    with contextlib.closing(GarmClient(world.url, world.username, world.password)) as client:
        client.update_scaleset(scaleset["id"], {"extended_state": notes})
    later()
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    # And the scaleset a departed unit leaves, with such notes, still goes.
    relation = state.get_relation(relation.id)
    with contextlib.closing(GarmClient(world.url, world.username, world.password)) as client:
        client.update_scaleset(
            scaleset["id"], {"enabled": False, "max_runners": 0, "extended_state": notes}
        )
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    later()
    gone = dataclasses.replace(relation, remote_units_data={})  # Juju lists it no more
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations=[gone]))
    assert world.scalesets() == []


def test_get_credentials_needs_only_the_admin_secret(ctx, world, resources):
    state = make_state(world, resources)
    state = dataclasses.replace(
        state, secrets=[s for s in state.secrets if s.label != INTERNAL_SECRET_LABEL]
    )
    ctx.run(ctx.on.action("get-credentials"), state)
    assert ctx.action_results == {
        "username": world.username,
        "password": world.password,
        "email": "admin@garm.local",
    }


def test_a_runner_garm_cannot_delete_is_told_though_no_force_may_be_sent(
    ctx, world, resources, clock
):
    # drain-deadline-minutes=0: no job is ever cut short, so the charm never forces. The
    # runner's job ended and its provider fails every delete: it said "draining 1 runner"
    # for ever. Now the wait on GARM's delete ends too: blocked after 30 minutes, with no
    # force sent; once the provider deletes again, GARM's retry removes it.
    state, old, busy = a_runner_its_provider_cannot_delete(ctx, world, resources, deadline=0)
    statuses, gone_at = [], clock.now + timedelta(seconds=90)
    for second in range(0, 40 * 60, 30):  # the timer's passes
        clock.advance(timedelta(seconds=30))
        world.tick()
        if second == 60:  # its job ends; the row goes pending_delete, and stays
            world.set_runner(busy, status="pending_delete", runner_status="terminated")
        state = ctx.run(reconcile_tick(), state)
        statuses.append((clock.now, in_full(ctx, state)))
    stuck = (
        f"Stuck: sm-x64: GARM has not deleted runner {busy} of {old['name']} in 30 minutes: "
        "its provider cannot delete the VM (/var/log/garm/garm.log); it is force-removed "
        f"only past drain-deadline-minutes (Replacing scaleset sm-x64 ({old['name']}): "
        "draining 1 runner)"
    )
    blocked = [at for at, status in statuses if status == ops.BlockedStatus(stuck)]
    assert blocked and timedelta(minutes=30) <= blocked[0] - gone_at <= timedelta(minutes=31)
    assert blocked[-1] == clock.now
    assert not [r for r in world.removals if r[3]]  # never forced
    recovers(ctx, state, world, clock, old)

"""A settled hook's requests to GARM, through the real charm (issue #21: at most 8).

A hook with nothing to do reads GARM and writes nothing. Two of what it used to spend
are gone: the login (GARM's admin token is kept on the machine across hooks,
``garm.admin_token``) and the second read of GARM's controller (no probe of a GARM that
was not restarted and that systemd says runs: the setup's authenticated read proves it
answers). What is left is the controller, the six lists of the scaleset pass and the
GitHub credentials.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import stat

import ops
import pytest
from ops import testing

from juju import machine as on_machine
from juju.secrets import ADMIN_SECRET_LABEL
from tests.charm_states import backend, configurator, make_state, relate_postgresql
from tests.databags import EXAMPLE_UNIT, SECOND_UNIT
from tests.garm_double import GarmDouble

pytestmark = pytest.mark.usefixtures("machine")

SETTLED_MOST = 8
IN_SYNC = ops.ActiveStatus("2 scalesets in sync")


def hook_requests(world: GarmDouble, start: int) -> list[tuple[str, str]]:
    return [(r.method, r.path.rstrip("/")) for r in world.requests[start:]]


def converged(ctx, world, resources) -> testing.State:
    """The state after a first hook that created both scalesets."""
    relation = configurator(EXAMPLE_UNIT, SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    assert state.unit_status == IN_SYNC
    return state


def logged(ctx, caplog) -> str:
    return caplog.text + "\n".join(line.message for line in ctx.juju_log)


def test_a_settled_hook_does_not_log_in_and_reads_the_controller_once(
    ctx, world, resources, machine, caplog
):
    caplog.set_level(logging.DEBUG)
    state = converged(ctx, world, resources)
    start = len(world.requests)
    state = ctx.run(ctx.on.update_status(), state)
    sent = hook_requests(world, start)
    assert state.unit_status == IN_SYNC
    assert len(sent) <= SETTLED_MOST, sent
    assert ("POST", "/auth/login") not in sent
    assert sent.count(("GET", "/controller")) == 1
    assert all(r.status == 200 for r in world.requests[start:])
    assert [r.method for r in world.requests[start:]] == ["GET"] * len(sent)

    # GARM voids every token (as when it restarts with another JWT secret): the next
    # hook is answered 401 once, logs in once, and keeps the new token for the next.
    kept = machine.paths.admin_token_file.read_text()
    world.expire_tokens()
    start = len(world.requests)
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == IN_SYNC
    assert hook_requests(world, start).count(("POST", "/auth/login")) == 1
    assert machine.paths.admin_token_file.read_text() != kept
    start = len(world.requests)
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == IN_SYNC
    assert ("POST", "/auth/login") not in hook_requests(world, start)
    assert {r.status for r in world.requests[start:]} == {200}

    token_file = machine.paths.admin_token_file
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    told = [state.unit_status.message, *(str(data) for data in databags(state))]
    for token in (json.loads(text)["token"] for text in (kept, token_file.read_text())):
        signature = token.rsplit(".", 1)[-1]
        assert len(signature) > 20
        for text in (logged(ctx, caplog), *told):
            assert signature not in text


def databags(state: testing.State) -> list[object]:
    """Every databag this unit and its application write."""
    return [bag for r in state.relations for bag in (r.local_app_data, r.local_unit_data)]


def test_garbage_in_the_token_file_is_no_token(ctx, world, resources, machine):
    state = converged(ctx, world, resources)
    machine.paths.admin_token_file.write_bytes(b"\xff not json {")
    start = len(world.requests)
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == IN_SYNC
    assert hook_requests(world, start).count(("POST", "/auth/login")) == 1
    assert '"token"' in machine.paths.admin_token_file.read_text()


def test_a_password_garm_refuses_drops_the_token(ctx, world, resources, machine):
    state = converged(ctx, world, resources)
    # The admin's password changed behind the charm's back: GARM refuses the kept token
    # (its password generation moved on) and the login with the charm's password.
    world.change_admin_password("An0ther-Passw0rd-Entirely")
    (admin,) = [s for s in state.secrets if s.label == ADMIN_SECRET_LABEL]
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == ops.BlockedStatus("GARM refused the admin login kept by the charm")
    assert not machine.paths.admin_token_file.exists()
    # The secret brought back in line: one login, the token kept again.
    content = {**admin.tracked_content, "password": world.password}
    secret = dataclasses.replace(admin, tracked_content=content, latest_content=content)
    secrets = [secret if s.label == ADMIN_SECRET_LABEL else s for s in state.secrets]
    start = len(world.requests)
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, secrets=secrets))
    assert state.unit_status == IN_SYNC
    assert hook_requests(world, start).count(("POST", "/auth/login")) == 1
    assert machine.paths.admin_token_file.exists()


def test_the_actions_use_the_kept_token(ctx, world, resources, machine):
    state = converged(ctx, world, resources)
    token = json.loads(machine.paths.admin_token_file.read_text())["token"]
    start = len(world.requests)
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None and ctx.action_results["writes"] == "0"
    told = [str(ctx.action_results)]
    controller = world.controller()["controller_id"]
    ctx.run(ctx.on.action("adopt-garm", params={"controller-id": controller}), state)
    assert ctx.action_results is not None and "adopted" in ctx.action_results
    told.append(str(ctx.action_results))
    assert ("POST", "/auth/login") not in hook_requests(world, start)
    assert all(token.rsplit(".", 1)[-1] not in text for text in told)


def test_a_restarted_garm_is_waited_for(ctx, world, resources, machine, monkeypatch):
    state = converged(ctx, world, resources)
    monkeypatch.setattr(on_machine, "START_TIMEOUT_SECONDS", 0.3)
    # Down, as systemd says: restarted, then waited for; it does not answer in time.
    machine.systemctl.active = False
    world.inject("GET", r"/controller/?", drop=True, times=1000)
    state = ctx.run(ctx.on.update_status(), state)
    assert ["restart", "garm"] in machine.systemctl.calls
    assert state.unit_status == ops.WaitingStatus("Waiting for GARM to answer on its API port")
    # Running, as systemd says, and not answering: not probed, the setup's read tells.
    machine.systemctl.calls.clear()
    state = ctx.run(ctx.on.update_status(), state)
    assert ["restart", "garm"] not in machine.systemctl.calls
    assert state.unit_status.name == "waiting"
    assert state.unit_status.message.startswith("GARM unreachable, will retry")
    world.clear_faults()
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == IN_SYNC


def test_removing_the_charm_deletes_the_token(ctx, world, resources, machine):
    state = converged(ctx, world, resources)
    assert machine.paths.admin_token_file.exists()
    ctx.run(ctx.on.remove(), state)
    assert not machine.paths.admin_token_file.exists()


def test_the_metrics_token_is_asked_for_with_the_same_login(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT, SECOND_UNIT)
    cos = testing.Relation(
        "cos-agent", remote_app_name="opentelemetry-collector", id=7, remote_units_data={0: {}}
    )
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0),
        make_state(world, resources, relation, cos),
    )
    assert state.unit_status == IN_SYNC
    assert len(world.metrics_tokens) == 1
    assert hook_requests(world, 0).count(("POST", "/auth/login")) == 1


def test_the_scalesets_read_to_choose_a_database_use_the_kept_login(
    ctx, world, resources, machine
):
    state = converged(ctx, world, resources)
    start = len(world.requests)
    state, _ = relate_postgresql(ctx, state)
    # GARM's scalesets were read to choose: they stay on sqlite, the operator told why.
    assert backend(machine) == "sqlite3"
    assert state.unit_status.message.startswith("Fix postgresql: GARM keeps scalesets")
    assert hook_requests(world, start)[0] == ("GET", "/scalesets")
    assert ("POST", "/auth/login") not in hook_requests(world, start)

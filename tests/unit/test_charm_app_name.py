"""The charm deployed under another name: every hint names the application as deployed.

The charm is ``garm-machine``, deployed as ``garm`` in every example; an operator may
deploy it as ``garm-ci`` (``juju deploy garm-machine garm-ci``), and then a status or an
action's answer that says ``juju run garm/leader …`` or ``juju integrate garm …`` sends
them to an application that is not there. Juju names the application to the charm in
every hook (its unit is ``garm-ci/0``): these tests run the real charm under that name,
reach each message that names a command, and read it. The last one reads ``src/`` itself:
no string literal there names the default application in a command.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import ops
import pytest
from ops import testing

from charm import GarmCharm
from juju.peers import PEERS
from tests.binaries import fake_garm
from tests.charm_states import configurator, in_full, make_state
from tests.databags import SOLE_UNIT

pytestmark = pytest.mark.usefixtures("machine")

APP = "garm-ci"
SRC = Path(__file__).resolve().parents[2] / "src"
# A command for the charm's default name: ``juju run garm/leader``, ``juju integrate
# garm:certificates``, ``juju attach-resource garm garm=…``, ``juju config garm …``.
DEFAULT_NAME = re.compile(r"garm/leader|juju [a-z-]+ garm[ :/]")
BOTH = {**SOLE_UNIT, "repo": "example-org/ci"}
CFG0 = "garm-configurator/0"
LEADER_ACTIONS = (
    "reconcile",
    "plan",
    "get-credentials",
    "show-scalesets",
    "adopt-garm",
    "choose-entity",
    "start-empty-garm",
)


@pytest.fixture
def ci() -> testing.Context:
    """The charm as Juju runs it when deployed as ``garm-ci``."""
    return testing.Context(GarmCharm, app_name=APP)


def names_the_app(text: str, command: str) -> None:
    assert command in text
    assert DEFAULT_NAME.search(text) is None, text


def logged(ctx: testing.Context) -> str:
    return "\n".join(line.message for line in ctx.juju_log)


@pytest.mark.parametrize("action", LEADER_ACTIONS)
def test_an_action_on_a_follower_names_the_leader_as_deployed(ci, world, resources, action):
    peer = testing.PeerRelation(PEERS, id=9)
    state = make_state(world, resources, configurator(SOLE_UNIT), peer, leader=False)
    params = {"adopt-garm": {"controller-id": "new"}, "choose-entity": {"unit": CFG0}}
    with pytest.raises(testing.ActionFailed) as failed:
        ci.run(ci.on.action(action, params=params.get(action, {})), state)
    names_the_app(failed.value.message, f"juju run {APP}/leader {action}")


def test_a_missing_resource_names_the_application_to_attach_it_to(ci, world, resources):
    # Juju hands a charm an empty file for a resource nobody uploaded yet.
    Path(next(r for r in resources if r.name == "garm").path).write_bytes(b"")
    state = ci.run(ci.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert isinstance(state.unit_status, ops.BlockedStatus)
    names_the_app(state.unit_status.message, f"juju attach-resource {APP} garm=<file>")


def test_a_wrong_resource_names_the_application_to_attach_it_to(ci, world, resources):
    cli = Path(next(r for r in resources if r.name == "garm").path)
    fake_garm(cli, main="github.com/cloudbase/garm/cmd/garm-cli")
    state = ci.run(ci.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert isinstance(in_full(ci, state), ops.BlockedStatus)
    assert in_full(ci, state).message.startswith("Resource garm is not GARM: ")
    names_the_app(in_full(ci, state).message, f"juju attach-resource {APP} garm=<file>")
    names_the_app(logged(ci), f"juju attach-resource {APP} garm=<file>")


def test_no_configurator_names_the_application_to_integrate(ci, world, resources):
    state = ci.run(ci.on.install(), make_state(world, resources))
    assert state.unit_status == ops.BlockedStatus(
        f"Integrate with garm-configurator: juju integrate {APP} garm-configurator"
    )
    names_the_app(state.unit_status.message, f"juju integrate {APP} garm-configurator")


def test_plain_http_is_logged_naming_the_application_to_integrate(ci, world, resources):
    ci.run(ci.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    names_the_app(logged(ci), f"juju integrate {APP}:certificates <provider>")


def test_adopt_garm_answers_naming_the_application(ci, world, resources):
    peer = testing.PeerRelation(PEERS, id=9)
    state = ci.run(ci.on.install(), make_state(world, resources, configurator(SOLE_UNIT), peer))
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    garm = world.controller()["controller_id"]
    with pytest.raises(testing.ActionFailed) as failed:
        ci.run(ci.on.action("adopt-garm", params={"controller-id": "new"}), state)
    assert failed.value.message.startswith(f"GARM in sqlite on {APP}/0 is not empty")
    names_the_app(failed.value.message, f"juju run {APP}/leader adopt-garm controller-id={garm}")
    ci.run(ci.on.action("adopt-garm", params={"controller-id": garm}), state)
    assert ci.action_results is not None
    names_the_app(ci.action_results["next"], f"juju run {APP}/leader reconcile")


def test_another_garm_in_the_charms_place_names_the_action_to_adopt_it(ci, world, resources):
    peer = testing.PeerRelation(PEERS, id=9)
    state = ci.run(ci.on.install(), make_state(world, resources, configurator(SOLE_UNIT), peer))
    # GARM's sqlite data replaced by another GARM's (restored from another backup, say).
    world.reset()
    world.add_provider("garm-configurator-0")
    other = world.controller()["controller_id"]
    state = ci.run(ci.on.update_status(), state)
    assert isinstance(in_full(ci, state), ops.BlockedStatus)
    assert in_full(ci, state).message.startswith(f"GARM in sqlite on {APP}/0 is {other}")
    adopt = f"juju run {APP}/leader adopt-garm controller-id={other}"
    names_the_app(in_full(ci, state).message, adopt)


def test_a_unit_publishing_org_and_repo_names_the_action_to_choose(ci, world, resources):
    peer = testing.PeerRelation(PEERS, id=9)
    state = ci.run(ci.on.install(), make_state(world, resources, configurator(BOTH), peer))
    assert isinstance(in_full(ci, state), ops.BlockedStatus)
    names_the_app(in_full(ci, state).message, f"juju run {APP}/leader choose-entity unit={CFG0}")
    state = ci.run(ci.on.action("choose-entity", params={"unit": CFG0, "use": "org"}), state)
    assert ci.action_results is not None
    names_the_app(ci.action_results["next"], f"juju run {APP}/leader reconcile")


def test_a_move_the_charm_infers_is_logged_naming_the_action_to_undo_it(ci, world, resources):
    peer = testing.PeerRelation(PEERS, id=9)
    state = ci.run(ci.on.install(), make_state(world, resources, configurator(SOLE_UNIT), peer))
    # The configurator moved to a repo; its org stays behind in its databag.
    relation = state.get_relation(1)
    assert isinstance(relation, testing.Relation)
    moved = dataclasses.replace(relation, remote_units_data={0: BOTH})
    relations = [moved if r.id == relation.id else r for r in state.relations]
    ci.run(
        ci.on.relation_changed(moved, remote_unit=0),
        dataclasses.replace(state, relations=relations),
    )
    names_the_app(logged(ci), f"juju run {APP}/leader choose-entity")


# ------------------------------------------------------------------ no literal left


def literals(path: Path) -> Iterator[tuple[int, str]]:
    """Every string literal of a module, the literal parts of f-strings included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def default_name_commands(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: {text!r}"
        for path in sorted(root.rglob("*.py"))
        for line, text in sorted(literals(path))
        if DEFAULT_NAME.search(text)
    ]


def test_no_literal_in_the_source_names_the_default_application_in_a_command():
    assert default_name_commands(SRC) == []


def test_a_planted_literal_command_is_found(tmp_path: Path):
    (tmp_path / "hint.py").write_text(
        'HINT = "juju run garm/leader plan"\n'
        'def f(x):\n    return f"juju config garm paused={x}"\n'
        'OK = f"juju run {x}/leader plan"\n'
    )
    assert default_name_commands(tmp_path) == [
        "hint.py:1: 'juju run garm/leader plan'",
        "hint.py:3: 'juju config garm paused='",
    ]


def test_a_status_with_the_longest_real_names_fits_juju_status_and_is_told_in_full(
    world, resources
):
    """Names at their limits: the line says what and where, the log and ``reconcile`` the rest."""
    app = "garm-for-the-platform-teams-self-hosted-runners-x64"  # about Juju's longest
    configurators = "garm-configurator-for-the-platform-team-x64-large"
    org = "o" * 39  # GitHub's longest login
    world.add_provider(f"{configurators}-0")
    world.add_org(org)
    data = {**SOLE_UNIT, "provider_name": f"{configurators}-0", "org": org}
    relation = testing.Relation(
        "garm-configurator",
        remote_app_name=configurators,
        remote_units_data={0: {**data, "repo": f"{org}/{'r' * 100}"}},
    )
    ctx = testing.Context(GarmCharm, app_name=app)
    unit = f"{configurators}/0"

    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))

    line = state.unit_status.message
    assert len(line) <= 120
    assert line == f"Fix {unit}: publishes both org '{org}' …"
    told = in_full(ctx, state).message
    names_the_app(told, f"juju run {app}/leader choose-entity unit={unit}")
    assert f"Status in full: {told}" in logged(ctx)
    ctx.run(ctx.on.action("reconcile"), state)
    assert ctx.action_results is not None
    assert ctx.action_results["status"] == f"blocked: {told}"

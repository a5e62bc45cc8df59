"""GARM's own setup: the pure plan for credentials and orgs/repos, and first run + URLs."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from garm.client import GarmApiError, GarmClient
from garm.models import Credential, Entity, ScaleSet
from garm.refusals import Held, Refusals
from garm.setup import (
    AdminLogin,
    AppCredential,
    ControllerUrls,
    CreateEntity,
    DeleteCredential,
    DeleteEntity,
    EntitySpec,
    PutCredential,
    RebindEntity,
    first_run,
    logger,
    plan_setup,
    read_controller,
    set_urls,
)
from garm.writes import Write, Writes
from tests.clock import FakeClock
from tests.garm_double import FAKE_APP_KEY, GarmDouble

APP = AppCredential(123, 456, FAKE_APP_KEY)
ORG = EntitySpec("organization", "example-org", APP.name)
LIVE_ORG = Entity("organization", "org-uuid", "example-org", APP.name)


def have(credential: AppCredential, id: int = 1) -> Credential:
    return Credential(id, credential.name, credential.description)


def test_settled_garm_needs_no_setup_write():
    assert plan_setup([APP], [ORG], set(), [have(APP)], [LIVE_ORG], []) == []


def test_missing_credential_and_org_are_created_credential_first():
    assert plan_setup([APP], [ORG], set(), [], [], []) == [
        PutCredential(APP),
        CreateEntity(ORG),
    ]


def test_a_rotated_key_changes_the_fingerprint_and_updates_the_credential():
    rotated = AppCredential(123, 456, FAKE_APP_KEY + "\n")
    assert rotated.description != APP.description
    assert plan_setup([rotated], [ORG], set(), [have(APP, 7)], [LIVE_ORG], []) == [
        PutCredential(rotated, 7)
    ]


def test_an_org_bound_to_another_credential_is_rebound():
    other = Entity("organization", "org-uuid", "Example-Org", "someone-elses")
    assert plan_setup([APP], [ORG], set(), [have(APP)], [other], []) == [
        RebindEntity(other, APP.name)
    ]


def test_an_org_nobody_names_is_removed_then_its_managed_credential():
    assert plan_setup([], [], set(), [have(APP, 3)], [LIVE_ORG], []) == [
        DeleteEntity(LIVE_ORG),
        DeleteCredential(3, APP.name),
    ]


def test_nothing_is_deleted_on_an_incomplete_view_of_juju():
    # A unit not seen yet may name the org: creates go on, deletes wait.
    actions = plan_setup([APP], [], set(), [have(APP, 3)], [LIVE_ORG], [], complete=False)
    assert actions == []
    missing = plan_setup([APP], [ORG], set(), [], [], [], complete=False)
    assert [type(a) for a in missing] == [PutCredential, CreateEntity]
    other = dataclasses.replace(LIVE_ORG, credentials_name="someone-elses")
    assert plan_setup([APP], [ORG], set(), [have(APP)], [other], [], complete=False) == []


def test_an_org_with_a_scaleset_under_it_is_kept_and_so_is_its_credential():
    draining = ScaleSet(id=5, name="ci-1", entity_kind="organization", entity_id="org-uuid")
    assert plan_setup([], [], set(), [have(APP)], [LIVE_ORG], [draining]) == []


def test_an_org_a_unit_names_without_credentials_yet_is_kept():
    published = {("organization", "example-org")}
    assert plan_setup([], [], published, [have(APP)], [LIVE_ORG], []) == []


def test_an_org_registered_by_hand_is_never_deleted():
    by_hand = Entity("organization", "org-2", "other-org", "by-hand")
    foreign = Credential(9, "by-hand", "made with garm-cli")
    assert plan_setup([], [], set(), [foreign, have(APP)], [by_hand], []) == [
        DeleteCredential(1, APP.name)
    ]


def test_a_credential_the_charm_did_not_make_is_never_deleted():
    foreign = Credential(9, "by-hand", "made with garm-cli")
    assert plan_setup([], [], set(), [foreign], [], []) == []


# --- first run and controller URLs, against the double ------------------------------------


@pytest.fixture
def fresh(clock: FakeClock):
    with GarmDouble(clock=clock, initialised=False, urls_set=False) as garm:
        yield garm
        assert garm.unexpected == []


ADMIN = AdminLogin("admin", "admin@garm.local", "Adm1n-Pa55word-!x")
URLS = ControllerUrls.from_base("http://10.0.0.5:9997/")


def _sent(garm: GarmDouble, method: str, path: str) -> list[object]:
    return [r for r in garm.requests if (r.method, r.path.rstrip("/")) == (method, path)]


@dataclasses.dataclass(frozen=True)
class SetupWrites:
    """What setup writes left in a pass's ledger, and whether GARM is ready for others."""

    writes: Writes
    ready: bool = True

    @property
    def done(self) -> tuple[str, ...]:
        return tuple(w.line() for w in self.writes.done)

    @property
    def held(self) -> tuple[Held, ...]:
        return tuple(self.writes.held)

    @property
    def memory(self) -> Refusals:
        return self.writes.memory


def _ensure(client: GarmClient, clock: FakeClock, memory: Refusals | None = None) -> SetupWrites:
    """The pass's own steps: first run when GARM has no admin, then its URLs."""
    writes = Writes(clock.now, memory or Refusals(), logger)
    have = read_controller(client)
    if have is None:
        have = first_run(client, ADMIN, writes)
    ready = have is not None and set_urls(client, have, URLS, writes)
    return SetupWrites(writes, ready)


def _apply(
    client: GarmClient, actions: list[Write], memory: Refusals, clock: FakeClock
) -> SetupWrites:
    """Setup writes sent through a pass's ledger, from ``memory``."""
    writes = Writes(clock.now, memory, logger)
    writes.run(client, actions, None)
    return SetupWrites(writes)


def test_first_run_then_urls_then_nothing(fresh: GarmDouble, clock: FakeClock):
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    with pytest.raises(GarmApiError) as caught:
        client.list_scalesets()  # before first run, GARM has no admin
    assert (caught.value.status, caught.value.error) == (409, "init_required")

    outcome = _ensure(client, clock)
    assert outcome.done == (
        "create GARM's admin user",
        "set GARM's controller URLs (callback_url, metadata_url, webhook_url)",
    )
    assert outcome.ready and outcome.held == ()
    assert fresh.controller()["metadata_url"] == "http://10.0.0.5:9997/api/v1/metadata"
    assert client.list_scalesets() == []  # urls_required cleared

    writes = len(fresh.writes())
    assert _ensure(client, clock).done == ()
    assert fresh.writes()[writes:] == []


def test_agent_tools_sync_turned_on_by_hand_is_turned_off_once(
    fresh: GarmDouble, clock: FakeClock
):
    """GARM's first run leaves it off (``InitController`` in cloudbase/garm
    database/sql/controller.go); ``garm-cli controller update --enable-tools-sync`` turns
    it on, and GARM then downloads every garm-agent release, which this charm never uses."""
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    _ensure(client, clock)
    assert fresh.controller()["enable_agent_tools_sync"] is False
    client.update_controller({"enable_agent_tools_sync": True})  # an operator, by hand
    assert _ensure(client, clock).done == ("set GARM's controller URLs (enable_agent_tools_sync)",)
    assert fresh.controller()["enable_agent_tools_sync"] is False
    writes = len(fresh.writes())
    assert _ensure(client, clock).done == ()
    assert fresh.writes()[writes:] == []


def test_urls_required_until_the_urls_are_set(fresh: GarmDouble):
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    client.first_run(ADMIN.username, ADMIN.email, ADMIN.password)
    with pytest.raises(GarmApiError) as caught:
        client.list_scalesets()
    assert (caught.value.status, caught.value.error) == (409, "urls_required")


def test_a_refused_url_write_waits_out_its_back_off_and_nothing_else_is_ready(
    fresh: GarmDouble, clock: FakeClock
):
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    fresh.inject("PUT", r"/controller", status=500)
    outcome = _ensure(client, clock)
    assert not outcome.ready  # GARM answers urls_required to everything else
    (held,) = outcome.held
    assert held.write.startswith("set GARM's controller URLs")
    assert not held.refusal.blocked  # a 500 may pass: retried, not yet the operator's

    puts = len(_sent(fresh, "PUT", "/controller"))
    clock.advance(timedelta(seconds=30))
    again = _ensure(client, clock, outcome.memory)
    assert not again.ready and len(again.held) == 1
    assert len(_sent(fresh, "PUT", "/controller")) == puts  # not re-sent

    clock.advance(timedelta(minutes=1))
    done = _ensure(client, clock, again.memory)
    assert done.ready and done.held == ()
    assert done.memory == Refusals()  # accepted: forgotten


def test_new_urls_refused_hold_nothing_else_when_garm_has_some(
    garm: GarmDouble, client: GarmClient, clock: FakeClock
):
    garm.inject("PUT", r"/controller", status=400, error="Bad Request")
    outcome = _ensure(client, clock)
    assert outcome.ready  # the URLs it has still work
    (held,) = outcome.held
    assert held.refusal.blocked  # a 400: GARM will answer the same again


def test_setup_writes_reach_garm_once(fresh: GarmDouble, clock: FakeClock):
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    so_far = _ensure(client, clock)
    outcome = _apply(client, plan_setup([APP], [ORG], set(), [], [], []), so_far.memory, clock)
    assert outcome.held == ()
    (credential,) = fresh.credentials()
    assert (credential["app_id"], credential["private_key"]) == (123, FAKE_APP_KEY)
    (org,) = client.list_organizations()
    assert org.credentials_name == APP.name
    again = plan_setup([APP], [ORG], set(), client.list_credentials(), [org], [])
    assert again == []


def test_a_refused_credential_is_held_and_its_org_waits_unsent(
    fresh: GarmDouble, clock: FakeClock
):
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    so_far = _ensure(client, clock)
    fresh.inject("POST", r"/github/credentials/?", status=500)
    actions = plan_setup([APP], [ORG], set(), [], [], [])
    outcome = _apply(client, actions, so_far.memory, clock)
    (held,) = outcome.held
    assert held.write == "create GitHub credential app-123-456"
    assert _sent(fresh, "POST", "/organizations") == []  # it would be refused

    # Within the back-off nothing is sent; once it is over the create goes, then the org.
    posts = len(_sent(fresh, "POST", "/github/credentials"))
    assert _apply(client, actions, outcome.memory, clock).held == (held,)
    assert len(_sent(fresh, "POST", "/github/credentials")) == posts
    clock.advance(timedelta(minutes=1))
    later = _apply(client, actions, outcome.memory, clock)
    assert later.held == () and later.memory == Refusals()
    assert later.done == (
        "create GitHub credential app-123-456",
        "register organization example-org",
    )


def test_a_new_key_is_sent_at_once_whatever_the_back_off(fresh: GarmDouble, clock: FakeClock):
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    so_far = _ensure(client, clock)
    fresh.inject("POST", r"/github/credentials/?", status=400, error="Bad Request")
    refused = _apply(client, [PutCredential(APP)], so_far.memory, clock)
    assert refused.held[0].refusal.blocked  # a 400 is the operator's at once
    rotated = dataclasses.replace(APP, private_key=FAKE_APP_KEY + "\n")
    fixed = _apply(client, [PutCredential(rotated)], refused.memory, clock)
    assert fixed.done == ("create GitHub credential app-123-456",)


def test_a_new_key_makes_what_github_refused_due_again_and_nothing_else(
    fresh: GarmDouble, clock: FakeClock
):
    # A create or an update GitHub refused may have been refused for the key: it goes
    # again at once. A runner still running its job, or a template, is not the key's.
    client = GarmClient(fresh.url, ADMIN.username, ADMIN.password)
    so_far = _ensure(client, clock)
    later = clock.now + timedelta(minutes=30)
    memory = so_far.memory
    for key in ("create:ci", "update:ci-1:image", "remove:ci-0:garm-1", "template:x"):
        memory = memory.refused(key, "d", clock.now, "refused", permanent=True)
    memory = dataclasses.replace(
        memory,
        refusals={k: dataclasses.replace(r, retry_at=later) for k, r in memory.refusals.items()},
    )
    done = _apply(client, [PutCredential(APP)], memory, clock)
    assert done.done == ("create GitHub credential app-123-456",)
    due = {k for k in done.memory.refusals if done.memory.holding(k, "d", clock.now) is None}
    assert due == {"create:ci", "update:ci-1:image"}


def test_each_setup_write_has_a_key_of_its_own():
    org = Entity("organization", "o-1", "Example-Org", APP.name)
    actions = [
        PutCredential(APP),
        DeleteCredential(1, APP.name),
        CreateEntity(ORG),
        DeleteEntity(org),
    ]
    keys = [a.asks()[0][0] for a in actions]
    assert len(set(keys)) == len(keys)
    # A create and a re-bind of one entity are one write, asking different things.
    (create,) = CreateEntity(ORG).asks()
    (rebind,) = RebindEntity(org, "app-9-9").asks()
    assert create[0] == rebind[0] and create[1] != rebind[1]


def test_the_admin_password_stays_out_of_a_repr():
    admin = AdminLogin("admin", "admin@garm.local", "Sup3r-secret!")
    assert "Sup3r-secret!" not in repr(admin)

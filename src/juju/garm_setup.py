"""GARM's setup as the leader's pass runs it: on the GARM the charm set up, and no other.

The setup's writes (admin, controller URLs, GitHub credentials, orgs and repos) go
through the one write loop and memory (``garm.setup``, ``garm.writes``); this step adds
the rules that judge GARM's answers: which GARM may be written to at all
(``garm.identity``), and the status a stopped setup earns (``juju.status``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from garm.client import GarmApiError, GarmUnreachable
from garm.identity import Identity, refusal, to_record
from garm.recording import told
from garm.setup import (
    AdminLogin,
    ControllerUrls,
    SetupOutcome,
    apply_setup,
    ensure_controller,
    plan_setup,
    read_controller,
)
from garm.setup import logger as setup_logger
from juju.relation import GarmInputs, RelationState
from juju.status import Summary, summarise
from scalesets.actions import Observed
from scalesets.reconciler import Garm, Outcome, observe


@dataclass(frozen=True)
class Setup:
    """GARM's setup as this pass left it.

    ``stopped`` is the status when the pass cannot go on (GARM unreachable, a read
    refused, no admin or URLs yet); otherwise ``observed`` is GARM as it then stands,
    which the scaleset pass reuses so a pass reads each list once. ``outcome`` holds the
    memory of refusals and the writes held back, told with the scalesets' own.
    ``identity`` is the GARM to record as the charm's, stopped or not (None: as it is).
    """

    outcome: SetupOutcome
    observed: Observed | None = None
    stopped: Summary | None = None
    identity: Identity | None = None


def ensure(
    client: Garm,
    admin: AdminLogin,
    urls: ControllerUrls,
    wanted: GarmInputs,
    state: RelationState,
    so_far: SetupOutcome,
    now: datetime,
    recorded: Identity | None,
    here: str,
    app: str,
) -> Setup:
    """Admin, controller URLs, credentials and orgs/repos, each write through the memory.

    Only on the GARM the charm set up (``recorded``; ``here`` is where GARM's database is
    now): another one, or an empty one where one was recorded, gets no write at all, its
    first run included, until the operator adopts it (``garm.identity``). ``app`` is the
    application's name as deployed, for the hints.
    """
    found: Identity | None = None
    log = told(client, setup_logger)
    try:
        have = read_controller(client)
        refused = refusal(recorded, have.controller_id if have else None, here, app)
        if refused:
            log.warning("%s", refused)
            return Setup(so_far, stopped=Summary("blocked", refused))
        so_far, have = ensure_controller(client, have, admin, urls, so_far, now)
        found = to_record(recorded, have.controller_id, here) if have else None
        if so_far.unreachable is not None or not so_far.ready:
            return Setup(so_far, stopped=_stopped(so_far, state, app), identity=found)
        observed = observe(client)
        actions = plan_setup(
            wanted.credentials,
            wanted.entities,
            wanted.published,
            client.list_credentials(),
            observed.entities,
            observed.scalesets,
            complete=state.desired.complete,
        )
        before = len(so_far.done)
        so_far = apply_setup(client, actions, so_far, now)
        if so_far.unreachable is not None:
            return Setup(so_far, stopped=_stopped(so_far, state, app), identity=found)
        if len(so_far.done) > before:
            observed = dataclasses.replace(
                observed,
                entities=(*client.list_organizations(), *client.list_repositories()),
            )
    except GarmUnreachable as exc:
        stopped = Summary("waiting", f"GARM unreachable, will retry: {exc}")
    except GarmApiError as exc:
        if exc.status == 401:
            stopped = Summary("blocked", "GARM refused the admin login kept by the charm")
        else:
            log.error("GARM setup failed: %s", exc)
            stopped = Summary("waiting", f"GARM setup failed, will retry: {exc.cause}")
    else:
        return Setup(so_far, observed, identity=found)
    return Setup(so_far, stopped=stopped, identity=found)


def _stopped(setup: SetupOutcome, state: RelationState, app: str) -> Summary:
    """The status of a pass its setup ended: GARM gone, or a write it needs held back."""
    if setup.unreachable is not None:
        return Summary("waiting", f"GARM unreachable, will retry: {setup.unreachable}")
    return summarise(Outcome(held=setup.held), state, app=app)

"""GARM's setup as the leader's pass runs it: on the GARM the charm set up, and no other.

The setup's writes go through the one write loop into the pass's ledger (``garm.setup``,
``garm.writes``), which the scalesets' writes go on in; this step adds which GARM may be
written to at all (``garm.identity``) and the status a stopped setup earns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from garm.client import GarmApiError, GarmUnreachable
from garm.identity import Identity, refusal, to_record
from garm.recording import told
from garm.refusals import Refusals
from garm.setup import (
    AdminLogin,
    ControllerUrls,
    first_run,
    plan_setup,
    read_controller,
    set_urls,
)
from garm.setup import logger as setup_logger
from garm.writes import Writes
from juju.relation import GarmInputs, RelationState
from juju.status import Summary, summarise
from scalesets.actions import Observed
from scalesets.reconciler import Garm, Outcome, observe


@dataclass(frozen=True)
class Setup:
    """GARM's setup as this pass left it.

    ``writes``: the pass's ledger, which the scaleset pass goes on in. ``stopped``: the
    status when the pass cannot go on; otherwise ``observed`` is GARM as it then stands,
    which the scaleset pass reuses so a pass reads each list once. ``identity``: the GARM
    to record as the charm's, stopped or not (None: as it is).
    """

    writes: Writes
    observed: Observed | None = None
    stopped: Summary | None = None
    identity: Identity | None = None


def ensure(
    client: Garm,
    admin: AdminLogin,
    urls: ControllerUrls,
    wanted: GarmInputs,
    state: RelationState,
    memory: Refusals,
    now: datetime,
    recorded: Identity | None,
    here: str,
    app: str,
) -> Setup:
    """Admin, controller URLs, credentials and orgs/repos, each write through the memory.

    Only on the GARM the charm set up (``recorded``; ``here``: where GARM's database is
    now): another one, or an empty one where one was recorded, gets no write at all, its
    first run included, until the operator adopts it (``garm.identity``). An unreachable
    GARM ends the writes, with what was learnt kept in the ledger.
    """
    log = told(client, setup_logger)
    writes = Writes(now, memory, log)
    found: Identity | None = None
    try:
        have = read_controller(client)
        refused = refusal(recorded, have.controller_id if have else None, here, app)
        if refused:
            log.warning("%s", refused)
            return Setup(writes, stopped=Summary("blocked", refused))
        if have is None:
            have = first_run(client, admin, writes)
        found = to_record(recorded, have.controller_id, here) if have else None
        if have is None or not set_urls(client, have, urls, writes):
            # A write GARM needs before any other is held back: told as the pass tells it.
            held = summarise(Outcome(held=tuple(writes.held)), state, app=app)
            return Setup(writes, stopped=held, identity=found)
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
        before = len(writes.done)
        writes.run(client, actions, None)
        if len(writes.done) > before:
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
        return Setup(writes, observed, identity=found)
    return Setup(writes, stopped=stopped, identity=found)

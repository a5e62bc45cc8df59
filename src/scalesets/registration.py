"""Registration: a spec's provider and org or repo in GARM, a scale set's id on GitHub.

A spec is created only once GARM holds its provider and its org or repo (``missing``):
GARM's setup registers them in the pass that has what they need, so a spec still
missing one ``REGISTRATION_STUCK`` after the charm first saw it (timed by the memory of
refusals, as every wait on GARM is) is put to the operator (``reason``).

When a scale set GitHub registered late starts to listen: from the pass that saw it.

A scale set GARM holds without its GitHub id (GitHub slow at the create, a worker
re-creating it on GitHub, docs/reference/garm-api.md §2.8) opens its listener seconds
after it gets one, however old it is; its ``created_at`` and ``enabled-at`` say nothing
of that. So the charm marks it, seen unregistered, with an ``enabled-at`` ahead (believed,
within the longest back-off), and the first pass that sees it registered notes
``enabled-at`` then: the hand-over counts the listener from that note (``planner``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta

from garm.models import ScaleSet
from garm.refusals import LONGEST_RETRY
from scalesets.actions import UpdateScaleset
from scalesets.notes import Notes
from scalesets.spec import ScalesetSpec

# How long a spec may wait for GARM to hold its provider or its org or repo: the charm
# registers them in the pass that has what they need (GARM restarted with the new
# provider; the org or repo created with the GitHub App its configurator publishes), so
# a pass or two is the norm; 15 minutes also gives Juju three update-status periods to
# deliver a configurator's credentials or a secret's grant.
REGISTRATION_STUCK = timedelta(minutes=15)


def missing(
    spec: ScalesetSpec, providers: Collection[str], entities: Collection[tuple[str, str]]
) -> tuple[str, str, str] | None:
    """What GARM lacks for ``spec``: the wait's key, and its kind and name; None: nothing.

    ``entities`` are (kind, lower-cased name) as GARM holds them.
    """
    if spec.provider_name not in providers:
        return f"registration:provider:{spec.provider_name}", "provider", spec.provider_name
    kind, name = spec.entity_kind, spec.entity_name
    if (kind, name.lower()) not in entities:
        return f"registration:{kind}:{name.lower()}", kind, name
    return None


def reason(kind: str, name: str, overdue: bool) -> str:
    """Why the spec waits, and once ``overdue`` what the operator can do."""
    if not overdue:
        return f"{kind} {name!r} is not registered in GARM yet"
    if kind == "provider":
        advice = "check the configurator's OpenStack settings and /var/log/garm/garm.log"
    else:
        advice = (
            "check that its configurator publishes a GitHub App for it (github_app_id, "
            "github_installation_id, a readable key) and /var/log/garm/garm.log"
        )
    return f"{kind} {name!r} is not registered in GARM after 15 minutes: {advice}"


def note(current: ScaleSet, logical: str, now: datetime) -> UpdateScaleset | None:
    """The note to write on an enabled generation about its registration; None: none."""
    notes = Notes.read(current.extended_state).believed(now)
    marked = notes.enabled_at is not None and notes.enabled_at > now
    if not current.scale_set_id and not marked:
        noted = replace(notes, enabled_at=now + LONGEST_RETRY)
    elif current.scale_set_id and marked:
        noted = replace(notes, enabled_at=now)
    else:
        return None
    return UpdateScaleset(
        current.id, current.name, {"extended_state": noted.text()}, "note", logical
    )

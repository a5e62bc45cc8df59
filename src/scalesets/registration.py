"""Registration: a spec's provider and org or repo in GARM, a scale set's id on GitHub.

A spec is created once GARM holds its provider and org or repo (``missing``); one still
missing either ``REGISTRATION_STUCK`` after first seen is put to the operator.

A scale set without its GitHub id (docs/reference/garm-api.md §2.8) starts to listen
seconds after it gets one, however old: marked with an ``enabled-at`` ahead while
unregistered, it is noted ``enabled-at`` by the first pass that sees it registered, and
the hand-over counts from there.
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

# A pass or two is the norm; 15 minutes also gives Juju three update-status periods to
# deliver a configurator's credentials or a secret's grant.
REGISTRATION_STUCK = timedelta(minutes=15)


def missing(
    spec: ScalesetSpec, providers: Collection[str], entities: Collection[tuple[str, str]]
) -> tuple[str, str, str] | None:
    """What GARM lacks for ``spec``: the wait's key, its kind and name; None: nothing."""
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

"""GARM as the planner's table tests observe it, hand-built from GARM-shaped JSON."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from garm.models import Entity, Instance, ScaleSet
from scalesets.actions import Observed, Plan
from scalesets.naming import generation_name, spec_key
from scalesets.notes import Notes
from scalesets.planner import plan
from scalesets.spec import Desired, ScalesetSpec, Settings
from tests.passes import PROVIDER
from tests.wire import T0, instance_json, scaleset_json

NOW = T0 + timedelta(days=1)


def retirement_stamp(at) -> str:
    return Notes(retired_at=at).text()


def enabled_stamp(at) -> str:
    return Notes(enabled_at=at).text()


def read_retirement_stamp(text: str):
    return Notes.read(text).retired_at


RETIRED_AT = NOW - timedelta(hours=1)
# A runner on its way in or out, by its status (GARM's, docs/reference/garm-api.md §3):
# no idle runner is refreshed while one of its scaleset's is.
COMING_OR_GOING = (
    "pending_create",
    "creating",
    "pending_delete",
    "pending_force_delete",
    "deleting",
    "deleted",
)
SETTINGS = Settings()
ORG = Entity("organization", "org-uuid", "example-org")
REPO = Entity("repository", "repo-uuid", "example/repo")


def name_of(spec: ScalesetSpec, index: int = 0, budget: int = 10) -> str:
    return generation_name(spec_key(spec), index, budget)


def generation(spec: ScalesetSpec, id: int, **overrides) -> ScaleSet:
    """The live scaleset GARM holds for ``spec``, as created by the planner."""
    values = {
        "labels": spec_key(spec).labels,
        "max_runners": spec.max_runners,
        "min_idle_runners": spec.min_idle_runners,
        "provider_name": spec.provider_name,
        "image": spec.image,
        "flavor": spec.flavor,
        "os_arch": spec.os_arch,
        "extra_specs": spec.extra_specs or None,
    }
    values.update(overrides)
    name = values.pop("name", None) or name_of(spec)
    return ScaleSet.from_json(scaleset_json(id, name, **values))


def retired(scaleset: ScaleSet, at=RETIRED_AT) -> ScaleSet:
    """The same scaleset after a retirement update, re-read from the wire."""
    return dataclasses.replace(
        scaleset,
        enabled=False,
        min_idle_runners=0,
        max_runners=0,
        extended_state=retirement_stamp(at),
    )


def runner(name: str, scaleset: ScaleSet, **kwargs) -> Instance:
    return Instance.from_json(instance_json(name, scaleset.id, **kwargs))


def observe(*scalesets: ScaleSet, instances=(), providers=(PROVIDER,), entities=(ORG, REPO)):
    return Observed(tuple(scalesets), tuple(instances), frozenset(providers), tuple(entities))


def run(*specs: ScalesetSpec, observed: Observed, now=NOW, settings=SETTINGS, held=()) -> Plan:
    return plan(Desired(tuple(specs), tuple(held)), observed, now, settings)


def writes(result: Plan) -> list:
    return list(result.actions)

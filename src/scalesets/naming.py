"""Generation names: the live scaleset name as a pure function of what it serves.

GitHub scale set labels are immutable, so a label change means a new scaleset (a new
*generation*) beside the old one. Naming each generation after a hash of what cannot be
changed in place lets every pass re-derive, from GARM's answers alone, which scaleset is
current and which are predecessors: nothing about a changeover is stored by the charm.
Which live scaleset is current is decided here too (``current_generation``), so that the
name budget, the candidate names and the serving generation meet in one place.

What GARM cannot change on an existing scaleset, and so what a generation is keyed by:
the labels (no update field), the provider (no update field), the org/repo (a scale set
lives under one entity) and the OS type (GARM keeps the runner template picked at create
unless told another, so an in-place OS change would boot runners with the wrong install
script). Everything else is updated in place.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from garm.models import ScaleSet
from scalesets.spec import ScalesetSpec

HASH_LENGTH = 6
MIN_NAME_BUDGET = HASH_LENGTH
# How many alternative names a generation may take when a foreign scaleset already holds
# the first choice. Eight 24-bit hashes colliding in one GARM is not a practical case.
MAX_CANDIDATES = 8

_UNSAFE = re.compile(r"[^a-z0-9._-]")


def normalise_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """Labels as GARM compares them: case-insensitive, trimmed, de-duplicated, sorted.

    GARM's tag table is shared and case-insensitive, so it may answer ``Linux`` for
    ``linux``; comparing raw strings would see a change on every pass.
    """
    return tuple(sorted({label.strip().lower() for label in labels if label.strip()}))


@dataclass(frozen=True)
class GenerationKey:
    """The facts a generation is named after; equal keys mean the same generation."""

    logical: str
    labels: tuple[str, ...]
    provider: str
    entity_kind: str
    entity_name: str
    os_type: str

    def digest(self, index: int) -> str:
        """Short hash naming this key's ``index``-th candidate name."""
        payload = json.dumps(
            [
                self.logical,
                list(self.labels),
                self.provider,
                self.entity_kind,
                self.entity_name,
                self.os_type,
                index,
            ],
            separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:HASH_LENGTH]


def spec_key(spec: ScalesetSpec) -> GenerationKey:
    """Key of the generation a spec asks for; it carries its logical name as a label."""
    return GenerationKey(
        logical=spec.name.lower(),
        labels=normalise_labels((*spec.labels, spec.name)),
        provider=spec.provider_name,
        entity_kind=spec.entity_kind,
        entity_name=spec.entity_name.lower(),
        os_type=spec.os_type,
    )


def observed_key(logical: str, scaleset: ScaleSet) -> GenerationKey:
    """Key recomputed from a live scaleset's own fields, as if it belonged to ``logical``."""
    return GenerationKey(
        logical=logical.lower(),
        labels=normalise_labels((*scaleset.labels, logical)),
        provider=scaleset.provider_name,
        entity_kind=scaleset.entity_kind or "",
        entity_name=scaleset.entity_name.lower(),
        os_type=scaleset.os_type,
    )


def _safe_prefix(logical: str) -> str:
    """The logical name made safe for a scaleset name: no ``/`` or ``,``, ASCII only."""
    return _UNSAFE.sub("-", logical.lower())


def generation_name(key: GenerationKey, index: int, budget: int) -> str:
    """The ``index``-th candidate name of a generation, at most ``budget`` bytes.

    ``<readable prefix>-<hash>``: the prefix is the start of the logical name so an
    operator can tell scalesets apart in ``garm-cli``; the hash covers every key field,
    so two logical names sharing a prefix still get different names.
    """
    if budget < MIN_NAME_BUDGET:
        raise ValueError(f"name budget must be at least {MIN_NAME_BUDGET} bytes")
    digest = key.digest(index)
    prefix = _safe_prefix(key.logical)[: max(budget - HASH_LENGTH - 1, 0)].rstrip("-._")
    return f"{prefix}-{digest}" if prefix else digest


def generation_index(logical: str, scaleset: ScaleSet) -> int | None:
    """Which candidate of its own key a scaleset's name is, if it is a generation of ``logical``.

    Membership is decided by recomputing the hash from the scaleset's observed labels,
    provider and entity, never by matching a name prefix alone, so one logical name can
    never claim another's scalesets. Any readable prefix of the logical name is accepted
    so that changing the name budget does not disown live generations.
    """
    key = observed_key(logical, scaleset)
    prefix, _, digest = scaleset.name.rpartition("-")
    if prefix and not _safe_prefix(key.logical).startswith(prefix):
        return None
    for index in range(MAX_CANDIDATES):
        if key.digest(index) == digest:
            return index
    return None


def is_legacy(logical: str, scaleset: ScaleSet) -> bool:
    """A scaleset made before generation naming: named exactly the logical name."""
    return scaleset.name.lower() == logical.lower()


@dataclass(frozen=True)
class Member:
    """A live scaleset claimed by a logical name: one of its generations, or its legacy one."""

    scaleset: ScaleSet
    legacy: bool


def current_generation(
    logical: str, members: Sequence[Member], key: GenerationKey, budget: int
) -> ScaleSet | None:
    """The live scaleset that already is the generation of ``key``, if any.

    Eligible: a member whose own fields give ``key``, and, for a generation, whose name
    fits the budget (lowering the budget replaces the others); a legacy scaleset is kept
    as it is while its labels still match. An existing generation is preferred to a free
    lower candidate name, so a foreign scaleset going away never renames (and so
    replaces) a serving generation.

    Of several eligible, the one that serves (enabled: GARM listens for its jobs) is
    current. The charm makes two generations of one key only when the budget was lowered
    under the first: the long-named one drains while the short-named one serves, and a
    budget raised again makes both fit. Picking the drained one would re-enable
    it and retire the one serving, a changeover nobody asked for; raising the budget
    replaces nothing. Then a generation before a legacy scaleset, then the oldest by
    GARM id: with both serving (the budget raised back before the hand-over), the older
    keeps serving and the younger, never handed over to, is the one retired. The
    candidate index says only which name was free at create, so it does not rank.
    """
    eligible = [
        m
        for m in members
        if observed_key(logical, m.scaleset) == key
        and (m.legacy or len(m.scaleset.name.encode()) <= budget)
    ]
    if not eligible:
        return None
    chosen = min(eligible, key=lambda m: (not m.scaleset.enabled, m.legacy, m.scaleset.id))
    return chosen.scaleset

"""Generation names: the live scaleset name as a pure function of what it serves.

GitHub's scale set labels are immutable, so a label change is a new scaleset (a
*generation*) beside the old. Named after a hash of what GARM cannot change in place
(labels, provider, org/repo, and the OS type, whose install template GARM keeps), each
pass re-derives from GARM alone which scaleset is current: nothing is stored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass

from garm.models import ScaleSet
from scalesets.spec import ScalesetSpec

HASH_LENGTH = 6
MIN_NAME_BUDGET = HASH_LENGTH
# How many alternative names a generation may take when a foreign scaleset already holds
# the first choice. Eight 24-bit hashes colliding in one GARM is not a practical case.
MAX_CANDIDATES = 8

_UNSAFE = re.compile(r"[^a-z0-9._-]")


def normalise_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """Labels as GARM's shared, case-insensitive tag table compares them: trimmed, sorted."""
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
        payload = json.dumps([*astuple(self), index], separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:HASH_LENGTH]


def spec_key(spec: ScalesetSpec) -> GenerationKey:
    """Key of the generation a spec asks for; it carries its logical name as a label."""
    labels = normalise_labels((*spec.labels, spec.name))
    entity = spec.entity_name.lower()
    return GenerationKey(
        spec.name.lower(), labels, spec.provider_name, spec.entity_kind, entity, spec.os_type
    )


def observed_key(logical: str, scaleset: ScaleSet) -> GenerationKey:
    """Key recomputed from a live scaleset's own fields, as if it belonged to ``logical``."""
    labels = normalise_labels((*scaleset.labels, logical))
    kind, entity = scaleset.entity_kind or "", scaleset.entity_name.lower()
    return GenerationKey(
        logical.lower(), labels, scaleset.provider_name, kind, entity, scaleset.os_type
    )


def _safe_prefix(logical: str) -> str:
    """The logical name made safe for a scaleset name: no ``/`` or ``,``, ASCII only."""
    return _UNSAFE.sub("-", logical.lower())


def generation_name(key: GenerationKey, index: int, budget: int) -> str:
    """The ``index``-th candidate name, ``<start of the logical name>-<hash>``, in ``budget``."""
    if budget < MIN_NAME_BUDGET:
        raise ValueError(f"name budget must be at least {MIN_NAME_BUDGET} bytes")
    digest = key.digest(index)
    prefix = _safe_prefix(key.logical)[: max(budget - HASH_LENGTH - 1, 0)].rstrip("-._")
    return f"{prefix}-{digest}" if prefix else digest


def generation_index(logical: str, scaleset: ScaleSet) -> int | None:
    """Which candidate of its own key a scaleset's name is, if a generation of ``logical``.

    By the hash of its observed key, never a prefix alone (no logical name claims
    another's); any prefix of the logical name, so a new budget disowns nothing.
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

    Eligible: a member whose own fields give ``key`` and, unless legacy, whose name fits
    the budget; any candidate index (a foreign scaleset going away renames nothing).
    Ranked: serving first (two of one key exist only after the budget was lowered and
    raised again: picking the drained one would be a changeover nobody asked for), then
    a generation before a legacy one, then the oldest (the younger was never handed to).
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

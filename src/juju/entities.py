"""Which of ``org`` and ``repo`` a configurator unit means when it publishes both.

garm-configurator allows one of the two, but writes its databag with ``update`` and
never removes a key (canonical/github-runner-operators,
``charms/garm-configurator/src/charm.py``, ``_configure_garm_relation``): a unit that
switched publishes both, the one it left unchanged. So the leader remembers per unit
the values it last read and the key it took (peer data ``entities``), and takes the
key whose value changed since. When that cannot tell (no memory, or both changed) the
unit is held until the operator says which (``choose-entity``). Pure.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

logger = logging.getLogger(__name__)

Kind = Literal["org", "repo"]
KINDS: tuple[Kind, ...] = ("org", "repo")
# The peer relation's application-databag key the memory is kept under.
KEY = "entities"


@dataclass(frozen=True)
class Seen:
    """What one unit published when last read, and which it means (None: not known)."""

    org: str | None = None
    repo: str | None = None
    use: Kind | None = None

    def value(self, kind: Kind) -> str | None:
        """The published org or repo."""
        return self.org if kind == "org" else self.repo


Memory = Mapping[str, Seen]


@dataclass(frozen=True)
class Choices:
    """A pass's reading of the units publishing both: known (``uses``) or not.

    ``memory`` is what to remember for the next pass.
    """

    uses: Mapping[str, Kind]
    unknown: Mapping[str, Seen]
    memory: Memory


def published(data: Mapping[str, str]) -> Seen:
    """The unit's ``org`` and ``repo`` as published (trimmed; blank is absent)."""
    org, repo = (_value(data.get(kind)) for kind in KINDS)
    if org and repo:
        return Seen(org, repo)
    return Seen(org, repo, "org" if org else "repo" if repo else None)


def choose(
    units: Iterable[tuple[str, Mapping[str, str]]],
    memory: Memory,
    whole: bool,
    hidden: Collection[str] = (),
    *,
    app: str,
) -> Choices:
    """Which key each unit means, from what it publishes and what it published before.

    A unit not seen is forgotten only when this hook sees all its application's units
    (``whole``, and the application not one of ``hidden``). ``app`` is this application's
    name as deployed, which the log's hint names.
    """
    uses: dict[str, Kind] = {}
    unknown: dict[str, Seen] = {}
    kept = {
        unit: seen
        for unit, seen in memory.items()
        if not whole or unit.rpartition("/")[0] in hidden
    }
    for unit, data in units:
        before = memory.get(unit)
        now = _take(published(data), before)
        if now.org is None and now.repo is None:
            kept.pop(unit, None)
            continue
        kept[unit] = now
        if now.org and now.repo:
            if now.use is None:
                unknown[unit] = now
            else:
                uses[unit] = now.use
            if now.use is not None and before is not None and now.use != before.use:
                # A move the charm infers: said, for the operator who meant otherwise.
                logger.warning(
                    "%s publishes both org and repo; following its %s %s, the one it "
                    "changed (juju run %s/leader choose-entity to say otherwise)",
                    unit,
                    now.use,
                    now.value(now.use),
                    app,
                )
    return Choices(uses, unknown, kept)


def _take(now: Seen, before: Seen | None) -> Seen:
    """The key a unit publishing both means: the one whose value changed since ``before``."""
    if now.use is not None or not (now.org and now.repo) or before is None:
        return now
    changed: list[Kind] = [kind for kind in KINDS if now.value(kind) != before.value(kind)]
    if not changed:
        return Seen(now.org, now.repo, before.use)
    return Seen(now.org, now.repo, changed[0] if len(changed) == 1 else None)


def read(text: str | None) -> tuple[dict[str, Seen], bool]:
    """The memory as the peer data holds it, and whether all of it read (never raises)."""
    if not text:
        return {}, True
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return {}, False
    if not isinstance(raw, dict):
        return {}, False
    memory = {unit: seen for unit, entry in raw.items() if (seen := _entry(entry)) is not None}
    return memory, render(memory) == text


def render(memory: Memory) -> str:
    """The memory as the peer data keeps it: JSON, keys sorted, unset values absent."""
    entries = {
        unit: {k: v for k, v in (("org", s.org), ("repo", s.repo), ("use", s.use)) if v}
        for unit, s in sorted(memory.items())
    }
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


def _entry(entry: object) -> Seen | None:
    if not isinstance(entry, dict):
        return None
    org, repo, use = (entry.get(k) for k in ("org", "repo", "use"))
    if not all(v is None or isinstance(v, str) for v in (org, repo, use)):
        return None
    if use is not None and use not in KINDS:
        return None
    return Seen(org or None, repo or None, "org" if use == "org" else "repo" if use else None)


def _value(value: object) -> str | None:
    return value.strip() or None if isinstance(value, str) else None

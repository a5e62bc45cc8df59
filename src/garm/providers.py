"""Which providers GARM is configured with: the related units', and those still in use.

GARM gives a scaleset a worker only while it is configured with the scaleset's provider, so
a provider a live scaleset uses stays configured whatever became of its unit (departed,
unreadable, not seen yet by a new leader). What GARM is configured with is recorded in the
charm's own secret (``juju.secrets``), which every leader reads; before there is one, this
machine's provider files stand in for it.

Each recorded provider names the configurator relation that published it. The same relation
publishing other settings is a rotation, applied at once. Another relation publishing a
recorded name with other settings (an application deployed again under its old name) is a
reuse, held until no live scaleset uses the name, since those scalesets drain with the
earlier settings; with the same settings, the new relation takes it over at once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from garm.config import OpenstackProvider, written_providers

# A provider's settings in the record: every field but its name, which keys the entry.
_SETTINGS = tuple(f.name for f in dataclasses.fields(OpenstackProvider) if f.name != "name")


@dataclass(frozen=True)
class Recorded:
    """A provider and the configurator relation (id) that published it; None: not known."""

    provider: OpenstackProvider
    relation: int | None = None


@dataclass(frozen=True)
class KeptProviders:
    """What GARM is to be configured with (``record``), and what became of the rest.

    ``dropped``: earlier providers left out; ``held``: published ones whose name is kept for
    another relation's scalesets; ``unsure``: held only as GARM could not say what its
    scalesets use, so whether the name is free is known at the next pass.
    """

    record: tuple[Recorded, ...]
    dropped: tuple[str, ...] = ()
    held: tuple[Recorded, ...] = ()
    unsure: bool = False

    @property
    def providers(self) -> tuple[OpenstackProvider, ...]:
        """The providers to render into GARM's configuration."""
        return tuple(kept.provider for kept in self.record)

    def kept_for_another(self, name: str, relation: int | None) -> int | None:
        """The relation a provider of this name is kept for, if not ``relation``; else None.

        A scaleset of ``relation`` must not run on it: its runners would boot with another
        relation's OpenStack settings.
        """
        for kept in self.record:
            if kept.provider.name == name:
                return kept.relation if _differ(kept.relation, relation) else None
        return None

    def to_write(self, recorded: Iterable[Recorded] | None) -> tuple[Recorded, ...] | None:
        """The record to write; None when it is the one read, or would be a first, empty one."""
        if recorded is None:
            return self.record or None
        return None if _by_name(recorded) == _by_name(self.record) else self.record


def kept_providers(
    wanted: Iterable[Recorded],
    recorded: Iterable[Recorded] | None,
    files: Mapping[str, str],
    in_use: Callable[[], Collection[str] | None],
) -> KeptProviders:
    """The related units' providers, and every earlier one a live scaleset still uses.

    ``recorded`` is None when there is no record yet: ``files``, this machine's provider
    files, are read instead. ``in_use`` names the providers of GARM's scalesets, None when
    GARM cannot tell (then every earlier provider is kept and every reused name held); it
    asks GARM, so only when an earlier provider is not published or is reused.
    """
    if recorded is not None:
        earlier: dict[str, Recorded | None] = dict(_by_name(recorded))
    else:  # None where a file does not read
        written = written_providers(files).items()
        earlier = {name: Recorded(p) if p is not None else None for name, p in written}
    used = cache(in_use)

    def still_used(name: str) -> bool:
        names = used()
        return names is None or name in names

    record: dict[str, Recorded] = {}
    held: list[Recorded] = []
    unsure = False
    for now in wanted:
        name = now.provider.name
        before = earlier.get(name)
        if before is not None and _reused(before, now) and still_used(name):
            record[name] = before
            held.append(now)
            unsure = unsure or used() is None
        else:
            record[name] = now
    dropped: list[str] = []
    for name in sorted(earlier.keys() - record.keys()):
        before = earlier[name]
        if before is not None and still_used(name):
            record[name] = before
        else:
            dropped.append(name)
    return KeptProviders(tuple(record.values()), tuple(dropped), tuple(held), unsure)


def _reused(before: Recorded, now: Recorded) -> bool:
    """Whether another relation publishes a recorded provider's name, with other settings."""
    return _differ(before.relation, now.relation) and before.provider != now.provider


def _differ(one: int | None, other: int | None) -> bool:
    """Whether two relations are known to be different ones."""
    return None not in (one, other) and one != other


def _by_name(record: Iterable[Recorded]) -> dict[str, Recorded]:
    return {kept.provider.name: kept for kept in record}


def record_text(record: Iterable[Recorded]) -> str:
    """The record as the charm's secret keeps it: JSON, by name, settings and ``relation``."""
    entries = {
        kept.provider.name: {
            "relation": kept.relation,
            **{key: getattr(kept.provider, key) for key in _SETTINGS},
        }
        for kept in record
    }
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


def read_record(text: str) -> tuple[Recorded, ...] | None:
    """The record back from ``record_text``'s text; None unless all of it reads."""
    try:
        entries = json.loads(text)
        return tuple(_entry(name, entry) for name, entry in sorted(entries.items()))
    except (AttributeError, KeyError, TypeError, ValueError, RecursionError):
        return None


def _entry(name: str, entry: dict[str, object]) -> Recorded:
    relation = entry["relation"]
    if relation is not None and (type(relation) is not int):
        raise TypeError("relation must be an id")
    settings = {key: entry[key] for key in _SETTINGS}
    if not all(isinstance(value, str) for value in settings.values()):
        raise TypeError("settings must be text")
    return Recorded(OpenstackProvider(name=name, **settings), relation)  # type: ignore[arg-type]

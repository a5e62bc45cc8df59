"""Which providers GARM is configured with: the related units', and those still in use.

GARM gives a scaleset a worker only while it is configured with the scaleset's provider:
without it, the scaleset's runners are never drained or deleted. So a unit that
departed, whose data or secret cannot be read now, or that a new leader does not see
yet, must not take its provider out of GARM while a live scaleset uses it.

What GARM is configured with is kept in a record that every leader reads (the charm's
own secret, ``juju.secrets``): provider files live on one machine, and a new leader's
machine may never have run GARM. Before there is a record (the charm upgraded from a
revision without one), the provider files written on this machine stand in for it
(``config.read_provider``); once there is one, it alone is read.

Each recorded provider names the configurator relation that published it. The same
relation publishing other settings is a rotation (a new password, another network),
applied at once: a provider name is its unit's, and a unit's name is never reused within
one relation. Another relation publishing a recorded name with other settings (an
application removed and deployed again under its old name) is a reuse: taken now, its
settings would be those the earlier relation's scalesets drain with, so it is held until
no live scaleset uses the name. With the same settings it is the same provider, and the
new relation takes it over at once.

Pure: the pass hands in the record, the files, and a way to ask GARM's scalesets'
providers.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from garm.config import OpenstackProvider, read_provider

_DIRECTORY = "providers/"
_SUFFIX = ".toml"
# A provider's settings in the record: every field but its name, which keys the entry.
_SETTINGS = tuple(f.name for f in dataclasses.fields(OpenstackProvider) if f.name != "name")


@dataclass(frozen=True)
class Recorded:
    """A provider and the configurator relation (its Juju relation id) that published it.

    ``relation`` is None for one read from this machine's files, written by a revision
    that recorded no relation: whichever relation publishes its name takes it over.
    """

    provider: OpenstackProvider
    relation: int | None = None


@dataclass(frozen=True)
class KeptProviders:
    """What GARM is to be configured with, and what became of the rest.

    ``record`` is every provider to configure with the relation it is kept for: the
    record to keep. ``dropped`` names the earlier providers left out (to log); ``held``
    are published providers not configured, because their name is kept for another
    relation's scalesets. ``unsure``: some are held only because GARM could not say
    which providers its scalesets use (it was not running yet), so whether the name is
    free is known only at the next pass.
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

        A scaleset of ``relation`` must not run on such a provider: its runners would boot
        with another relation's OpenStack settings. Unknown relations never differ.
        """
        for kept in self.record:
            if kept.provider.name == name:
                owner = kept.relation
                differs = None not in (owner, relation) and owner != relation
                return owner if differs else None
        return None

    def to_write(self, recorded: Iterable[Recorded] | None) -> tuple[Recorded, ...] | None:
        """The record to write, or None when it is the one read (no new revision).

        Nor is a first record made while there is nothing to put in it: no provider
        files are left on this machine then, so no record says as much as an empty one.
        """
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

    ``wanted`` are the providers the related units publish, each with its relation;
    ``recorded`` is the record, None when there is none yet: the provider files on this
    machine (``workload.read_provider_files``) are read instead. ``in_use`` names the
    providers of GARM's scalesets, None when GARM cannot tell (not running yet): then
    every earlier provider is kept, and every reused name held. It is asked only when an
    earlier provider is not published, or published again by another relation, for it
    asks GARM.
    """
    earlier = _earlier(recorded, files)
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
    known = None not in (before.relation, now.relation)
    return known and before.relation != now.relation and before.provider != now.provider


def _earlier(
    recorded: Iterable[Recorded] | None, files: Mapping[str, str]
) -> dict[str, Recorded | None]:
    """The providers GARM was configured with before, by name; None where files do not read.

    The record wins: the files are read only when there is none.
    """
    if recorded is not None:
        return dict(_by_name(recorded))
    written = {
        name.removeprefix(_DIRECTORY).removesuffix(_SUFFIX)
        for name in files
        if name.startswith(_DIRECTORY) and name.endswith(_SUFFIX)
    }
    earlier: dict[str, Recorded | None] = {}
    for name in sorted(written):
        provider = read_provider(name, dict(files))
        earlier[name] = Recorded(provider) if provider is not None else None
    return earlier


def _by_name(record: Iterable[Recorded]) -> dict[str, Recorded]:
    return {kept.provider.name: kept for kept in record}


def record_text(record: Iterable[Recorded]) -> str:
    """The record as the charm's secret keeps it: JSON, by provider name.

    Each entry holds the provider's settings (its OpenStack password included, hence a
    secret) and ``relation``, the id of the relation that published it (null: not known).
    """
    entries = {
        kept.provider.name: {
            "relation": kept.relation,
            **{key: getattr(kept.provider, key) for key in _SETTINGS},
        }
        for kept in record
    }
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


def read_record(text: str) -> tuple[Recorded, ...] | None:
    """The record back from ``record_text``'s text, or None when it does not read whole.

    Only a leader writes it, always whole, so a part that does not read means the whole
    cannot be trusted.
    """
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

"""Which providers GARM is configured with: the related units', and those still in use.

A unit that departed, or whose data or secret cannot be read now, must not take its
provider out of GARM while its scaleset drains or serves: GARM would give that scaleset
no worker, its runners never drained or deleted. Such a provider is kept from the files
written for it before (``config.read_provider``), for as long as a live scaleset uses
it. Pure: the pass hands in the files, and a way to ask GARM's scalesets' providers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from garm.config import OpenstackProvider, read_provider

_DIRECTORY = "providers/"
_SUFFIX = ".toml"


@dataclass(frozen=True)
class KeptProviders:
    """The providers to configure, and the earlier ones dropped (to log)."""

    providers: tuple[OpenstackProvider, ...]
    dropped: tuple[str, ...] = ()


def earlier_providers(files: Mapping[str, str], wanted: Iterable[OpenstackProvider]) -> set[str]:
    """Providers written before that no related unit defines now.

    ``files`` are the provider files by their name relative to GARM's config directory
    (``workload.read_provider_files``).
    """
    written = {
        name.removeprefix(_DIRECTORY).removesuffix(_SUFFIX)
        for name in files
        if name.startswith(_DIRECTORY) and name.endswith(_SUFFIX)
    }
    return written - {p.name for p in wanted}


def kept_providers(
    wanted: Iterable[OpenstackProvider],
    files: Mapping[str, str],
    in_use: Callable[[], Collection[str] | None],
) -> KeptProviders:
    """The related units' providers, plus every earlier one a live scaleset still uses.

    ``in_use`` names the providers of GARM's scalesets, None when GARM cannot tell (not
    running yet): then every earlier provider whose files still read is kept. It is
    asked only when there is an earlier provider, for it asks GARM.
    """
    providers = {p.name: p for p in wanted}
    dropped = []
    earlier = sorted(earlier_providers(files, providers.values()))
    used = in_use() if earlier else None
    for name in earlier:
        kept = read_provider(name, dict(files))
        if kept is not None and (used is None or name in used):
            providers[name] = kept
        else:
            dropped.append(name)
    return KeptProviders(tuple(providers.values()), tuple(dropped))

"""``remove`` under a real systemd: nothing of what files.md lists stays on the machine.

The unit led on PostgreSQL (so the lease's files and units are there too), then Juju
runs its ``stop`` and ``remove`` hooks. files.md says the ``garm`` user stays; every
other path its table names goes, with the units systemd had loaded from them.
"""

from __future__ import annotations

import pytest

from tests.machine_tier.tier import documented, hook
from tests.nspawn import Machine

pytestmark = pytest.mark.postgresql  # the tier's one server, a database of its own


def present(machine: Machine, paths: list[str]) -> list[str]:
    listing = machine.sh("for p in " + " ".join(paths) + "; do [ -e $p ] && echo $p || :; done")
    return listing.split()


def test_remove_leaves_nothing_the_files_page_lists(machine: Machine) -> None:
    hook(machine, "install")
    hook(machine, "relate-postgresql")
    paths = [path for path in documented() if "<" not in path]
    before = present(machine, paths)
    print(f"before: {len(before)} of files.md's paths on the machine")

    hook(machine, "stop")
    hook(machine, "remove")

    after = present(machine, paths)
    links = machine.sh("find /etc/systemd/system -name 'garm*' || :").split()
    units = machine.sh(
        "systemctl list-units --all --no-legend --plain 'garm*' | awk '{print $1, $3}'"
    ).strip()
    processes = machine.sh("pgrep -u garm -a || :").strip()
    user = machine.sh("getent passwd garm || :").strip()
    print(
        f"after remove: paths left {after}, unit files or links {links}, units {units!r}, "
        f"garm's processes {processes!r}; user: {user!r}"
    )
    assert len(before) >= 20
    assert after == [] and links == [] and units == "" and processes == ""
    assert user.startswith("garm:")  # the user stays (files.md)

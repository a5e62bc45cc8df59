"""What the machine tier's tests ask of a container: hooks of the charm, systemd's view."""

from __future__ import annotations

import json
import re

from tests.nspawn import REPO, Machine

FILES = REPO / "docs/reference/files.md"
# A row of its table: `path` | owner | mode | what.
_ROW = re.compile(r"^\| `(/[^`]+)` \| (\w+) \| (\d{4}|\(GARM's\)) \|", re.MULTILINE)


def documented() -> dict[str, tuple[str, str]]:
    """files.md's table: each path, with its owner and mode ("(GARM's)": GARM's to set)."""
    return {path: (owner, mode) for path, owner, mode in _ROW.findall(FILES.read_text())}


def hook(machine: Machine, event: str, **config: int | str) -> dict[str, str]:
    """Run one hook of the real charm in ``machine`` (``tests.machine_tier.hook``).

    ``config`` changes the charm's config first (``reconcile_interval`` for
    ``reconcile-interval``). The unit's status after it: ``{"status", "message"}``.
    """
    argv = ["/usr/bin/python3", "-m", "tests.machine_tier.hook", event]
    for key, value in config.items():
        argv.append(f"--config={key.replace('_', '-')}={value}")
    done = machine.run(argv)
    return json.loads(done.stdout.strip().splitlines()[-1])


def show(machine: Machine, unit: str, *properties: str) -> dict[str, str]:
    """``systemctl show`` of ``unit``: the properties asked for, as systemd holds them."""
    text = machine.sh(f"systemctl show {unit} --property={','.join(properties)}")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def logged(machine: Machine, unit: str, text: str) -> list[float]:
    """When systemd logged a line holding ``text`` about ``unit`` (a glob), in seconds
    since the epoch, to the microsecond: its own record of starts and ends."""
    lines = machine.sh(f"journalctl -u '{unit}' -o short-unix --no-pager").splitlines()
    return [float(line.split()[0]) for line in lines if text in line]

"""``juju-exec`` on a tier's machine: Juju 3.6's syntax checked, the command run as Juju would.

Juju 3.6's usage is ``juju-exec [options] [-u] [<unit-name>] <commands>``: the unit by its
id (``garm/0``) or its tag (``unit-garm-0``), as a positional argument or with ``-u``,
and the rest of the arguments the commands, which the uniter runs with bash in the
unit's charm directory, in a hook context, under the machine lock
(https://documentation.ubuntu.com/juju/3.6/reference/resource-compute/list-of-commands-available-on-a-compute-resource-provisioned-by-juju/juju-exec/).
This stands in for it on a machine with no Juju agent: a call outside that grammar, or
for a unit not on this machine, fails as juju-exec does (exit 2); a good one is noted in
``CALLS`` (when it began and ended, its arguments, the systemd unit that made it, its
exit status) and, unless the agent is down (``AGENT_DOWN``), its commands run with
bash in the unit's charm directory (``charm_dir``), whose ``dispatch`` runs the named
hook of the real charm (``tests.machine_tier.hook``, which takes the machine lock).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.machine_tier import HOME, charm_dir, unit

CALLS = HOME / "juju-exec.jsonl"
# Present while the unit's agent is cut off: juju-exec reaches no agent, no hook runs.
AGENT_DOWN = HOME / "agent-down"
_FLAGS = ("--force-remote-unit", "--no-context", "--operator")
_VALUED = ("-r", "--relation", "--remote-app", "--remote-unit")
_APP = r"([a-z][a-z0-9]*(?:-[a-z0-9]*[a-z][a-z0-9]*)*)"
# A unit's id or its tag.
_UNIT = (re.compile(_APP + r"/(0|[1-9][0-9]*)"), re.compile("unit-" + _APP + r"-(0|[1-9][0-9]*)"))


def parse(argv: list[str]) -> tuple[str, list[str]]:
    """The unit named and the commands; ValueError for what Juju 3.6 would refuse."""
    named: str | None = None
    here = unit()
    args = list(argv)
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        name, equals, value = flag.partition("=")
        if flag in _FLAGS:
            continue
        if name == "-u" or name in _VALUED:
            if not equals:
                if not args:
                    raise ValueError(f"flag needs an argument: {flag}")
                value = args.pop(0)
            named = value if name == "-u" else named
            continue
        raise ValueError(f"flag provided but not defined: {flag}")
    if named is None:
        if len(args) < 2:
            raise ValueError("missing unit-name or commands")
        named = args.pop(0)
    match = _UNIT[0].fullmatch(named) or _UNIT[1].fullmatch(named)
    if match is None or f"{match[1]}/{match[2]}" != here:
        raise ValueError(f"unit {named!r} not found on this machine")
    if not args:
        raise ValueError("missing commands")
    return here, args


def main() -> int:
    argv, started = sys.argv[1:], time.time()
    try:
        here, commands = parse(argv)
    except ValueError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return 2
    if AGENT_DOWN.exists():
        print("ERROR the unit's agent cannot be reached", file=sys.stderr)
        code = 1
    else:
        command = ["/bin/bash", "-c", " ".join(commands)]
        code = subprocess.run(command, cwd=charm_dir(here), check=False).returncode
    call = {"at": started, "ended": time.time(), "argv": argv, "unit": _caller(), "rc": code}
    with CALLS.open("a") as calls:
        calls.write(json.dumps(call) + "\n")
    return code


def _caller() -> str:
    """The systemd unit this runs in: the reconcile timer's service, or a requeue's."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        found = re.search(r"/([^/]+\.service)$", line)
        if found:
            return found[1]
    return ""


if __name__ == "__main__":
    sys.exit(main())

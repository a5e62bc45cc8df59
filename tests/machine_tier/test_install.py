"""The charm's install hook under a real systemd: GARM's service, and its files as documented.

docs/reference/files.md is read for what it promises: every path its table names that is
on the machine has the owner and mode written there, and nothing else the charm put
there can be read by any user.
"""

from __future__ import annotations

import time

from tests.machine_tier.tier import documented, hook, show
from tests.nspawn import Machine

# Where the charm puts files of its own.
OWN = ("/etc/garm", "/var/lib/garm", "/var/lib/garm-charm", "/var/log/garm")
OWN_FILES = ("/usr/local/bin/garm*", "/usr/local/lib/garm-charm", "/etc/systemd/system/garm*")
# What a leader on sqlite with no configurator yet has, at the least.
EXPECTED = {
    "/usr/local/bin/garm",
    "/usr/local/bin/garm-provider-openstack",
    "/etc/garm/",
    "/etc/garm/config.toml",
    "/var/lib/garm/",
    "/etc/systemd/system/garm.service",
    "/etc/systemd/system/garm-reconcile.service",
    "/etc/systemd/system/garm-reconcile.timer",
    "/var/lib/garm-charm/",
    "/var/lib/garm-charm/resources/",
    "/var/lib/garm-charm/admin-token.json",
    "/var/log/garm/",
    "/var/log/garm/garm.log",
}
HARDENING = {
    "User": "garm",
    "Group": "garm",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ReadWritePaths": "/var/lib/garm",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "CapabilityBoundingSet": "",
    "StartLimitBurst": "5",
    "StartLimitIntervalUSec": "5min",
}


def test_garm_runs_as_garm_with_the_units_hardening_and_answers(machine: Machine) -> None:
    started = time.monotonic()
    status = hook(machine, "install")
    took = time.monotonic() - started
    print(f"install hook: {took:.1f} s, {status}")

    unit = show(machine, "garm", "ActiveState", "MainPID", *HARDENING)
    print(f"garm.service: {unit}")
    assert unit["ActiveState"] == "active"
    assert {key: unit[key] for key in HARDENING} == HARDENING
    # What the running process has, not only what its unit asks for.
    pid = unit["MainPID"]
    process = machine.sh(f"grep -E '^(Uid|Gid|CapEff|CapBnd|NoNewPrivs):' /proc/{pid}/status")
    garm = machine.sh("id -u garm; id -g garm").split()
    print(process)
    fields = dict(line.split(":", 1) for line in process.splitlines())
    assert fields["Uid"].split() == [garm[0]] * 4 and fields["Gid"].split() == [garm[1]] * 4
    assert int(fields["CapEff"], 16) == int(fields["CapBnd"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    mounts = machine.sh(f"awk '{{print $5, $6}}' /proc/{pid}/mountinfo")
    options = dict(line.split(" ", 1) for line in mounts.splitlines())
    print(f"GARM sees / {options['/']}, /var/lib/garm {options.get('/var/lib/garm')}")
    assert options["/"].startswith("ro,") and options["/var/lib/garm"].startswith("rw,")

    answer = machine.sh(
        "curl -s -o /dev/null -w '%{http_code} %{time_total}' "
        "http://127.0.0.1:9997/api/v1/controller"
    )
    print(f"GARM answers on 127.0.0.1:9997: {answer} (HTTP status, seconds)")
    assert answer.split()[0] == "401"  # GARM's answer without a token
    metrics = machine.sh(
        "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9997/metrics; echo;"
        "curl -s http://127.0.0.1:9099/metrics | grep -c '^garm_charm_' || :"
    ).split()
    print(
        f"GARM's /metrics without a token: {metrics[0]}; the charm's metrics server on "
        f"127.0.0.1:9099: {metrics[1]} garm_charm_ lines"
    )
    assert metrics[0] == "401" and int(metrics[1]) > 0

    log = machine.sh("stat -c '%U %a %s' /var/log/garm/garm.log").split()
    print(f"GARM's log /var/log/garm/garm.log: owner {log[0]}, mode {log[1]}, {log[2]} bytes")
    assert log[:2] == ["garm", "600"] and int(log[2]) > 0


def test_every_documented_file_has_its_owner_and_mode_and_nothing_else_is_readable(
    machine: Machine,
) -> None:
    hook(machine, "install")
    table = documented()
    concrete = [path for path in table if "<" not in path]
    listing = machine.sh(
        "for p in " + " ".join(concrete) + "; do [ -e $p ] && stat -c '%n %U %a' $p || :; done"
    )
    rows = map(str.split, listing.splitlines())
    found = {name.rstrip("/"): (owner, mode) for name, owner, mode in rows}
    checked = {}
    for path in concrete:
        name = path.rstrip("/")
        if name in found:
            owner, mode = table[path]
            seen = found[name]
            checked[path] = seen
            assert seen[0] == owner, f"{path} is {seen[0]}'s, files.md says {owner}'s"
            if mode != "(GARM's)":
                assert seen[1] == mode.lstrip("0"), f"{path} is {seen[1]}, files.md says {mode}"
    print(f"{len(checked)} of files.md's {len(table)} paths on the machine, each as written:")
    for path, (owner, mode) in sorted(checked.items()):
        print(f"    {path} {owner} {mode}")
    assert set(checked) >= EXPECTED, f"missing: {sorted(EXPECTED - set(checked))}"

    # Readable by any user: the file readable by others, and every directory above it
    # searchable by them.
    readable = machine.sh(
        "find " + " ".join(OWN) + " " + " ".join(OWN_FILES) + " -perm -o=r 2>/dev/null"
        " | while read p; do d=$(dirname $p); ok=1;"
        " while [ $d != / ]; do [ $(( 0$(stat -c %a $d) & 1 )) = 1 ] || ok=0; d=$(dirname $d);"
        " done; [ $ok = 1 ] && echo $p; done"
    ).split()
    allowed = {path.rstrip("/") for path, (_, mode) in table.items() if mode[-1:] in "4567"}
    print(f"readable by any user: {sorted(readable)}")
    assert set(readable) <= allowed, f"not documented so: {sorted(set(readable) - allowed)}"

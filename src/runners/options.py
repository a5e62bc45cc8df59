"""What runners are set up with: a configurator unit's runner options, and debug-ssh.

Options come checked by the relation library; the debug-ssh relation's data is checked
here, as nothing else reads it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from charms.garm_machine.v0.garm_configurator import ConfiguratorUnitData, parse_ports

# aproxy redirects these when the configurator names none (docs/reference/runner-options.md),
# as the Kubernetes garm charm does (canonical/github-runner-operators, at 86ffffaa,
# charms/garm/src/runner_template.py).
DEFAULT_REDIRECT_PORTS = ("80", "443")
# Always left out of the redirect: the runner's own loopback traffic.
LOOPBACK = "127.0.0.0/8"
DEBUG_SSH_KEYS = ("host", "port", "rsa_fingerprint", "ed25519_fingerprint")


@dataclass(frozen=True)
class Proxy:
    """Send a runner's traffic on ``redirect_ports`` through aproxy to ``url``, but ``exclude``."""

    url: str
    redirect_ports: tuple[str, ...] = DEFAULT_REDIRECT_PORTS
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunnerOptions:
    """The runner options one configurator unit publishes; all optional."""

    dockerhub_mirror: str | None = None
    proxy: Proxy | None = None
    otel_endpoint: str | None = None
    pre_job_script: str | None = None


@dataclass(frozen=True)
class DebugSsh:
    """The tmate-ssh-server a runner's debug action connects to."""

    host: str
    port: int
    rsa_fingerprint: str
    ed25519_fingerprint: str


@dataclass(frozen=True)
class RunnerContext:
    """What every runner needs besides its unit's options.

    ``garm_host``: where runners reach GARM. ``debug_ssh_problem`` names the unit and key
    when its data is unusable, and then no runner template changes at all.
    """

    garm_host: str = ""
    debug_ssh: DebugSsh | None = None
    debug_ssh_problem: str = ""


# Runners with nothing set up besides their unit's options.
NO_CONTEXT = RunnerContext()


def runner_options(data: ConfiguratorUnitData) -> RunnerOptions:
    """The options of a unit whose data the relation library has accepted."""
    proxy = None
    if data.runner_http_proxy:
        ports = parse_ports(data.aproxy_redirect_ports or "") or DEFAULT_REDIRECT_PORTS
        exclude = tuple(
            str(ipaddress.IPv4Network(part.strip(), strict=False))
            for part in (data.aproxy_exclude_addresses or "").split(",")
            if part.strip()
        )
        proxy = Proxy(data.runner_http_proxy, tuple(ports), exclude)
    return RunnerOptions(
        dockerhub_mirror=data.dockerhub_mirror,
        proxy=proxy,
        otel_endpoint=data.otel_collector_endpoint,
        pre_job_script=data.pre_job_script,
    )


class DebugSshError(ValueError):
    """A tmate-ssh-server unit published something no runner may be given."""

    def __init__(self, unit: str, key: str, reason: str):
        super().__init__(f"{unit}: {key}: {reason}")


def debug_ssh(units: Iterable[tuple[str, Mapping[str, str]]]) -> DebugSsh | None:
    """The server runners use: of the units that published all four keys, the first.

    By (host, port), so every pass picks the same one. A value no runner script may
    carry, or a port not from 1 to 65535, raises DebugSshError.
    """
    servers: list[DebugSsh] = []
    for unit, data in units:
        if not all((data.get(key) or "").strip() for key in DEBUG_SSH_KEYS):
            continue
        values = []
        for key in DEBUG_SSH_KEYS:
            value = data[key].strip()
            if len(value) > 255:
                raise DebugSshError(unit, key, "longer than 255 characters")
            if any(ord(c) < 33 or ord(c) == 127 for c in value):
                raise DebugSshError(unit, key, "contains whitespace or a control character")
            if "{{" in value or "}}" in value or "'" in value:
                raise DebugSshError(unit, key, "contains characters a runner script refuses")
            values.append(value)
        host, port, rsa, ed25519 = values
        if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise DebugSshError(unit, "port", f"{port!r} is not a port number (1-65535)")
        servers.append(DebugSsh(host, int(port), rsa, ed25519))
    return min(servers, key=lambda s: (s.host, s.port), default=None)

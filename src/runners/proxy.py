"""The aproxy pre-install script: a runner's web traffic through the operator's proxy.

GARM's provider runs ``extra_specs.pre_install_scripts`` as root, in name order, before the
install script downloads anything, which behind a proxy only gets out through it. Pure.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterable
from urllib.parse import urlsplit

from runners.options import LOOPBACK, Proxy
from runners.scripts import CHARM_DIR, fill

# The name GARM runs the aproxy script under: "00-" sorts before the configurator's own
# ``pre_install.sh``, and a name that would sort first is refused (``juju.relation``), so the
# proxy is up before any other script runs.
PRE_INSTALL_NAME = "00-aproxy.sh"
APROXY_LISTEN_PORT = 54969
# A table of the charm's own, so loading it again replaces it and touches nothing else.
NFT_TABLE = "garm_aproxy"
# Any address that leaves by the default route: `ip route get` on it names the source
# address of that route, the host's primary one. TEST-NET-1, so nothing is ever sent.
ROUTE_PROBE = "192.0.2.1"
NFT_DELIMITER = "GARM_APROXY_NFT"
_DEFAULT_PORTS = {"http": 80, "https": 443}
# What may be handed to getent for resolving: a DNS name, never anything option-like.
_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})$")


def _nft_ports(ports: Iterable[str]) -> str:
    """The ports as an nft set's elements: ascending ranges, merged, as nft refuses overlaps."""
    ranges: list[tuple[int, int]] = []
    for port in ports:
        low, _, high = port.strip().partition("-")
        bounds = (int(low), int(high or low))
        if not (1 <= bounds[0] <= bounds[1] <= 65535):
            raise ValueError(f"{port!r} is not a port or an ascending port range")
        ranges.append(bounds)
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    return ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in merged)


def _address_or_name(host: str) -> ipaddress.IPv4Network | str | None:
    """A host to keep out of the redirect: an IPv4 /32, a name to resolve, or nothing.

    Nothing for IPv6 (aproxy takes only IPv4) or what is no host name (never an argument).
    """
    host = host.strip().strip("[]")
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.lower() if _HOSTNAME.match(host) else None
    return ipaddress.IPv4Network(address) if address.version == 4 else None


def _proxy_target(url: str) -> tuple[str, str]:
    """The proxy's host, and ``host:port`` as aproxy takes it (scheme's port if none)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
    shown = f"[{host}]" if ":" in host else host
    return host, f"{shown}:{port}"


# The nft table is declared, deleted and defined again in one transaction, so loading it
# twice replaces it. Networks known now, merged, go in the interval set excluded_nets;
# addresses resolved on the runner, which may overlap them, in the plain excluded_hosts.
# Containers' traffic reaches the host through prerouting, where loopback is no
# destination: it is sent to the host's primary address ($garm_primary) instead.
_APROXY_SCRIPT = r"""#!/bin/bash
# Written by the garm charm. GARM runs it as root before the runner's install script:
# it sends this runner's outbound web traffic (and its containers') through aproxy to
# the operator's proxy. Each step is logged; a step that fails stops the redirect from
# being set up, since redirecting traffic to an aproxy that is not running would cut
# the runner off instead.
set -u
set -o pipefail
umask 022

PROXY_URL=@PROXY_URL@
APROXY_TARGET=@APROXY_TARGET@
LISTEN_PORT=@LISTEN_PORT@
NFT_DIR=@NFT_DIR@
NFT_FILE=@NFT_FILE@
# Names whose addresses are kept out of the redirect (GARM's, the proxy's).
RESOLVE=(@RESOLVE@)

log() {
    echo "garm-aproxy: $*"
    logger -t garm-aproxy -- "$*" 2>/dev/null || true
}

aproxy_active() {
    snap services aproxy 2>/dev/null |
        awk 'NR > 1 && $3 == "active" { found = 1 } END { exit !found }'
}

log "setting snapd's proxy to $PROXY_URL"
if ! snap set system proxy.http="$PROXY_URL" proxy.https="$PROXY_URL"; then
    log "could not set snapd's proxy; installing aproxy may fail"
fi

if snap list aproxy >/dev/null 2>&1; then
    log "aproxy is already installed"
else
    for attempt in 1 2 3; do
        log "installing aproxy (attempt $attempt of 3)"
        if snap install aproxy --edge; then
            break
        fi
        sleep 10
    done
    if ! snap list aproxy >/dev/null 2>&1; then
        log "aproxy could not be installed; traffic is not redirected"
        exit 1
    fi
fi

log "pointing aproxy at $APROXY_TARGET, listening on port $LISTEN_PORT"
if ! snap set aproxy proxy="$APROXY_TARGET" listen=":$LISTEN_PORT"; then
    log "aproxy could not be configured; traffic is not redirected"
    exit 1
fi
snap restart aproxy || log "could not restart aproxy; waiting for it anyway"

active=no
for ((waited = 0; waited < 30; waited++)); do
    if aproxy_active; then
        active=yes
        break
    fi
    sleep 1
done
if [ "$active" != yes ]; then
    log "aproxy is not active after 30 s; traffic is not redirected"
    exit 1
fi

if ! command -v nft >/dev/null 2>&1; then
    log "nft is not installed; traffic is not redirected"
    exit 1
fi

hosts=()
for name in "${RESOLVE[@]}"; do
    mapfile -t addresses < <(getent ahostsv4 "$name" | awk '{ print $1 }' |
        grep -E '^[0-9]{1,3}([.][0-9]{1,3}){3}$' | sort -u)
    if [ "${#addresses[@]}" -eq 0 ]; then
        log "could not resolve $name; its traffic on the redirected ports goes to aproxy"
        continue
    fi
    log "keeping $name (${addresses[*]}) out of the redirect"
    hosts+=("${addresses[@]}")
done

primary=$(ip -4 route get @ROUTE_PROBE@ 2>/dev/null |
    sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n 1)
if ! [[ $primary =~ ^[0-9]{1,3}([.][0-9]{1,3}){3}$ ]]; then
    log "found no primary IPv4 address; containers' traffic is not redirected"
    primary=""
fi

mkdir -p "$NFT_DIR"
{
    cat <<'@NFT_DELIMITER@'
table ip @NFT_TABLE@
delete table ip @NFT_TABLE@
table ip @NFT_TABLE@ {
    set excluded_nets {
        type ipv4_addr
        flags interval
        elements = { @EXCLUDED_NETS@ }
    }
    set excluded_hosts {
        type ipv4_addr
    }
    chain output {
        type nat hook output priority -100; policy accept;
        ip daddr @excluded_nets return
        ip daddr @excluded_hosts return
        tcp dport { @DPORTS@ } counter dnat to 127.0.0.1:@LISTEN_PORT@
    }
}
@NFT_DELIMITER@
    if [ -n "$primary" ]; then
        printf 'define garm_primary = %s\n' "$primary"
        cat <<'@NFT_DELIMITER@'
table ip @NFT_TABLE@ {
    chain prerouting {
        type nat hook prerouting priority -100; policy accept;
        fib daddr type local return
        ip daddr @excluded_nets return
        ip daddr @excluded_hosts return
        tcp dport { @DPORTS@ } counter dnat to $garm_primary:@LISTEN_PORT@
    }
}
@NFT_DELIMITER@
    fi
    if [ "${#hosts[@]}" -gt 0 ]; then
        printf 'add element ip @NFT_TABLE@ excluded_hosts { %s }\n' \
            "$(printf '%s\n' "${hosts[@]}" | sort -u | paste -s -d, -)"
    fi
} >"$NFT_FILE"

log "redirecting outbound traffic to aproxy (rules in $NFT_FILE)"
if ! nft -f "$NFT_FILE"; then
    log "nft refused the rules in $NFT_FILE; traffic is not redirected"
    exit 1
fi
log "done: outbound traffic goes through aproxy to $APROXY_TARGET"
"""


def aproxy_script(proxy: Proxy, garm_host: str, *, root: str = "") -> str:
    """The root pre-install script that sends a runner's web traffic through aproxy.

    Kept out of the redirect: loopback, the exclusions, GARM (runners call it directly) and
    the proxy itself, whose port may be redirected too. Names are resolved on the runner.
    ``root`` prefixes every path the script writes, for tests.
    """
    proxy_host, target = _proxy_target(proxy.url)
    networks = [ipaddress.IPv4Network(LOOPBACK)]
    networks += [ipaddress.IPv4Network(net, strict=False) for net in proxy.exclude]
    names: list[str] = []
    for host in (garm_host, proxy_host):
        kept = _address_or_name(host)
        if isinstance(kept, ipaddress.IPv4Network):
            networks.append(kept)
        elif kept and kept not in names:
            names.append(kept)
    nft_dir = root + CHARM_DIR
    return fill(
        _APROXY_SCRIPT,
        {
            "PROXY_URL": shlex.quote(proxy.url),
            "APROXY_TARGET": shlex.quote(target),
            "LISTEN_PORT": str(APROXY_LISTEN_PORT),
            "NFT_DIR": shlex.quote(nft_dir),
            "NFT_FILE": shlex.quote(f"{nft_dir}/aproxy.nft"),
            "RESOLVE": " ".join(shlex.quote(name) for name in names),
            "ROUTE_PROBE": ROUTE_PROBE,
            "NFT_DELIMITER": NFT_DELIMITER,
            "EXCLUDED_NETS": ", ".join(map(str, ipaddress.collapse_addresses(networks))),
            "DPORTS": _nft_ports(proxy.redirect_ports),
            "NFT_TABLE": NFT_TABLE,
        },
    )

"""What Juju gives this unit besides relations: its config, resources, address, model proxy.

What Juju does not have is None. A failing ``network-get`` fails the hook (Juju retries):
a guessed address would give every runner a URL that reaches no GARM.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import ops

from garm.config import Proxy
from juju.config import CharmConfig, ConfigError
from juju.status import Summary

logger = logging.getLogger(__name__)


def config(charm: ops.CharmBase) -> CharmConfig | ConfigError:
    """The checked config, or why it cannot be used; an option Juju leaves out is its default."""
    defaults: dict[str, Any] = {
        name.replace("-", "_"): option.default for name, option in charm.meta.config.items()
    }
    try:
        return charm.load_config(CharmConfig, **defaults)
    except ConfigError as exc:
        return exc


def leads(unit: ops.Unit) -> bool:
    """Whether this unit leads; one that cannot tell (no controller) does not (``fence``)."""
    try:
        return unit.is_leader()
    except ops.ModelError:
        return False


def status(summary: Summary) -> ops.StatusBase:
    """The unit status a pass's summary says, its line cut to fit ``juju status``.

    A cut line's message is logged in full beside it, where ``juju debug-log`` shows it.
    """
    line = summary.line
    if line != summary.message:
        level = logging.WARNING if summary.kind == "blocked" else logging.INFO
        logger.log(level, "Status in full: %s", summary.message)
    return ops.StatusBase.from_name(summary.kind, line)


def attached(model: ops.Model, name: str) -> Path | None:
    """A resource's file, or None when it is not attached (Juju may hand an empty one)."""
    try:
        path = model.resources.fetch(name)
    except (ops.ModelError, NameError):
        return None
    return path if path.stat().st_size > 0 else None


def ingress_address(model: ops.Model, endpoint: str) -> str | None:
    """The address this unit is reached at on ``endpoint``'s network; None before it has one."""
    binding = model.get_binding(endpoint)
    address = binding.network.ingress_address if binding else None
    return str(address) if address else None


def model_proxy() -> Proxy:
    """The model's proxy settings (model-config ``juju-http-proxy`` ...), as GARM takes them."""
    return Proxy(
        proxy_url(os.environ.get("JUJU_CHARM_HTTP_PROXY", "")),
        proxy_url(os.environ.get("JUJU_CHARM_HTTPS_PROXY", "")),
        os.environ.get("JUJU_CHARM_NO_PROXY", ""),
    )


def proxy_url(value: str) -> str:
    """A model proxy setting with a scheme, which Juju may omit and GARM requires.

    GARM refuses to start on a proxy URL without one (``url.ParseRequestURI``).
    """
    value = value.strip()
    return value if not value or "://" in value else f"http://{value}"

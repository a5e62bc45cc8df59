"""The charm's config as Juju hands it: charmcraft.yaml's defaults, with some options set."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from juju.config import CharmConfig

OPTIONS: dict[str, dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parents[1] / "charmcraft.yaml").read_text()
)["config"]["options"]
DEFAULTS = {option: spec["default"] for option, spec in OPTIONS.items()}


def charm_config(options: Mapping[str, object] = {}) -> CharmConfig:
    """The config as ``CharmBase.load_config`` makes it: every option, ``-`` read as ``_``.

    Juju hands a hook every option, charmcraft.yaml's default for each one not set.
    """
    given = {**DEFAULTS, **options}
    return CharmConfig(**{option.replace("-", "_"): value for option, value in given.items()})

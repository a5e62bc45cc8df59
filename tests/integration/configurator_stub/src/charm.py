#!/usr/bin/env python3
"""Publish the configured databag on every garm-configurator relation (tests only)."""

import json

import ops


class ConfiguratorStub(ops.CharmBase):
    """Writes config `databag` into this unit's databag, replacing what was there."""

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        framework.observe(self.on.config_changed, self._publish)
        framework.observe(self.on["garm-configurator"].relation_joined, self._publish)

    def _publish(self, _: ops.EventBase) -> None:
        wanted = json.loads(str(self.config["databag"]))
        for relation in self.model.relations["garm-configurator"]:
            data = relation.data[self.unit]
            for key in set(data) - set(wanted):
                del data[key]
            data.update({key: str(value) for key, value in wanted.items()})
        self.unit.status = ops.ActiveStatus("publishing")


if __name__ == "__main__":
    ops.main(ConfiguratorStub)

#!/usr/bin/env python3
"""Publish the configured databag on every garm-configurator relation (tests only).

Like the real garm-configurator, a GitHub App key given in config is not put in the
databag: it goes into an application secret granted to the relation, whose URI is
published as ``github_private_key_secret_uri``.
"""

import json

import ops

KEY_LABEL = "configurator-github-key"


class ConfiguratorStub(ops.CharmBase):
    """Writes config `databag` into this unit's databag, replacing what was there."""

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        framework.observe(self.on.config_changed, self._publish)
        framework.observe(self.on["garm-configurator"].relation_joined, self._publish)

    def _publish(self, _: ops.EventBase) -> None:
        wanted = json.loads(str(self.config["databag"]))
        key = str(self.config["github-private-key"])
        for relation in self.model.relations["garm-configurator"]:
            if key and self.unit.is_leader():
                secret = self._key_secret(key)
                secret.grant(relation)
                wanted["github_private_key_secret_uri"] = secret.id
            data = relation.data[self.unit]
            for stale in set(data) - set(wanted):
                del data[stale]
            data.update({name: str(value) for name, value in wanted.items()})
        self.unit.status = ops.ActiveStatus("publishing")

    def _key_secret(self, key: str) -> ops.Secret:
        try:
            secret = self.model.get_secret(label=KEY_LABEL)
            secret.set_content({"value": key})
        except ops.SecretNotFoundError:
            secret = self.app.add_secret({"value": key}, label=KEY_LABEL)
        return secret


if __name__ == "__main__":
    ops.main(ConfiguratorStub)

#!/usr/bin/env python3
"""Publish the configured databag on every garm-configurator relation (tests only).

Like the real garm-configurator, a GitHub App key given in config is not put in the
databag: the leader copies it into an application secret (label
``configurator-github-key``, content ``{"value": <PEM>}``), grants it to the relation and
publishes its URI as ``github_private_key_secret_uri``.
"""

import json

import ops

KEY_LABEL = "configurator-github-key"
# Juju writes these into every unit databag itself; the real configurator leaves them be.
JUJU_KEYS = frozenset({"ingress-address", "egress-subnets", "private-address"})


class ConfiguratorStub(ops.CharmBase):
    """Writes config `databag` into this unit's databag, replacing what was there."""

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        framework.observe(self.on.config_changed, self._publish)
        framework.observe(self.on.leader_elected, self._publish)
        framework.observe(self.on["garm-configurator"].relation_joined, self._publish)
        framework.observe(self.on["garm-configurator"].relation_changed, self._publish)

    def _publish(self, _: ops.EventBase) -> None:
        wanted = self._wanted()
        if wanted is None:
            return  # blocked; like the real configurator, the last good data stays
        key = str(self.config["github-private-key"])
        for relation in self.model.relations["garm-configurator"]:
            data = dict(wanted)
            if key and self.unit.is_leader():
                secret = self._key_secret(key)
                secret.grant(relation)  # resolves secret.id when it was found by label
                data["github_private_key_secret_uri"] = str(secret.id)
            bag = relation.data[self.unit]
            for stale in set(bag) - set(data) - JUJU_KEYS:
                del bag[stale]
            bag.update(data)
        self.unit.status = ops.ActiveStatus("publishing")

    def _wanted(self) -> dict[str, str] | None:
        """The `databag` option as a JSON object of strings, or None (and blocked)."""
        try:
            wanted = json.loads(str(self.config["databag"]))
        except json.JSONDecodeError as exc:
            self.unit.status = ops.BlockedStatus(f"databag is not JSON: {exc}")
            return None
        if not isinstance(wanted, dict) or not all(isinstance(v, str) for v in wanted.values()):
            self.unit.status = ops.BlockedStatus("databag must be a JSON object of strings")
            return None
        return wanted

    def _key_secret(self, key: str) -> ops.Secret:
        # As the real configurator does: set the content on every leader reconcile.
        try:
            secret = self.model.get_secret(label=KEY_LABEL)
            secret.set_content({"value": key})
        except ops.SecretNotFoundError:
            secret = self.app.add_secret({"value": key}, label=KEY_LABEL)
        return secret


if __name__ == "__main__":  # pragma: nocover
    ops.main(ConfiguratorStub)

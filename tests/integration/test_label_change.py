"""On a real Juju: deploy, relate a configurator, change labels, see the changeover end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jubilant

from tests.databags import SECOND_UNIT

SETTLED = "1 scaleset in sync"


def _message(status: jubilant.Status) -> str:
    return status.apps["garm"].units["garm/0"].workload_status.message


def test_label_change_replaces_and_removes_the_predecessor(juju, garm_charm, stub_charm):
    juju.deploy(
        garm_charm,
        "garm",
        resources={
            "garm": os.environ["GARM_BINARY"],
            "garm-provider-openstack": os.environ["GARM_PROVIDER_OPENSTACK_BINARY"],
        },
    )
    databag = {
        **SECOND_UNIT,
        "provider_name": "garm-configurator-stub-0",
        "org": os.environ["GARM_TEST_GITHUB_ORG"],
        "github_app_id": os.environ["GARM_TEST_GITHUB_APP_ID"],
        "github_installation_id": os.environ["GARM_TEST_GITHUB_INSTALLATION_ID"],
        # A provider GARM can load; with no idle runner asked for it is never called.
        "openstack_auth_url": "http://keystone.invalid:5000/v3",
        "openstack_username": "unused",
        "openstack_password": "unused",
        "openstack_project_name": "unused",
        "openstack_user_domain_name": "Default",
        "openstack_project_domain_name": "Default",
        "openstack_region_name": "RegionOne",
        "openstack_network": "unused",
    }
    key = Path(os.environ["GARM_TEST_GITHUB_APP_KEY"]).read_text()
    juju.deploy(
        stub_charm,
        "garm-configurator-stub",
        config={"databag": json.dumps(databag), "github-private-key": key},
    )
    juju.integrate("garm", "garm-configurator-stub")
    juju.wait(lambda status: _message(status) == SETTLED)

    changed = {**databag, "labels": "self-hosted,linux,arm64"}
    juju.config("garm-configurator-stub", {"databag": json.dumps(changed)})
    juju.wait(lambda status: _message(status).startswith("Replacing scaleset sm-x64"))
    juju.wait(lambda status: _message(status) == SETTLED)

    plan = juju.run("garm/0", "plan")
    assert plan.results["writes"] == "0"
    assert plan.results["phases"] == "converged"

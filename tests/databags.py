"""Configurator unit databags as the real garm-configurator writes them."""

PASSWORD_SECRET_URI = "secret://3f9c6d2e-1b7a-4c55-8a0e-2f1d9b7c6e40/d0hq2ap5ihkc77rs9m3g"
KEY_SECRET_URI = "secret://3f9c6d2e-1b7a-4c55-8a0e-2f1d9b7c6e40/d0hq2bp5ihkc77rs9m40"

# A configurator leader's unit databag once its image is known, as garm-configurator writes
# it (canonical/github-runner-operators charms/garm-configurator/src/charm.py,
# _configure_garm_relation; the keys: docs/reference/relations.md).
EXAMPLE_UNIT = {
    "name": "lg-x64",
    "provider_name": "garm-configurator-0",
    "image_id": "5b1f0b1e-2d0c-4a53-9d0e-6f3f0c2d9a71",
    "flavor": "m1.large",
    "os_arch": "amd64",
    "min_idle_runner": "1",
    "max_runner": "10",
    "labels": "self-hosted,linux,x64,large",
    "runner_group": "Default",
    "pre_install_scripts": '{"pre_install.sh": "#!/bin/bash\\napt-get install -y jq"}',
    "org": "example-org",
    "runner_http_proxy": "http://squid.internal:3128",
    "aproxy_exclude_addresses": "10.0.0.0/8,192.168.0.0/16",
    "aproxy_redirect_ports": "80,443",
    "dockerhub_mirror": "https://registry-mirror.internal:5000",
    "otel_collector_endpoint": "http://otel.internal:4317",
    "pre_job_script": 'echo "job ${GITHUB_JOB} starting"',
    "openstack_auth_url": "https://keystone.internal:5000/v3",
    "openstack_username": "ci-runners",
    "openstack_password_secret_uri": PASSWORD_SECRET_URI,
    "openstack_project_name": "ci-runners",
    "openstack_user_domain_name": "Default",
    "openstack_project_domain_name": "Default",
    "openstack_region_name": "RegionOne",
    "openstack_network": "ci-runners-net",
    "github_app_id": "123456",
    "github_installation_id": "78901234",
    "github_private_key_secret_uri": KEY_SECRET_URI,
    "ingress-address": "10.1.2.3",
    "egress-subnets": "10.1.2.3/32",
    "private-address": "10.1.2.3",
}
SECOND_UNIT = {
    "name": "sm-x64",
    "provider_name": "garm-configurator-1",
    "image_id": "0c8a2b6e-5d1f-4e3a-8b7c-9d0e1f2a3b4c",
    "flavor": "m1.small",
    "os_arch": "amd64",
    "max_runner": "2",
    "labels": "self-hosted,linux,x64",
    "org": "example-org",
}
# SECOND_UNIT's scaleset as the only unit (garm-configurator/0) of its application.
SOLE_UNIT = {**SECOND_UNIT, "provider_name": "garm-configurator-0"}


def follower(unit: str, data: dict[str, str], *, image: bool = True) -> dict[str, str]:
    """What a configurator unit that does not lead publishes: Phase A only, under its
    own provider, named after the unit (garm-configurator src/charm_state.py)."""
    keys = {k: v for k, v in data.items() if not k.startswith(("openstack_", "github_"))}
    if not image:
        keys.pop("image_id")
    return {**keys, "provider_name": unit.replace("/", "-")}

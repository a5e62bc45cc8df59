"""GARM's API over TLS through the real charm, with a provider as the library sees one.

The ``certificates`` relation is played with the interface's own databag shapes: the
charm's requirer library writes its certificate request into the unit databag, the test
signs it with a CA of its own (``tests.tls``) and answers in the provider's application
databag, as self-signed-certificates does. GARM reads ``[apiserver]`` when it starts:
each ``systemctl restart garm`` makes the double serve as the written config says,
HTTPS with the written files or plain HTTP, so the charm's client meets a real TLS
handshake with the certificate it wrote.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import subprocess
import tempfile
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
import requests
import urllib3  # noqa: F401 (named by the warning filter)
from charmlibs.interfaces.tls_certificates._tls_certificates import LIBID
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)
from ops import testing

from charm import GarmCharm
from garm import tls, workload
from tests.charm_states import configurator, in_full, live_names, make_state, publish
from tests.collector import collector_reads
from tests.databags import SOLE_UNIT
from tests.garm_double import GarmDouble
from tests.juju_events import reconcile_tick
from tests.machine import Machine
from tests.soak import soak_settings
from tests.tls import (
    Authority,
    provider_app_databag,
    requested_csrs,
    san,
)
from tests.wire import T0

CERTS_ID = 7
PROVIDER = "self-signed-certificates"
# The unit's address in ops.testing (its default network binding).
ADDRESS = "192.0.2.0"
# Every name GARM's certificate must carry here (``garm.tls.serving_hosts``).
HOSTS = (ADDRESS, tls.LOOPBACK)


@pytest.fixture
def garm_reads_its_config(machine: Machine, world: GarmDouble, monkeypatch):
    """GARM loads ``[apiserver]`` at each start: the double serves as written."""
    systemctl = machine.systemctl

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if list(cmd) == ["secret-ids"]:
            # The hook tool the library lists its certificate secrets with at
            # relation-broken; ops.testing does not play it. It keeps none: the key's
            # secret it finds by label.
            return subprocess.CompletedProcess(cmd, 0, "", "")
        done = systemctl(cmd, **kwargs)
        if list(cmd) == ["systemctl", "restart", "garm"]:
            config = tomllib.loads(GarmCharm.paths.config_file.read_text())
            files = config["apiserver"].get("tls", {})
            world.serve_as(files.get("certificate"), files.get("key"))
        return done

    monkeypatch.setattr(subprocess, "run", run)
    yield
    world.serve_as(None, None)


pytestmark = pytest.mark.usefixtures("garm_reads_its_config")


@pytest.fixture
def ca() -> Authority:
    return Authority(not_before=T0 - timedelta(days=30), not_after=T0 + timedelta(days=3650))


def certificates(data: dict[str, str] | None = None) -> testing.Relation:
    return testing.Relation(
        "certificates", remote_app_name=PROVIDER, id=CERTS_ID, remote_app_data=data or {}
    )


def answered(state: testing.State, ca: Authority, **window: Any) -> testing.Relation:
    """The provider signed every request the charm's unit databag holds."""
    asked = state.get_relation(CERTS_ID)
    assert isinstance(asked, testing.Relation)
    window = {"not_before": T0 - timedelta(days=1), "not_after": T0 + timedelta(days=90)} | window
    data = provider_app_databag(asked.local_unit_data, ca, **window)
    return dataclasses.replace(asked, remote_app_data=data)


def with_relation(state: testing.State, relation: testing.Relation) -> testing.State:
    others = [r for r in state.relations if r.id != relation.id]
    return dataclasses.replace(state, relations=[*others, relation])


def serving(ctx, world, resources, ca):
    """Relate a provider, and let it answer: the state once GARM serves HTTPS."""
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates())
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    relation = answered(state, ca)
    return ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )


def test_a_requested_certificate_waits_and_changes_nothing(ctx, world, resources, machine):
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates())

    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)

    assert state.unit_status == testing.WaitingStatus(
        f"Waiting for a certificate from {PROVIDER} (certificates)"
    )
    # The library asked for the names runners and the charm reach GARM at.
    assert "certificate_signing_requests" in state.get_relation(CERTS_ID).local_unit_data
    assert not machine.paths.config_file.exists() and world.requests == []


def test_with_the_certificate_garm_serves_https_and_runners_get_its_ca(
    ctx, world, resources, machine, ca
):
    state = serving(ctx, world, resources, ca)

    assert state.unit_status == testing.ActiveStatus("1 scaleset in sync")
    config = tomllib.loads(machine.paths.config_file.read_text())
    directory = machine.paths.config_dir
    assert config["apiserver"]["use_tls"] is True
    assert config["apiserver"]["tls"] == {
        "certificate": str(directory / tls.CERTIFICATE_FILE),
        "key": str(directory / tls.KEY_FILE),
    }
    # The charm reached GARM over a real handshake with the CA it was given, and set up
    # everything through it.
    assert world.url.startswith("https://") and world.tls_failures == []
    assert len(live_names(world)) == 1
    # Runners reach GARM at https URLs, and get the CA in their bootstrap parameters.
    controller = world.controller()
    port = world.url.rsplit(":", 1)[1]
    assert controller["metadata_url"] == f"https://{ADDRESS}:{port}/api/v1/metadata"
    assert controller["callback_url"] == f"https://{ADDRESS}:{port}/api/v1/callbacks"
    assert controller["ca_cert_bundle"] == ca.pem.strip().encode() + b"\n"


def test_the_collector_scrapes_garm_over_https_checked_against_its_ca(
    ctx, world, resources, ca, machine, tmp_path
):
    collector = testing.Relation(
        "cos-agent", remote_app_name="opentelemetry-collector", id=8, remote_units_data={0: {}}
    )
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates(), collector)
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    relation = answered(state, ca)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )

    (job, _) = collector_reads(state.get_relation(8).local_unit_data).metrics_scrape_jobs
    # The collector checks GARM by the CA the charm's own client checks it by, given
    # inline (a confined collector cannot read the charm's file), and never skips it.
    assert job["scheme"] == "https"
    assert job["tls_config"] == {"ca": (machine.paths.config_dir / tls.CA_FILE).read_text()}
    assert ca.pem.strip() in job["tls_config"]["ca"]
    # What the collector does with that job: the loopback target, over HTTPS checked
    # against that CA (the collector writes it to a file of its own), with the token.
    (target,) = job["static_configs"][0]["targets"]
    token = job["authorization"]["credentials"]
    trusted = tmp_path / "collector-ca.pem"
    trusted.write_text(job["tls_config"]["ca"])
    answer = requests.get(
        f"https://{target}/metrics",
        headers={"Authorization": f"Bearer {token}"},
        verify=str(trusted),
        timeout=5,
    )
    assert answer.status_code == 200


def test_the_names_asked_for_are_the_unit_loopback_and_external_url(ctx, world, resources, ca):
    state = make_state(
        world,
        resources,
        configurator(SOLE_UNIT),
        certificates(),
        config={"external-url": "http://garm.example.internal:9997"},
    )
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    relation = answered(state, ca)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )

    assert state.unit_status.name == "active"
    # external-url is made https: GARM answers only HTTPS on its port now.
    assert (
        world.controller()["metadata_url"] == "https://garm.example.internal:9997/api/v1/metadata"
    )


def test_a_garm_showing_another_certificate_gets_no_login(ctx, world, resources, machine, ca):
    state = serving(ctx, world, resources, ca)
    # Something else answers on GARM's port, with a certificate of another CA for the
    # same names: the charm's client refuses it before sending anything.
    impostor = Authority(not_before=T0 - timedelta(days=30)).issue(
        ("127.0.0.1", ADDRESS), not_before=T0 - timedelta(days=1)
    )
    certificate, key = machine.paths.root / "impostor.pem", machine.paths.root / "impostor.key"
    certificate.write_text(impostor.pem)
    key.write_text(impostor.key_pem)
    machine.paths.admin_token_file.unlink()  # so the pass must log in
    world.serve_as(str(certificate), str(key))
    world.requests.clear()

    state = ctx.run(reconcile_tick(), state)

    assert state.unit_status.name == "waiting"
    assert "GARM unreachable" in state.unit_status.message
    assert world.requests == [] and "TLSV1_ALERT_UNKNOWN_CA" in world.tls_failures


def renewal_asked(ctx, state: testing.State) -> testing.State:
    """The library's certificate secret expires (at 90 % of the certificate's life): the
    library asks again, with a new request (its subject carries a unique id)."""
    (secret,) = [s for s in state.secrets if (s.label or "").startswith(f"{LIBID}-certificate")]
    return ctx.run(ctx.on.secret_expired(secret, revision=1), state)


def test_a_renewal_is_a_new_request_and_garm_serves_the_new_certificate(
    ctx, world, resources, machine, ca
):
    state = serving(ctx, world, resources, ca)
    before = machine.paths.config_dir.joinpath(tls.CERTIFICATE_FILE).read_text()
    old = requested_csrs(state.get_relation(CERTS_ID).local_unit_data)

    state = renewal_asked(ctx, state)

    new = requested_csrs(state.get_relation(CERTS_ID).local_unit_data)
    assert new and new != old, "a renewal the provider would take as already answered"
    restarts = machine.systemctl.calls.count(["restart", "garm"])
    # The provider answers the new request (the old answer stays until it does).
    relation = answered(state, ca, not_before=T0, not_after=T0 + timedelta(days=180))
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )

    after = machine.paths.config_dir.joinpath(tls.CERTIFICATE_FILE).read_text()
    assert after != before
    assert machine.systemctl.calls.count(["restart", "garm"]) == restarts + 1
    assert state.unit_status.name == "active" and world.tls_failures == []
    # The same CA: nothing to tell GARM's controller again.
    assert world.controller()["ca_cert_bundle"] == ca.pem.strip().encode() + b"\n"


def test_while_a_new_certificate_is_asked_for_the_served_one_goes_on(
    ctx, world, resources, machine, ca, later
):
    state = serving(ctx, world, resources, ca)
    served = machine.paths.config_dir.joinpath(tls.CERTIFICATE_FILE).read_text()
    state = renewal_asked(ctx, state)
    world.requests.clear()

    # The provider has not answered yet; a label change comes meanwhile.
    later()
    state = ctx.run(reconcile_tick(), state)

    assert state.unit_status.name == "active"
    assert machine.paths.config_dir.joinpath(tls.CERTIFICATE_FILE).read_text() == served
    assert any(r.path.endswith("/scalesets") for r in world.requests)  # the pass went on
    # Runners are still told the https URLs and the CA of the certificate GARM serves.
    assert not [r for r in world.requests if r.method == "PUT" and "controller" in r.path]
    assert world.controller()["ca_cert_bundle"] == ca.pem.strip().encode() + b"\n"
    assert world.controller()["metadata_url"].startswith("https://")


def test_a_refused_renewal_leaves_the_pass_going_on_with_the_served_certificate(
    ctx, world, resources, machine, ca, later
):
    """A provider refusing the renewal stops nothing while the served certificate holds:
    a label change is applied (ADR 0012), and the refusal is told with the date the
    served certificate holds until."""
    state = serving(ctx, world, resources, ca)
    served = machine.paths.config_dir.joinpath(tls.CERTIFICATE_FILE).read_text()
    state = renewal_asked(ctx, state)
    asked = state.get_relation(CERTS_ID)
    assert isinstance(asked, testing.Relation)
    new = requested_csrs(asked.local_unit_data)  # the renewal's request, as asked now
    error = {"code": 102, "name": "OTHER", "message": "the CA is sealed"}
    data = {
        **asked.remote_app_data,
        "request_errors": json.dumps([{"csr": new[-1], "error": error}]),
    }
    relation = dataclasses.replace(asked, remote_app_data=data)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )
    # The configurator asks for other labels meanwhile.
    later()
    state, _ = publish(state, 1, 0, {**SOLE_UNIT, "labels": "self-hosted,linux,arm64"})
    before = live_names(world)
    state = ctx.run(reconcile_tick(), state)

    assert len(live_names(world)) == len(before) + 1  # the replacement was created
    assert machine.paths.config_dir.joinpath(tls.CERTIFICATE_FILE).read_text() == served
    expires = (T0 + timedelta(days=90)).date()
    assert in_full(ctx, state).name == "blocked"
    assert in_full(ctx, state).message.startswith(
        f"Fix certificates: {PROVIDER} refused GARM's certificate (certificates): "
        f"the CA is sealed; GARM serves its certificate until {expires:%Y-%m-%d} ("
    )
    assert (
        "Creating scaleset" in in_full(ctx, state).message
        or "Replacing" in in_full(ctx, state).message
    )


def test_a_settled_pass_over_https_writes_nothing(ctx, world, resources, ca, later):
    state = serving(ctx, world, resources, ca)
    later()
    world.requests.clear()

    ctx.run(reconcile_tick(), state)

    assert [r for r in world.requests if r.method != "GET"] == []


def test_a_certificate_without_the_units_address_is_refused(ctx, world, resources, machine, ca):
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates())
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    # A provider that drops IP SANs but for loopback (some Vault roles do).
    asked = state.get_relation(CERTS_ID)
    (csr,) = requested_csrs(asked.local_unit_data)
    entry = _without_names(ca, csr, keep=("127.0.0.1",))
    relation = dataclasses.replace(asked, remote_app_data={"certificates": json.dumps([entry])})

    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )

    assert state.unit_status == testing.BlockedStatus(
        f"GARM's certificate (certificates relation): it does not name {ADDRESS}"
    )
    assert not machine.paths.config_dir.joinpath(tls.KEY_FILE).exists()


def test_a_provider_refusal_is_for_the_operator(ctx, world, resources, machine):
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates())
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    asked = state.get_relation(CERTS_ID)
    (csr,) = requested_csrs(asked.local_unit_data)
    error = {"code": 101, "name": "IP_NOT_ALLOWED", "message": "IP SANs are not allowed"}
    data = {"request_errors": json.dumps([{"csr": csr, "error": error}])}
    relation = dataclasses.replace(asked, remote_app_data=data)

    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )

    assert state.unit_status == testing.BlockedStatus(
        f"{PROVIDER} refused GARM's certificate (certificates): IP SANs are not allowed"
    )


def test_a_revoked_certificate_is_asked_for_again(ctx, world, resources, ca):
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates())
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    relation = answered(state, ca)
    (entry,) = json.loads(relation.remote_app_data["certificates"])
    revoked = {"certificates": json.dumps([{**entry, "revoked": True}])}
    relation = dataclasses.replace(relation, remote_app_data=revoked)

    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )

    assert state.unit_status == testing.WaitingStatus(
        f"{PROVIDER} revoked GARM's certificate; waiting for a new one"
    )
    (asked,) = requested_csrs(state.get_relation(CERTS_ID).local_unit_data)
    assert asked != entry["certificate_signing_request"]


@pytest.mark.parametrize(
    "certificates_data",
    [
        {"certificates": "not json"},
        {"certificates": json.dumps([{"ca": "x", "certificate": "y", "chain": ["z"]}])},
    ],
    ids=["not json", "not pem"],
)
def test_a_provider_answer_that_does_not_read_fails_no_hook(
    ctx, world, resources, ca, certificates_data
):
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates())
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    asked = state.get_relation(CERTS_ID)
    (csr,) = requested_csrs(asked.local_unit_data)
    data = dict(certificates_data)
    if "chain" in data["certificates"]:
        data["certificates"] = data["certificates"].replace(
            '"ca"', f'"certificate_signing_request": {json.dumps(csr)}, "ca"'
        )
    relation = dataclasses.replace(asked, remote_app_data=data)

    for event in (
        ctx.on.relation_changed(relation, remote_unit=0),
        ctx.on.leader_elected(),
        ctx.on.config_changed(),
    ):
        state = ctx.run(event, with_relation(state, relation))
        assert state.unit_status.name in ("waiting", "blocked")


LONG_HOST = "a" * 70 + ".example"


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("https://[::1", []),  # refused by the config check
        ("https://g\u00e4rm.example", []),  # refused: not ASCII
        # Taken, but longer than a common name may be: a SAN only.
        (f"https://{LONG_HOST}", [LONG_HOST]),
    ],
)
def test_an_external_url_the_charm_refuses_fails_no_hook(ctx, world, resources, url, named):
    state = make_state(
        world, resources, configurator(SOLE_UNIT), certificates(), config={"external-url": url}
    )
    for event in (ctx.on.relation_created(state.get_relation(CERTS_ID)), ctx.on.config_changed()):
        state = ctx.run(event, state)
    assert state.unit_status.name in ("blocked", "waiting")
    # The request goes on without the host the config check refuses (the pass says why).
    (csr,) = requested_csrs(state.get_relation(CERTS_ID).local_unit_data)
    names = x509.load_pem_x509_csr(csr.encode()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert {str(a) for a in names.value.get_values_for_type(x509.IPAddress)} == {
        ADDRESS,
        "127.0.0.1",
    }
    assert names.value.get_values_for_type(x509.DNSName) == named


def _without_names(ca: Authority, csr_pem: str, keep: tuple[str, ...]) -> dict[str, object]:
    """The provider's answer to ``csr_pem`` signed for ``keep`` only, with the CSR's key."""
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    cert = (
        x509.CertificateBuilder()
        .subject_name(csr.subject)
        .issuer_name(ca.certificate.subject)
        .public_key(csr.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(T0 - timedelta(days=1))
        .not_valid_after(T0 + timedelta(days=90))
        .add_extension(san(keep), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode().strip()
    return {
        "ca": ca.pem.strip(),
        "certificate_signing_request": csr_pem.strip(),
        "certificate": pem,
        "chain": [pem, ca.pem.strip()],
    }


def test_a_certificate_garm_would_refuse_is_not_written(ctx, world, resources, machine, ca):
    state = make_state(world, resources, configurator(SOLE_UNIT), certificates())
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)
    # Signed by the provider, but expired already.
    relation = answered(state, ca, not_before=T0 - timedelta(days=90), not_after=T0 - timedelta(1))

    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )

    assert state.unit_status.name == "blocked"
    assert state.unit_status.message.startswith(
        "GARM's certificate (certificates relation): it is not valid now"
    )
    assert not machine.paths.config_dir.joinpath(tls.KEY_FILE).exists()


def test_without_the_relation_garm_is_back_on_http_and_runners_lose_the_ca(
    ctx, world, resources, machine, ca
):
    state = serving(ctx, world, resources, ca)
    relation = state.get_relation(CERTS_ID)

    state = ctx.run(ctx.on.relation_broken(relation), state)

    assert state.unit_status == testing.ActiveStatus("1 scaleset in sync")
    config = tomllib.loads(machine.paths.config_file.read_text())
    assert config["apiserver"]["use_tls"] is False and "tls" not in config["apiserver"]
    assert not (machine.paths.config_dir / "tls").exists() or not any(
        (machine.paths.config_dir / "tls").iterdir()
    )
    assert world.url.startswith("http://")
    controller = world.controller()
    assert controller["ca_cert_bundle"] == b""
    assert controller["metadata_url"].startswith(f"http://{ADDRESS}:")


def test_plain_http_off_the_machine_is_said_in_the_log(ctx, world, resources, caplog):
    state = make_state(world, resources, configurator(SOLE_UNIT))

    with caplog.at_level(logging.WARNING):
        state = ctx.run(ctx.on.config_changed(), state)

    assert state.unit_status.name == "active"
    warned = [r.getMessage() for r in caplog.records if "plain HTTP" in r.getMessage()]
    assert len(warned) == 1 and f"http://{ADDRESS}:" in warned[0]
    assert "tls-certificates" in warned[0]
    # A settled pass does not say it again.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ctx.run(ctx.on.update_status(), state)
    assert not [r for r in caplog.records if "plain HTTP" in r.getMessage()]


def test_the_private_key_never_reaches_a_log_or_a_databag(ctx, world, resources, caplog, ca):
    with caplog.at_level(logging.DEBUG):
        state = serving(ctx, world, resources, ca)

    keys = [s for s in state.secrets if "private-key" in (s.label or "")]
    assert keys, "the library keeps the unit's key in a secret of the unit"
    key = next(iter(keys[0].tracked_content.values()))
    body = "".join(key.strip().splitlines()[1:-1])
    assert body and body not in caplog.text
    for relation in state.relations:
        text = str(relation.local_unit_data) + str(relation.local_app_data)
        assert body not in text
    assert base64.b64encode(key.encode()).decode()[:40] not in str(world.controller())


def test_plan_stops_where_the_pass_would_and_previews_what_it_would_set(
    ctx, world, resources, ca, later
):
    # GARM set up on plain HTTP; then a provider is related and has not answered.
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    state = with_relation(state, certificates())
    state = ctx.run(ctx.on.relation_created(state.get_relation(CERTS_ID)), state)

    with pytest.raises(testing.ActionFailed, match="The next pass would stop: Waiting for a"):
        ctx.run(ctx.on.action("plan"), state)

    # Once GARM serves the certificate, nothing is left for the controller to change.
    relation = answered(state, ca)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), with_relation(state, relation)
    )
    later()
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None
    assert "controller" not in ctx.action_results.get("actions", "")


# --- stories: a provider's answers over time; a served valid certificate stops no pass --


class CertificateStories(RuleBasedStateMachine):
    """A TLS provider's answers as time goes by, through the real charm.

    The provider answers each request (with a good certificate, one already expired, or
    one without the unit's address), refuses it, or is slow; the library asks for a
    renewal; days pass; the configurator's labels change; the reconcile timer ticks.
    After every pass: if the certificate GARM served when the pass began still held for
    every name, the pass went on to the scalesets (ADR 0012: only a missing or expired
    certificate stops it), whatever the provider said meanwhile.
    """

    env: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        super().__init__()
        env = self.env
        self.ctx, self.world, self.clock, self.ca = (
            env["ctx"],
            env["world"],
            env["clock"],
            env["ca"],
        )
        self.world.reset()
        self.world.serve_as(None, None)
        for provider in ("garm-configurator-0", "garm-configurator-1"):
            self.world.add_provider(provider)
        self.world.add_org("example-org")
        self.clock.now = T0
        self.paths = workload.Paths(Path(tempfile.mkdtemp(dir=env["root"])))
        GarmCharm.paths = self.paths
        self.state = serving(self.ctx, self.world, env["resources"], self.ca)
        self.labels = 0

    def _pass(self, event: Any) -> None:
        """Run one pass; it went on to the scalesets if GARM served a valid certificate."""
        before = workload.served_tls(self.paths)
        held = before is not None and tls.problem(before, self.clock.now, HOSTS) is None
        sent = len(self.world.requests)
        self.state = self.ctx.run(event, self.state)
        went_on = any(r.path.endswith("/scalesets") for r in self.world.requests[sent:])
        assert went_on or not held, (
            f"a pass stopped while GARM served a valid certificate: {self.state.unit_status!r}"
        )

    def _answer(self, relation: testing.Relation) -> None:
        self.state = with_relation(self.state, relation)
        self._pass(self.ctx.on.relation_changed(relation, remote_unit=0))

    @rule(kind=st.sampled_from(["good", "expired", "without-the-address"]))
    def provider_answers(self, kind: str) -> None:
        asked = self.state.get_relation(CERTS_ID)
        assert isinstance(asked, testing.Relation)
        now = self.clock.now
        if kind == "without-the-address":
            entries = [
                _without_names(self.ca, csr, keep=("127.0.0.1",))
                for csr in requested_csrs(asked.local_unit_data)
            ]
            data = {"certificates": json.dumps(entries)}
            self._answer(dataclasses.replace(asked, remote_app_data=data))
            return
        if kind == "expired":
            window = {
                "not_before": now - timedelta(days=100),
                "not_after": now - timedelta(days=1),
            }
        else:
            # Valid on the story's clock and on this machine's: the charm checks the
            # former, the TLS handshake with the double (real ssl) the latter.
            real = datetime.now(UTC)
            window = {
                "not_before": min(now, real) - timedelta(days=1),
                "not_after": max(now, real) + timedelta(days=90),
            }
        self._answer(answered(self.state, self.ca, **window))

    @rule()
    def provider_refuses(self) -> None:
        asked = self.state.get_relation(CERTS_ID)
        assert isinstance(asked, testing.Relation)
        error = {"code": 102, "name": "OTHER", "message": "the CA is sealed"}
        refusals = [{"csr": csr, "error": error} for csr in requested_csrs(asked.local_unit_data)]
        data = {**asked.remote_app_data, "request_errors": json.dumps(refusals)}
        self._answer(dataclasses.replace(asked, remote_app_data=data))

    @precondition(
        lambda self: any(
            (s.label or "").startswith(f"{LIBID}-certificate") for s in self.state.secrets
        )
    )
    @rule()
    def renewal_asked(self) -> None:
        self.state = renewal_asked(self.ctx, self.state)

    @rule(days=st.sampled_from([1, 30, 60, 100]))
    def days_pass(self, days: int) -> None:
        self.clock.advance(timedelta(days=days))
        self.world.tick()

    @rule()
    def labels_change(self) -> None:
        self.labels += 1
        labels = ("self-hosted,linux,x64", "self-hosted,linux,arm64")[self.labels % 2]
        self.state, _ = publish(self.state, 1, 0, {**SOLE_UNIT, "labels": labels})

    @rule()
    def timer_ticks(self) -> None:
        self.clock.advance(timedelta(seconds=30))
        self.world.tick()
        self._pass(reconcile_tick())


def test_a_served_valid_certificate_never_stops_a_pass(
    ctx, world, resources, clock, ca, tmp_path, monkeypatch
):
    monkeypatch.setattr(GarmCharm, "paths", GarmCharm.paths)  # restored; set per story
    CertificateStories.env = {
        "ctx": ctx,
        "world": world,
        "clock": clock,
        "ca": ca,
        "resources": resources,
        "root": tmp_path,
    }
    run_state_machine_as_test(CertificateStories, settings=soak_settings(12, 12))

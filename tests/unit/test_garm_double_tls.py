"""GARM over HTTPS, with real handshakes: the double in TLS mode, the charm's client, curl.

The double serves the files ``render_files`` writes for a certificate (leaf through an
intermediate, for 127.0.0.1), so what is checked is what GARM would serve. The charm's
client must trust only the CA it is given and send nothing, its login least of all, to a
GARM showing another; runners get the controller's ``ca_cert_bundle`` and must reach
GARM's metadata URL with it, as curl in cloud-init would.
"""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from garm.client import GarmApiError, GarmClient, GarmUnreachable
from garm.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE, ServingTls
from garm.workload import wait_until_answering
from tests.garm_double import GarmDouble
from tests.tls import Authority, key_pem, new_key, write_garm_files

CURL = shutil.which("curl")
needs_curl = pytest.mark.skipif(CURL is None, reason="no curl on this machine")


@dataclass(frozen=True)
class Served:
    """GARM's TLS files as the charm writes them, and a CA file that is not GARM's."""

    tls: ServingTls
    certificate: Path
    key: Path
    ca: Path  # the runner bundle, which the charm's client checks GARM against
    wrong_ca: Path


def write_tls(directory: Path, tls: ServingTls) -> Served:
    write_garm_files(directory, tls)
    wrong = directory / "wrong-ca.pem"
    wrong.write_text(Authority("Test Root CA").pem)  # the same name, another key
    return Served(
        tls, directory / CERTIFICATE_FILE, directory / KEY_FILE, directory / CA_FILE, wrong
    )


@pytest.fixture(scope="module")
def root() -> Authority:
    return Authority("Test Root CA")


@pytest.fixture(scope="module")
def served(root: Authority, tmp_path_factory: pytest.TempPathFactory) -> Served:
    leaf = root.intermediate().issue(("127.0.0.1", "garm.internal"))
    return write_tls(tmp_path_factory.mktemp("garm"), leaf.serving_tls())


@pytest.fixture
def garm(served: Served) -> Iterator[GarmDouble]:
    double = GarmDouble(tls=(str(served.certificate), str(served.key))).start()
    try:
        yield double
    finally:
        double.stop()


def client(garm: GarmDouble, ca_file: Path | None) -> GarmClient:
    return GarmClient(
        garm.url, garm.username, garm.password, ca_file=None if ca_file is None else str(ca_file)
    )


def failures(garm: GarmDouble, count: int = 1) -> list[str]:
    """The double's handshake failures, once ``count`` are in (its thread records them
    just after the client has given up)."""
    deadline = time.monotonic() + 5
    while len(garm.tls_failures) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return garm.tls_failures


def test_the_client_logs_in_and_reads_the_controller_over_https(
    garm: GarmDouble, served: Served
) -> None:
    assert garm.url.startswith("https://127.0.0.1:")

    garm_client = client(garm, served.ca)
    info = garm_client.get_controller()

    assert info.metadata_url == f"{garm.url}/api/v1/metadata"
    assert info.callback_url == f"{garm.url}/api/v1/callbacks"
    assert [(r.method, r.path) for r in garm.requests] == [
        ("POST", "/auth/login"),
        ("GET", "/controller"),
    ]
    assert garm.tls_failures == []


def test_garm_serves_the_intermediate_a_client_with_only_the_root_needs(
    garm: GarmDouble, root: Authority, tmp_path: Path
) -> None:
    only_root = tmp_path / "root.pem"
    only_root.write_text(root.pem)

    client(garm, only_root).login()
    assert [r.path for r in garm.requests] == ["/auth/login"]


def test_a_client_given_another_ca_sends_nothing(garm: GarmDouble, served: Served) -> None:
    garm_client = client(garm, served.wrong_ca)

    with pytest.raises(GarmUnreachable, match=r"^POST /auth/login: SSLError$"):
        garm_client.get_controller()

    assert failures(garm) == ["TLSV1_ALERT_UNKNOWN_CA"]  # it refused our certificate
    assert garm.requests == []  # so neither the login nor its password reached the double


def test_a_client_given_no_ca_trusts_no_test_ca(garm: GarmDouble) -> None:
    with pytest.raises(GarmUnreachable, match="SSLError"):
        client(garm, None).login()
    assert failures(garm) == ["TLSV1_ALERT_UNKNOWN_CA"]
    assert garm.requests == []


def test_a_certificate_not_naming_the_address_is_refused(root: Authority, tmp_path: Path) -> None:
    leaf = root.issue(("10.0.0.5", "garm.internal"))
    files = write_tls(tmp_path, leaf.serving_tls())

    with GarmDouble(tls=(str(files.certificate), str(files.key))) as garm:
        with pytest.raises(GarmUnreachable, match="SSLError"):
            client(garm, files.ca).login()
        # The client's OpenSSL: X509_V_ERR_HOSTNAME_MISMATCH, sent as bad_certificate.
        assert failures(garm) == ["SSLV3_ALERT_BAD_CERTIFICATE"]
        assert garm.requests == []


def test_a_plain_http_client_is_not_served(garm: GarmDouble) -> None:
    plain = garm.url.replace("https://", "http://")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{plain}/api/v1/controller", timeout=5)
    assert failures(garm) == ["HTTP_REQUEST"]
    assert garm.requests == []


def test_wait_until_answering_trusts_only_the_given_ca(garm: GarmDouble, served: Served) -> None:
    assert wait_until_answering(garm.url, 5, ca_file=served.ca)

    started = time.monotonic()
    assert not wait_until_answering(garm.url, 0.3, interval=0.1, ca_file=served.wrong_ca)
    assert time.monotonic() - started < 3
    assert [r.path for r in garm.requests] == ["/controller"]  # the right CA's one only


def test_every_process_serves_https(garm: GarmDouble, served: Served) -> None:
    other = garm.add_process("garm/1")

    assert other.url.startswith("https://")
    assert other.url != garm.url
    GarmClient(other.url, garm.username, garm.password, ca_file=str(served.ca)).login()
    assert [(r.path, r.process) for r in garm.requests] == [("/auth/login", "garm/1")]


def test_a_new_certificate_is_served_from_the_next_connection(
    garm: GarmDouble, tmp_path: Path
) -> None:
    files = write_tls(tmp_path, Authority("Next Root CA").issue(("127.0.0.1",)).serving_tls())

    garm.use_certificate(str(files.certificate), str(files.key))

    client(garm, files.ca).login()
    assert [r.path for r in garm.requests] == ["/auth/login"]


def test_a_key_that_is_not_the_certificates_is_refused_as_garm_refuses_to_start(
    root: Authority, tmp_path: Path
) -> None:
    files = write_tls(tmp_path, root.issue(("127.0.0.1",)).serving_tls())
    files.key.write_text(key_pem(new_key()))

    with pytest.raises(ssl.SSLError, match=r"KEY_VALUES_MISMATCH|key values mismatch"):
        GarmDouble(tls=(str(files.certificate), str(files.key)))


def test_the_metadata_routes_want_an_instance_token(garm: GarmDouble, served: Served) -> None:
    # auth/instance_middleware.go: no Authorization header, 401 before any handler.
    base = f"{garm.url}/api/v1/metadata"
    session = requests.Session()
    session.trust_env = False
    for path in ("/system/cert-bundle", "/runner-metadata/", "/credentials/.runner"):
        answer = session.get(base + path, verify=str(served.ca), timeout=5)
        assert (answer.status_code, answer.json()) == (
            401,
            {"error": "Authentication failed", "details": ""},
        )
    assert garm.unexpected == []


# --------------------------------------------------------------------------- runners


def set_runner_bundle(garm: GarmDouble, served: Served) -> Path:
    """Set the controller's ``ca_cert_bundle`` as the charm does, and write what GARM
    stored (what it hands runners in their bootstrap params) to a file."""
    bundle = base64.b64encode(served.tls.runner_bundle()).decode()
    info = client(garm, served.ca).update_controller({"ca_cert_bundle": bundle})
    assert info.ca_cert_bundle == served.tls.runner_bundle()
    stored = garm.controller()["ca_cert_bundle"]
    assert stored == served.tls.runner_bundle()
    path = served.ca.parent / "runner-bundle.pem"
    path.write_bytes(stored)
    return path


def curl(url: str, cacert: Path) -> subprocess.CompletedProcess[str]:
    assert CURL is not None
    command = [CURL, "-s", "--noproxy", "*", "--max-time", "10", "-o", "/dev/null"]
    command += ["-w", "%{http_code}", "--cacert", str(cacert), url]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
    )


@needs_curl
def test_a_runner_with_garms_bundle_reaches_the_metadata_url(
    garm: GarmDouble, served: Served
) -> None:
    bundle = set_runner_bundle(garm, served)
    metadata_url = garm.controller()["metadata_url"]

    answered = curl(f"{metadata_url}/system/cert-bundle", bundle)

    # The handshake succeeded; GARM wants the runner's instance token, which curl lacks.
    assert (answered.returncode, answered.stdout) == (0, "401")
    assert garm.requests[-1].path == "/metadata/system/cert-bundle"


@needs_curl
def test_a_runner_with_another_bundle_cannot_authenticate_garm(
    garm: GarmDouble, served: Served
) -> None:
    set_runner_bundle(garm, served)
    before = len(garm.requests)

    answered = curl(f"{garm.controller()['metadata_url']}/system/cert-bundle", served.wrong_ca)

    assert answered.returncode == 60  # CURLE_PEER_FAILED_VERIFICATION
    assert len(garm.requests) == before


def test_a_ca_that_is_an_intermediate_is_trusted_by_the_charm_and_by_runners(
    root: Authority, tmp_path: Path
) -> None:
    # An intermediate PKI: the provider's CA is itself issued, and no root is in sight.
    # OpenSSL accepts it as an anchor only with partial chains (curl's default, and what
    # garm.client.trust_only sets); without them the charm would refuse its own GARM.
    inter = root.intermediate("Issuing CA")
    leaf = inter.issue(("127.0.0.1",))
    files = write_tls(tmp_path, leaf.serving_tls(chain=(leaf.pem, inter.pem), ca=inter.pem))
    assert files.ca.read_text() == inter.pem

    with GarmDouble(tls=(str(files.certificate), str(files.key))) as garm:
        client(garm, files.ca).login()
        assert wait_until_answering(garm.url, 5, ca_file=files.ca)
        assert garm.tls_failures == []
        if CURL is not None:
            answered = curl(f"{garm.url}/api/v1/metadata/system/cert-bundle", files.ca)
            assert (answered.returncode, answered.stdout) == (0, "401")


def test_garm_keeps_a_bundle_re_encoded_as_its_sanitizer_does(
    garm: GarmDouble, served: Served
) -> None:
    """``SanitizeCABundle``: each block parsed, duplicates dropped, each re-encoded; a
    block that is no certificate is a 400 and nothing is stored."""
    canonical = served.tls.runner_bundle()
    messy = canonical.replace(b"\n", b"\r\n") + canonical
    admin = client(garm, served.ca)

    info = admin.update_controller({"ca_cert_bundle": base64.b64encode(messy).decode()})

    assert info.ca_cert_bundle == canonical == garm.controller()["ca_cert_bundle"]
    broken = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
    with pytest.raises(GarmApiError) as refused:
        admin.update_controller({"ca_cert_bundle": base64.b64encode(broken).decode()})
    assert refused.value.status == 400
    assert garm.controller()["ca_cert_bundle"] == canonical

"""GARM's serving certificate: ``garm.tls`` judged against what GARM, OpenSSL and clients do.

``problem`` must refuse what GARM would refuse to start with and what a client reaching a
host would refuse, and nothing else; the files ``render_files`` writes for TLS must load
as GARM loads them and verify with the real ``openssl``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import ssl
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from charmlibs.interfaces.tls_certificates import CertificateRequestAttributes, PrivateKey
from charmlibs.interfaces.tls_certificates._tls_certificates import (
    _CertificateSigningRequest,  # pyright: ignore[reportPrivateUsage]
    _ProviderApplicationData,  # pyright: ignore[reportPrivateUsage]
    _RequirerData,  # pyright: ignore[reportPrivateUsage]
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from garm import tls as serving
from garm.tls import ServingTls, problem
from tests.tls import (
    Authority,
    Leaf,
    cert_pem,
    key_pem,
    new_key,
    provider_app_databag,
    serving_tls,
    write_garm_files,
)

tomllib = pytest.importorskip("tomllib")

NOW = datetime.now(UTC)
HOST = ("127.0.0.1",)
OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="no openssl on this machine")


@pytest.fixture(scope="module")
def root() -> Authority:
    return Authority("Test Root CA")


@pytest.fixture(scope="module")
def inter(root: Authority) -> Authority:
    return root.intermediate("Test Intermediate CA")


def certs(text: str | bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(text.encode() if isinstance(text, str) else text)


# --------------------------------------------------------------------------- problem


def test_a_leaf_from_the_root_is_good(root: Authority) -> None:
    assert problem(root.issue(HOST).serving_tls(), NOW, HOST) is None


def test_a_leaf_through_an_intermediate_is_good(inter: Authority) -> None:
    tls = inter.issue(("10.1.2.3", "garm.internal")).serving_tls()
    assert problem(tls, NOW, ("10.1.2.3", "garm.internal")) is None


def test_a_chain_without_the_root_is_good_when_the_root_is_the_ca(
    root: Authority, inter: Authority
) -> None:
    leaf = inter.issue(HOST)
    assert problem(leaf.serving_tls(chain=(leaf.pem, inter.pem)), NOW, HOST) is None


def test_a_key_that_is_not_the_leafs_is_refused(root: Authority) -> None:
    tls = root.issue(HOST).serving_tls(private_key=key_pem(new_key()))
    assert problem(tls, NOW, HOST) == "the certificate is not for this unit's private key"


def test_a_key_that_does_not_load_is_refused_and_not_quoted(root: Authority) -> None:
    tls = root.issue(HOST).serving_tls(private_key="-----BEGIN PRIVATE KEY-----\nsecret\n")
    message = problem(tls, NOW, HOST)
    assert message == "this unit's private key does not load"
    assert "secret" not in message


def test_a_chain_out_of_order_is_refused(root: Authority, inter: Authority) -> None:
    leaf = inter.issue(HOST)
    tls = leaf.serving_tls(chain=(leaf.pem, root.pem, inter.pem))
    assert problem(tls, NOW, HOST) == "its chain is out of order or not issued by its CA"


def test_a_chain_missing_its_intermediate_is_refused(inter: Authority) -> None:
    leaf = inter.issue(HOST)
    tls = leaf.serving_tls(chain=(leaf.pem,))
    assert problem(tls, NOW, HOST) == "its chain is out of order or not issued by its CA"


def test_a_leaf_another_ca_issued_is_refused(root: Authority) -> None:
    tls = root.issue(HOST).serving_tls(ca=Authority("Other Root CA").pem, chain=())
    assert problem(tls, NOW, HOST) == "its chain is out of order or not issued by its CA"


def test_a_ca_of_the_same_name_but_another_key_is_refused(root: Authority) -> None:
    impostor = Authority("Test Root CA")  # same subject, another key
    tls = root.issue(HOST).serving_tls(ca=impostor.pem, chain=())
    assert problem(tls, NOW, HOST) == "its chain is out of order or not issued by its CA"


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (NOW - timedelta(days=400), NOW - timedelta(seconds=1)),  # expired
        (NOW + timedelta(seconds=60), NOW + timedelta(days=30)),  # not yet valid
    ],
    ids=["expired", "not-yet-valid"],
)
def test_a_leaf_not_valid_now_is_refused(root: Authority, start: datetime, end: datetime) -> None:
    tls = root.issue(HOST, not_before=start, not_after=end).serving_tls()
    message = problem(tls, NOW, HOST)
    assert message == f"it is not valid now (valid {start:%Y-%m-%d} to {end:%Y-%m-%d})"


@pytest.mark.parametrize(
    ("sans", "host", "named"),
    [
        (("127.0.0.1",), "127.0.0.1", True),
        (("127.0.0.1",), "10.0.0.5", False),
        (("::1",), "::1", True),
        (("::1",), "0:0:0:0:0:0:0:1", True),  # the same address, spelt out
        (("127.0.0.1",), "::ffff:127.0.0.1", False),
        # An address only as a DNS name: Go, curl and Python's ssl want an IP SAN.
        (("dns:127.0.0.1",), "127.0.0.1", False),
        (("garm.internal",), "garm.internal", True),
        (("garm.internal",), "GARM.Internal.", True),  # case and the root dot
        (("garm.internal",), "other.internal", False),
        (("*.example.com",), "garm.example.com", True),
        (("*.example.com",), "example.com", False),  # * is one label, never none
        (("*.example.com",), "a.garm.example.com", False),  # nor two
        (("garm.example.com",), "*.example.com", False),
        ((), "garm.internal", False),  # no SAN extension: the CN does not count
    ],
)
def test_sans_must_name_every_host(
    root: Authority, sans: tuple[str, ...], host: str, named: bool
) -> None:
    if sans and sans[0].startswith("dns:"):
        leaf = _dns_only(root, sans[0][4:])
    else:
        leaf = root.issue(sans, common_name=host)
    message = problem(leaf.serving_tls(), NOW, (host,))
    assert message == (None if named else f"it does not name {host}")


def test_every_missing_host_is_named(root: Authority) -> None:
    tls = root.issue(("10.0.0.1",)).serving_tls()
    hosts = ("10.0.0.1", "10.0.0.2", "garm.internal")
    assert problem(tls, NOW, hosts) == "it does not name 10.0.0.2, garm.internal"


@pytest.mark.parametrize("where", ["certificate", "chain", "ca"])
def test_a_certificate_that_is_not_pem_is_refused(root: Authority, where: str) -> None:
    good = root.issue(HOST).serving_tls()
    broken = {
        "certificate": {"certificate": "not a certificate"},
        "chain": {"chain": (good.certificate, "-----BEGIN CERTIFICATE-----\nAAAA\n")},
        "ca": {"ca": ""},
    }[where]
    tls = dataclasses.replace(good, **broken)
    assert problem(tls, NOW, HOST) == "a certificate in it is not PEM"


# --------------------------------------------------------------------------- the files


def test_the_certificate_file_is_the_leaf_then_the_chain_in_order(
    root: Authority, inter: Authority
) -> None:
    leaf = inter.issue(HOST)
    expected = [leaf.certificate, inter.certificate, root.certificate]

    assert certs(leaf.serving_tls().certificate_file()) == expected
    # The leaf is not repeated whether or not the provider's chain holds it.
    without_leaf = leaf.serving_tls(chain=(inter.pem, root.pem))
    assert certs(without_leaf.certificate_file()) == expected
    # Whatever the provider's spacing, each PEM ends in exactly one newline.
    spaced = leaf.serving_tls(chain=(f"\n{leaf.pem}\n\n", inter.pem.strip(), root.pem + " \n"))
    assert spaced.certificate_file() == leaf.pem + inter.pem + root.pem


def test_the_runner_bundle_is_the_ca_and_the_intermediates_once_each(
    root: Authority, inter: Authority
) -> None:
    leaf = inter.issue(HOST)

    bundle = leaf.serving_tls().runner_bundle()
    assert isinstance(bundle, bytes)
    assert certs(bundle) == [root.certificate, inter.certificate]
    assert certs(leaf.serving_tls(chain=(leaf.pem, inter.pem)).runner_bundle()) == [
        root.certificate,
        inter.certificate,
    ]
    direct = root.issue(HOST)
    assert certs(direct.serving_tls().runner_bundle()) == [root.certificate]
    assert leaf.certificate not in certs(bundle)


def write_rendered(tmp_path: Path, tls: ServingTls | None) -> dict[str, Any]:
    """Write what ``render_files`` renders under ``tmp_path`` (the config dir); the
    parsed config.toml."""
    write_garm_files(tmp_path, tls)
    return tomllib.loads((tmp_path / "config.toml").read_text())


def test_with_tls_garm_is_told_to_serve_the_written_files(tmp_path: Path, inter: Authority):
    parsed = write_rendered(tmp_path, inter.issue(HOST).serving_tls())

    apiserver = parsed["apiserver"]
    assert apiserver["use_tls"] is True
    assert apiserver["tls"] == {
        "certificate": str(tmp_path / "tls/certificate.pem"),
        "key": str(tmp_path / "tls/key.pem"),
    }
    assert Path(apiserver["tls"]["certificate"]).is_file()
    assert Path(apiserver["tls"]["key"]).is_file()


def test_without_tls_garm_serves_http_and_no_tls_file_is_written(tmp_path: Path) -> None:
    parsed = write_rendered(tmp_path, None)

    assert parsed["apiserver"]["use_tls"] is False
    assert "tls" not in parsed["apiserver"]
    assert not (tmp_path / "tls").exists()


def test_the_written_pair_loads_as_garm_loads_it(tmp_path: Path, inter: Authority) -> None:
    leaf = inter.issue(HOST)
    tls = write_rendered(tmp_path, leaf.serving_tls())["apiserver"]["tls"]

    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls["certificate"], tls["key"])
    assert certs(Path(tls["certificate"]).read_text())[0] == leaf.certificate


def test_a_pair_garm_would_refuse_does_not_load(tmp_path: Path, root: Authority) -> None:
    # The rule problem() applies first, shown to be the rule TLS servers apply.
    wrong = root.issue(HOST).serving_tls(private_key=key_pem(new_key()))
    tls = write_rendered(tmp_path, wrong)["apiserver"]["tls"]

    with pytest.raises(ssl.SSLError, match=r"KEY_VALUES_MISMATCH|key values mismatch"):
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls["certificate"], tls["key"])


def openssl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert OPENSSL is not None
    return subprocess.run([OPENSSL, *args], capture_output=True, text=True, check=check)


def split_leaf(certificate_file: Path, into: Path) -> tuple[Path, Path]:
    """The certificate file's leaf, and its other certificates, each in a file."""
    pems = [cert_pem(c) for c in certs(certificate_file.read_text())]
    leaf, others = into / "leaf.pem", into / "intermediates.pem"
    leaf.write_text(pems[0])
    others.write_text("".join(pems[1:]))
    return leaf, others


@needs_openssl
def test_openssl_verifies_the_written_files(tmp_path: Path, inter: Authority) -> None:
    config_dir = tmp_path / "etc"
    tls = write_rendered(config_dir, inter.issue(HOST).serving_tls())["apiserver"]["tls"]
    ca = config_dir / serving.CA_FILE
    leaf, intermediates = split_leaf(Path(tls["certificate"]), tmp_path)

    verified = openssl(
        "verify", "-CAfile", str(ca), "-untrusted", str(intermediates), "-verify_ip",
        "127.0.0.1", str(leaf),
    )  # fmt: skip
    assert verified.stdout.strip() == f"{leaf}: OK"
    # And without the intermediates GARM serves, the runner bundle alone is enough.
    assert openssl("verify", "-CAfile", str(ca), str(leaf)).returncode == 0
    certificate_key = openssl("x509", "-in", tls["certificate"], "-noout", "-pubkey").stdout
    key_key = openssl("pkey", "-in", tls["key"], "-pubout").stdout
    assert certificate_key == key_key
    assert "BEGIN PUBLIC KEY" in key_key


@needs_openssl
def test_openssl_sees_a_wrong_key_and_a_wrong_ca(tmp_path: Path, root: Authority) -> None:
    other = Authority("Other Root CA")
    leaf = root.issue(HOST)
    wrong = leaf.serving_tls(chain=(leaf.pem,), ca=other.pem, private_key=key_pem(new_key()))
    tls = write_rendered(tmp_path, wrong)["apiserver"]["tls"]

    verified = openssl(
        "verify", "-CAfile", str(tmp_path / serving.CA_FILE), tls["certificate"], check=False
    )
    assert verified.returncode != 0
    certificate_key = openssl("x509", "-in", tls["certificate"], "-noout", "-pubkey").stdout
    assert certificate_key != openssl("pkey", "-in", tls["key"], "-pubout").stdout


def _verdicts(root: Authority, inter: Authority) -> dict[str, tuple[ServingTls, str]]:
    """Cases whose key is right: problem's verdict must be OpenSSL's, for each host."""
    leaf = inter.issue(("127.0.0.1", "*.example.com"))
    return {
        "good": (leaf.serving_tls(), "127.0.0.1"),
        "good-wildcard": (leaf.serving_tls(), "garm.example.com"),
        "bare-domain": (leaf.serving_tls(), "example.com"),
        "other-ip": (leaf.serving_tls(), "10.9.9.9"),
        "missing-intermediate": (leaf.serving_tls(chain=(leaf.pem,)), "127.0.0.1"),
        "other-ca": (leaf.serving_tls(ca=Authority("Other").pem), "127.0.0.1"),
        "expired": (
            root.issue(
                HOST, not_before=NOW - timedelta(days=9), not_after=NOW - timedelta(1)
            ).serving_tls(),
            "127.0.0.1",
        ),
    }


@needs_openssl
@pytest.mark.parametrize(
    "case",
    [
        "good",
        "good-wildcard",
        "bare-domain",
        "other-ip",
        "missing-intermediate",
        "other-ca",
        "expired",
    ],
)
def test_problem_agrees_with_openssl_verify(
    tmp_path: Path, root: Authority, inter: Authority, case: str
) -> None:
    tls, host = _verdicts(root, inter)[case]
    files = {"ca.pem": tls.ca, "chain.pem": "".join(tls.above()), "leaf.pem": tls.certificate}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    flag = "-verify_ip" if host[0].isdigit() else "-verify_hostname"
    args = ["verify", "-CAfile", str(tmp_path / "ca.pem"), flag, host]
    if tls.above():
        args += ["-untrusted", str(tmp_path / "chain.pem")]
    at = ("-attime", str(int(NOW.timestamp())))
    verified = openssl(*args, *at, str(tmp_path / "leaf.pem"), check=False)

    assert (problem(tls, NOW, (host,)) is None) == (verified.returncode == 0), verified.stderr
    assert (case.startswith("good")) == (verified.returncode == 0)


def _dns_only(root: Authority, name: str) -> Leaf:
    """A leaf whose only SAN is the DNS name ``name`` (even one that reads as an address)."""
    leaf = root.issue(("placeholder.invalid",))
    cert = root._sign_leaf(  # pyright: ignore[reportPrivateUsage]
        leaf.certificate.subject,
        leaf.key.public_key(),
        x509.SubjectAlternativeName([x509.DNSName(name)]),
        (NOW - timedelta(days=1), NOW + timedelta(days=30)),
    )
    return dataclasses.replace(leaf, certificate=cert)


# --------------------------------------------------------------------------- the relation


def test_the_provider_databag_answers_the_requirers_csr_as_the_library_reads_it() -> None:
    root = Authority("Provider Root CA")
    key = PrivateKey.generate()
    csr = CertificateRequestAttributes(
        common_name="garm-0", sans_ip=frozenset({"10.1.2.3"}), sans_dns=frozenset({"garm-0.lxd"})
    ).generate_csr(key)
    unit_databag = _RequirerData(
        certificate_signing_requests=[
            _CertificateSigningRequest(certificate_signing_request=str(csr), ca=False)
        ]
    ).dump()
    assert unit_databag is not None
    assert isinstance(unit_databag["certificate_signing_requests"], str)  # JSON in a string

    app_databag = provider_app_databag(unit_databag, root)

    assert set(app_databag) == {"certificates"}
    assert isinstance(json.loads(app_databag["certificates"]), list)
    (entry,) = _ProviderApplicationData.load(app_databag).certificates
    given = entry.to_provider_certificate(relation_id=1)
    assert given.certificate_signing_request == csr
    assert given.ca.raw == root.pem.strip()
    assert [c.raw for c in given.chain] == [given.certificate.raw, root.pem.strip()]
    assert given.certificate.sans_ip == frozenset({"10.1.2.3"})
    assert given.certificate.sans_dns == frozenset({"garm-0.lxd"})
    assert not given.certificate.is_ca
    tls = ServingTls(
        certificate=given.certificate.raw,
        chain=tuple(c.raw for c in given.chain),
        ca=given.ca.raw,
        private_key=str(key),
    )
    assert problem(tls, NOW, ("10.1.2.3", "garm-0.lxd")) is None


def test_the_provider_databag_can_answer_with_an_intermediate_and_a_window() -> None:
    root = Authority("Provider Root CA")
    inter = root.intermediate()
    key = PrivateKey.generate()
    attributes = CertificateRequestAttributes(
        common_name="garm-0", sans_ip=frozenset({"10.1.2.3"})
    )
    csr = attributes.generate_csr(key)
    unit_databag = {
        "certificate_signing_requests": json.dumps(
            [{"certificate_signing_request": str(csr), "ca": False}]
        )
    }
    expired = NOW - timedelta(days=1)

    app_databag = provider_app_databag(
        unit_databag, inter, not_before=NOW - timedelta(days=30), not_after=expired
    )

    (entry,) = _ProviderApplicationData.load(app_databag).certificates
    assert entry.ca == root.pem.strip()
    assert entry.chain is not None
    assert [c.subject for c in map(_load, entry.chain)] == [
        _load(entry.certificate).subject,
        inter.certificate.subject,
        root.certificate.subject,
    ]
    tls = ServingTls(entry.certificate, tuple(entry.chain), entry.ca, str(key))
    assert (problem(tls, NOW, ("10.1.2.3",)) or "").startswith("it is not valid now")


def test_serving_tls_is_good_for_its_hosts() -> None:
    tls = serving_tls(("10.0.0.7", "garm.internal"), intermediate=True)
    assert problem(tls, NOW, ("10.0.0.7", "garm.internal")) is None
    assert len(certs(tls.runner_bundle())) == 2


def _load(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


# --- where runners reach GARM, and what the certificate must name --------------------


@pytest.mark.parametrize(
    ("external", "address", "secure", "url"),
    [
        ("", "10.0.0.5", False, "http://10.0.0.5:9997"),
        ("", "10.0.0.5", True, "https://10.0.0.5:9997"),
        ("", None, True, "https://127.0.0.1:9997"),
        ("", "fd00::1", True, "https://[fd00::1]:9997"),
        ("http://garm.example:9997", "10.0.0.5", True, "https://garm.example:9997"),
        # http's implied port stays the port when the scheme becomes https
        ("http://garm.example/garm", "10.0.0.5", True, "https://garm.example:80/garm"),
        ("https://garm.example/garm", "10.0.0.5", True, "https://garm.example/garm"),
        ("http://garm.example/garm", "10.0.0.5", False, "http://garm.example/garm"),
    ],
)
def test_runner_url(external, address, secure, url):
    assert serving.runner_url(external, address, 9997, secure) == url


def test_the_names_asked_for_each_once_external_first():
    assert serving.serving_hosts("10.0.0.5", "https://garm.example:9997/x") == (
        "garm.example",
        "10.0.0.5",
        "127.0.0.1",
    )
    assert serving.serving_hosts(None, "") == ("127.0.0.1",)
    assert serving.serving_hosts("127.0.0.1", "http://127.0.0.1:9997") == ("127.0.0.1",)


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("http://10.0.0.5:9997", True),
        ("http://garm.example", True),
        ("https://10.0.0.5:9997", False),
        ("http://127.0.0.1:9997", False),
        ("http://[::1]:9997", False),
        ("http://localhost:9997", False),
    ],
)
def test_plain_http_is_warned_of_only_off_the_machine(url, warned):
    said = serving.plain_http_warning(url, app="garm")
    assert (said is not None) is warned
    assert said is None or url in said


def test_the_runner_bundle_is_what_garm_stores_of_it():
    """GARM re-encodes every block it is sent (SanitizeCABundle: pem.Encode, duplicates
    by DER dropped); the bundle the charm sends must read back byte for byte, or every
    pass would send it again."""
    good = Authority().intermediate().issue(("127.0.0.1",)).serving_tls()
    messy = dataclasses.replace(
        good,
        ca=good.ca.replace("\n", "\r\n") + "\n\n",
        chain=(*good.chain, good.chain[-1]),
    )
    bundle = messy.runner_bundle()
    blocks = [x509.load_pem_x509_certificate(b) for b in _split(bundle)]
    again = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in blocks)
    assert bundle == again == good.runner_bundle()
    assert len(blocks) == len({c.fingerprint(hashes.SHA256()) for c in blocks})


def test_the_files_garm_serves_read_back_as_what_was_written(tmp_path):
    served = Authority().intermediate().issue(("127.0.0.1",)).serving_tls()
    files = write_garm_files(tmp_path, served)

    back = ServingTls.from_files(
        files[serving.CERTIFICATE_FILE], files[serving.KEY_FILE], files[serving.CA_FILE]
    )

    assert back is not None
    assert problem(back, datetime.now(UTC), ("127.0.0.1",)) is None
    assert back.certificate_file() == served.certificate_file()
    assert ServingTls.from_files("", files[serving.KEY_FILE], files[serving.CA_FILE]) is None
    assert (
        ServingTls.from_files(files[serving.CERTIFICATE_FILE], "", files[serving.CA_FILE]) is None
    )


def _split(bundle: bytes) -> list[bytes]:
    end = b"-----END CERTIFICATE-----\n"
    return [part + end for part in bundle.split(end) if part.strip()]


# --------------------------------------------------------------------------- readiness


def _ready(asked, served) -> serving.Readiness:
    return serving.readiness(asked, lambda: served, NOW, HOST)


def test_readiness_is_a_valid_certificate_served(root: Authority) -> None:
    """Only a missing or expired certificate stops the pass; a refusal is told."""
    valid = root.issue(HOST, not_after=NOW + timedelta(days=90)).serving_tls()
    expired = root.issue(
        HOST, not_before=NOW - timedelta(days=90), not_after=NOW - timedelta(days=1)
    ).serving_tls()
    waiting = serving.Awaited("Waiting for a certificate from ca (certificates)")
    refused = serving.Awaited("ca refused GARM's certificate (certificates): no", blocked=True)
    until = f"; GARM serves its certificate until {NOW + timedelta(days=90):%Y-%m-%d}"
    unusable = _ready(expired, None).stop
    assert unusable.startswith("GARM's certificate (certificates relation): it is not valid")
    table = [
        # (asked, served) -> (serves, stop, blocked, refused)
        ((valid, None), (valid, "", False, "")),
        ((waiting, None), (None, waiting.why, False, "")),
        ((waiting, valid), (valid, "", False, "")),  # a renewal outstanding
        ((waiting, expired), (None, waiting.why, False, "")),
        ((refused, None), (None, refused.why, True, "")),
        ((refused, expired), (None, refused.why, True, "")),
        ((refused, valid), (valid, "", False, refused.why + until)),  # the pass goes on
        ((expired, None), (None, unusable, True, "")),
        ((expired, valid), (valid, "", False, unusable + until)),  # GARM keeps what it has
    ]
    for (asked, served), want in table:
        got = _ready(asked, served)
        assert (got.tls, got.stop, got.blocked, got.refused) == want, (asked, served)


def test_a_certificate_that_would_be_refused_stops_the_pass(root: Authority) -> None:
    expired = root.issue(
        HOST, not_before=NOW - timedelta(days=90), not_after=NOW - timedelta(days=1)
    ).serving_tls()
    got = _ready(expired, None)
    assert got.tls is None and got.blocked
    assert got.stop.startswith("GARM's certificate (certificates relation): it is not valid now")

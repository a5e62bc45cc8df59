"""GARM's admin token kept across hooks: what is offered again, what is dropped, the file.

Read without ops and against the GARM double over HTTP: a "hook" here is one
``admin_client`` block, as each of the charm's hooks opens its own.
"""

from __future__ import annotations

import base64
import json
import logging
import stat
from datetime import timedelta
from pathlib import Path

import pytest

from garm import workload
from garm.admin_token import MARGIN, admin_client, expires, keep, load
from garm.client import GarmApiError, GarmUnreachable
from tests.garm_double import GarmDouble
from tests.tokens import jwt, token_expiring
from tests.wire import T0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return workload.Paths(tmp_path).admin_token_file


def sent(garm: GarmDouble, start: int) -> list[tuple[str, str, int | None]]:
    return [(r.method, r.path, r.status) for r in garm.requests[start:]]


def logins(garm: GarmDouble, start: int = 0) -> int:
    return sum(r.path == "/auth/login" for r in garm.requests[start:])


def kept(path: Path) -> str:
    return json.loads(path.read_text())["token"]


def a_hook(path: Path, garm: GarmDouble, password: str | None = None) -> None:
    """One hook's use of GARM: a read, as the admin the double knows."""
    url, username = garm.url, garm.username
    with admin_client(path, url, username, password or garm.password, T0, ca_file=None) as client:
        client.list_scalesets()


# --- what is offered again --------------------------------------------------------------


def test_a_token_good_beyond_the_margin_is_offered_again(path: Path) -> None:
    token = token_expiring(T0 + MARGIN + timedelta(seconds=1))
    keep(path, "admin", token)
    assert load(path, "admin", T0) == token


@pytest.mark.parametrize(
    "left", [MARGIN, MARGIN - timedelta(seconds=1), timedelta(0), -timedelta(days=1)]
)
def test_a_token_near_or_past_its_expiry_is_not_offered(path: Path, left: timedelta) -> None:
    keep(path, "admin", token_expiring(T0 + left))
    assert load(path, "admin", T0) is None


def test_a_token_of_another_username_is_not_offered(path: Path) -> None:
    keep(path, "admin", token_expiring(T0 + timedelta(hours=20)))
    assert load(path, "root", T0) is None


def payload(raw: bytes) -> str:
    segment = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return f"eyJhbGciOiJIUzI1NiJ9.{segment}.c2ln"


GOOD_EXP = int((T0 + timedelta(days=300)).timestamp())


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe not text",
        b"not json {",
        b"[]",
        b"null",
        b'{"username": "admin"}',
        b'{"username": "admin", "token": ""}',
        b'{"username": "admin", "token": 42}',
        b'{"token": "a.b.c"}',
        b"[" * 100_000,
    ],
)
def test_a_file_that_does_not_read_is_no_token(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert load(path, "admin", T0) is None


@pytest.mark.parametrize(
    "token",
    [
        "not-a-jwt",
        "a.b",
        "a.b.c.d",
        payload(b"\xff not json"),
        payload(b"[1, 2]"),
        payload(b'{"iss": "garm"}'),
        payload(b'{"exp": "2099-01-01"}'),
        payload(b'{"exp": true}'),
        payload(b'{"exp": NaN}'),
        payload(b'{"exp": Infinity}'),
        payload(b'{"exp": 1' + b"0" * 400 + b"}"),
        "a.!!!!.c",
    ],
)
def test_a_token_that_says_no_expiry_is_not_offered(path: Path, token: str) -> None:
    assert expires(token) is None
    keep(path, "admin", token)
    assert load(path, "admin", T0) is None


def test_the_expiry_is_read_without_the_signature(path: Path) -> None:
    assert expires(payload(json.dumps({"exp": GOOD_EXP}).encode())) == GOOD_EXP
    assert expires(jwt({"exp": 1.5})) == 1.5


def test_no_file_and_a_directory_in_its_place_are_no_token(path: Path) -> None:
    assert load(path, "admin", T0) is None
    path.mkdir(parents=True)
    assert load(path, "admin", T0) is None


# --- the file -----------------------------------------------------------------------------


def test_the_file_is_roots_alone_and_written_whole(path: Path) -> None:
    keep(path, "admin", token_expiring(T0 + timedelta(hours=20)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_the_same_token_is_not_written_again_and_none_deletes_it(path: Path) -> None:
    token = token_expiring(T0 + timedelta(hours=20))
    keep(path, "admin", token)
    before = path.stat()
    keep(path, "admin", token)
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    keep(path, "admin", None)
    assert not path.exists()
    keep(path, "admin", None)  # nothing to delete: nothing happens


def test_a_mode_gone_wide_is_put_back(path: Path) -> None:
    token = token_expiring(T0 + timedelta(hours=20))
    keep(path, "admin", token)
    path.chmod(0o644)
    keep(path, "admin", token)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_garbage_is_written_over(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff\xfe")
    token = token_expiring(T0 + timedelta(hours=20))
    keep(path, "admin", token)
    assert load(path, "admin", T0) == token


def test_a_file_that_cannot_be_written_costs_a_warning_without_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    token = token_expiring(T0 + timedelta(hours=20))
    with caplog.at_level(logging.DEBUG):
        keep(blocked / "admin-token.json", "admin", token)  # its directory is a file
    assert "GARM's admin token could not be kept" in caplog.text
    assert token not in caplog.text and token.split(".")[2] not in caplog.text


def test_the_charm_keeps_it_in_its_own_directory_and_removal_deletes_it(tmp_path: Path) -> None:
    paths = workload.Paths(tmp_path)
    assert paths.admin_token_file.parent == paths.lease_file.parent
    keep(paths.admin_token_file, "admin", token_expiring(T0 + timedelta(hours=20)))
    workload.remove(paths)
    assert not paths.admin_token_file.exists()


# --- hooks against GARM -----------------------------------------------------------------


def test_one_login_serves_the_next_hooks(garm: GarmDouble, path: Path) -> None:
    a_hook(path, garm)
    assert logins(garm) == 1
    first = kept(path)
    assert expires(first) == (T0 + garm.jwt_ttl).timestamp()
    start = len(garm.requests)
    a_hook(path, garm)
    a_hook(path, garm)
    assert sent(garm, start) == [("GET", "/scalesets", 200)] * 2
    assert kept(path) == first


def test_a_token_garm_refuses_is_replaced_and_never_sent_again(
    garm: GarmDouble, path: Path
) -> None:
    a_hook(path, garm)
    refused = kept(path)
    garm.expire_tokens()
    start = len(garm.requests)
    a_hook(path, garm)
    assert sent(garm, start) == [
        ("GET", "/scalesets", 401),
        ("POST", "/auth/login", 200),
        ("GET", "/scalesets", 200),
    ]
    assert kept(path) != refused
    start = len(garm.requests)
    a_hook(path, garm)
    assert sent(garm, start) == [("GET", "/scalesets", 200)]


def test_a_token_about_to_expire_is_replaced_before_garm_refuses_it(
    garm: GarmDouble, path: Path
) -> None:
    keep(path, garm.username, token_expiring(T0 + MARGIN / 2))
    start = len(garm.requests)
    a_hook(path, garm)
    assert sent(garm, start) == [("POST", "/auth/login", 200), ("GET", "/scalesets", 200)]
    assert expires(kept(path)) == (T0 + garm.jwt_ttl).timestamp()


def test_a_token_for_another_admin_is_not_offered(garm: GarmDouble, path: Path) -> None:
    a_hook(path, garm)
    token = kept(path)
    path.write_text(json.dumps({"token": token, "username": "someoneelse"}))
    start = len(garm.requests)
    a_hook(path, garm)
    assert logins(garm, start) == 1
    assert json.loads(path.read_text())["username"] == garm.username


def test_a_password_garm_refuses_leaves_no_token(garm: GarmDouble, path: Path) -> None:
    a_hook(path, garm)
    old = garm.password
    garm.change_admin_password("N3w-Admin-Passw0rd-Here")
    with pytest.raises(GarmApiError) as caught:
        a_hook(path, garm, password=old)
    assert caught.value.status == 401
    assert not path.exists()
    # The password the charm holds brought in line: one login, and kept again.
    start = len(garm.requests)
    a_hook(path, garm)
    assert logins(garm, start) == 1 and path.exists()


def test_garm_unreachable_leaves_the_token_as_it_was(garm: GarmDouble, path: Path) -> None:
    a_hook(path, garm)
    before = path.read_text()
    garm.inject("GET", r"/scalesets/?", drop=True)
    with pytest.raises(GarmUnreachable):
        a_hook(path, garm)
    assert path.read_text() == before


def test_the_token_is_never_logged_nor_in_an_error(
    garm: GarmDouble, path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a_hook(path, garm)
    tokens = [kept(path)]
    garm.expire_tokens()
    a_hook(path, garm)
    tokens.append(kept(path))
    garm.inject("GET", r"/scalesets/?", status=500)
    errors = []
    with pytest.raises(GarmApiError) as caught:
        a_hook(path, garm)
    errors.append(str(caught.value))
    old = garm.password
    garm.change_admin_password("N3w-Admin-Passw0rd-Here")
    with pytest.raises(GarmApiError) as caught:
        a_hook(path, garm, password=old)
    errors.append(str(caught.value))
    for token in tokens:
        for text in (caplog.text, *errors):
            assert token not in text
            assert token.split(".")[2] not in text

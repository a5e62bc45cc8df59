"""The GARM client over real HTTP against the double: wire shapes, errors, login."""

from __future__ import annotations

import http.server
import logging
import socket
import threading

import pytest

from garm.client import GarmApiError, GarmClient, GarmUnreachable
from garm.models import Entity
from tests.garm_double import GarmDouble

BODY = {
    "name": "ci-08f883",
    "provider_name": "openstack",
    "max_runners": 2,
    "image": "img",
    "flavor": "m1.small",
    "os_type": "linux",
    "os_arch": "amd64",
    "enabled": True,
    "labels": ["ci", "linux"],
    "github-runner-group": "Default",
    "extra_specs": {"b": "<x>", "a": [1, 2]},
}


@pytest.fixture
def org(garm: GarmDouble) -> Entity:
    garm.add_provider("openstack")
    return Entity("organization", garm.add_org("example-org"), "example-org")


@pytest.fixture
def client(garm: GarmDouble):
    c = GarmClient(garm.url, garm.username, garm.password, timeout=(1.0, 1.0))
    yield c
    c.close()


def logins(garm: GarmDouble) -> int:
    return sum(r.path == "/auth/login" for r in garm.requests)


def test_lists_are_read_and_typed(garm, client, org):
    assert client.list_scalesets() == []
    assert client.list_providers() == ["openstack"]
    assert client.list_organizations() == [org]
    repo_id = garm.add_repo("example", "repo")
    assert client.list_repositories() == [Entity("repository", repo_id, "example/repo")]


def test_create_then_read_back_through_the_list(garm, client, org):
    created = client.create_scaleset(org, BODY)
    (listed,) = client.list_scalesets()
    assert listed.id == created.id
    assert listed.enabled is True
    assert listed.labels == ("ci", "linux")
    assert listed.extra_specs == {"b": "<x>", "a": [1, 2]}
    assert listed.entity_kind == "organization"
    assert listed.entity_id == org.id
    assert listed.scale_set_id != 0


def test_zero_values_are_sent_on_update_and_read_back_as_zero(garm, client, org):
    created = client.create_scaleset(org, {**BODY, "min_idle_runners": 1})
    changes = {"enabled": False, "min_idle_runners": 0, "max_runners": 0}
    updated = client.update_scaleset(created.id, changes)
    assert garm.requests[-1].body == changes
    # GARM leaves all three keys off the wire now; the model reads them as zero.
    assert (updated.enabled, updated.min_idle_runners, updated.max_runners) == (False, 0, 0)


def test_one_login_serves_many_requests(garm, client):
    for _ in range(3):
        client.list_scalesets()
    assert logins(garm) == 1


def test_expired_token_is_renewed_once(garm, client):
    client.list_scalesets()
    garm.expire_tokens()
    assert client.list_scalesets() == []
    assert logins(garm) == 2


def test_a_second_401_is_an_api_error_not_a_loop(garm, client):
    garm.inject("GET", r"/scalesets/?", status=401, error="Not Authorized", times=2)
    with pytest.raises(GarmApiError) as caught:
        client.list_scalesets()
    assert (caught.value.status, caught.value.error) == (401, "Not Authorized")
    assert logins(garm) == 2


# --- the token, handed in and handed on (``garm.admin_token`` keeps it across hooks) ------


def test_a_token_from_before_is_used_without_a_login(garm, client):
    client.list_scalesets()
    token = client.token
    assert token is not None
    again = GarmClient(garm.url, garm.username, garm.password, token=token)
    start = len(garm.requests)
    assert again.list_scalesets() == []
    assert [(r.path, r.status) for r in garm.requests[start:]] == [("/scalesets", 200)]
    assert again.token == token
    again.close()


def test_no_token_until_a_login(garm, client):
    assert client.token is None
    client.list_scalesets()
    assert client.token is not None


def test_a_refused_token_is_replaced_by_the_fresh_one(garm, client):
    client.list_scalesets()
    refused = client.token
    garm.expire_tokens()
    stale = GarmClient(garm.url, garm.username, garm.password, token=refused)
    assert stale.list_scalesets() == []
    assert stale.token not in (None, refused)
    stale.close()


def test_no_token_is_handed_on_after_a_refused_login(garm, client):
    client.list_scalesets()
    token = client.token
    old = garm.password
    garm.change_admin_password("N3w-Admin-Passw0rd-Here")
    stale = GarmClient(garm.url, garm.username, old, token=token)
    with pytest.raises(GarmApiError):
        stale.list_scalesets()
    assert stale.token is None
    stale.close()


def test_a_token_answered_401_is_not_handed_on_until_garm_takes_it(garm, client):
    # GARM's 401 for GitHub's refusal looks like a refused token: not handed on, until
    # GARM answers the same token with something else.
    garm.inject("GET", r"/scalesets/?", status=401, error="Not Authorized", times=2)
    with pytest.raises(GarmApiError):
        client.list_scalesets()
    assert client.token is None
    client.list_scalesets()
    assert client.token is not None and logins(garm) == 2


def test_wrong_password_is_an_api_error_without_the_password(garm):
    bad = GarmClient(garm.url, garm.username, "Wr0ng-Secret-Value!", timeout=(1.0, 1.0))
    with pytest.raises(GarmApiError) as caught:
        bad.list_scalesets()
    assert caught.value.status == 401
    assert "Wr0ng-Secret-Value!" not in str(caught.value)


def test_api_error_keeps_status_error_and_details(client):
    with pytest.raises(GarmApiError) as caught:
        client.update_scaleset(4242, {"enabled": True})
    assert caught.value.status == 404
    assert caught.value.error == "Not Found"
    assert "PUT /scalesets/4242: 404 Not Found" in str(caught.value)


def test_delete_of_an_unknown_scaleset_is_answered_200(client):
    client.delete_scaleset(4242)


def test_force_remove_sends_the_query(garm, client, org):
    created = client.create_scaleset(org, BODY)
    name = garm.add_runner(created.id, runner_status="idle")
    client.delete_instance(name, force=True)
    assert garm.requests[-1].query == {"forceRemove": "true"}
    assert [i.status for i in client.list_instances()] == ["pending_force_delete"]


def test_connection_refused_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = GarmClient(f"http://127.0.0.1:{port}", "admin", "S3cret-Pass!", timeout=(1, 1))
    with pytest.raises(GarmUnreachable) as caught:
        client.list_scalesets()
    assert "S3cret-Pass!" not in str(caught.value)


def test_a_dropped_connection_is_unreachable(garm, client):
    garm.inject("GET", r"/scalesets/?", drop=True)
    with pytest.raises(GarmUnreachable):
        client.list_scalesets()


def test_a_slow_answer_times_out_as_unreachable(garm, client):
    garm.inject("GET", r"/instances/?", delay=2.5)
    with pytest.raises(GarmUnreachable):
        client.list_instances()


class _Garbled(http.server.BaseHTTPRequestHandler):
    """Something answering on GARM's port that is not GARM: a login, then answers that
    cannot be heard (a body that says gzip and is not, a redirect to itself)."""

    def do_GET(self) -> None:
        if self.path.endswith("/scalesets"):
            body = b"not gzip at all"
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
        else:
            body = b""
            self.send_response(302)
            self.send_header("Location", self.path)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = b'{"token":"t"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_answer_that_cannot_be_heard_is_unreachable():
    # Not only no connection: whatever requests cannot make of an answer is GARM not
    # heard, never an exception out of the hook.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Garbled)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = GarmClient(f"http://127.0.0.1:{server.server_port}", "admin", "pw")
        with pytest.raises(GarmUnreachable, match="ContentDecodingError"):
            client.list_scalesets()
        with pytest.raises(GarmUnreachable, match="TooManyRedirects"):
            client.list_instances()
    finally:
        server.shutdown()
        server.server_close()


def test_a_proxy_in_the_hooks_environment_is_not_used_for_garm(garm, client, monkeypatch):
    # GARM is on this machine: an http_proxy without loopback in no_proxy must not stand
    # between the charm and GARM (it did: every call "unreachable", a ProxyError).
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert client.list_scalesets() == []


def test_no_secret_reaches_logs_or_errors(garm, client, caplog):
    caplog.set_level(logging.DEBUG)
    client.list_scalesets()
    garm.expire_tokens()
    client.list_scalesets()
    garm.inject("GET", r"/scalesets/?", status=500)
    with pytest.raises(GarmApiError) as caught:
        client.list_scalesets()
    token = client.token
    assert token is not None
    for text in (caplog.text, str(caught.value), repr(client)):
        assert garm.password not in text
        assert "Bearer" not in text
        assert token not in text


GITHUB_TAKEN = (
    "error creating runner scale set: failed to create runner scale set: bad request while "
    "calling https://pipelines.actions.githubusercontent.com/_apis/runtime/runnerscalesets"
    '?api-version=6.0-preview: "A runner scale set with name ci-24ec4a already exists"'
)
GITHUB_JOB = (
    "error removing runner from github: request failed for https://x.example/agents/1: bad "
    'request while calling https://x.example/agents/1: "{\\"$id\\":\\"1\\",\\"innerException'
    '\\":null,\\"message\\":\\"The runner cannot be removed while it is running a job.\\",'
    '\\"typeKey\\":\\"JobStillRunningException\\"}"'
)


@pytest.mark.parametrize(
    ("status", "details", "cause"),
    [
        (400, GITHUB_TAKEN, "A runner scale set with name ci-24ec4a already exists"),
        (400, GITHUB_JOB, "The runner cannot be removed while it is running a job."),
        (400, "scale set has runners", "scale set has runners"),
        (
            404,
            "error fetching instance: error fetching instance by name: not found",
            "error fetching instance by name: not found",
        ),
        (500, "", "Server error"),
        (400, "x: " + "y" * 500, "y" * 119 + "…"),
    ],
)
def test_a_refusal_reads_as_one_short_cause_without_urls(status, details, cause):
    error = GarmApiError("POST", "/x", status, "Server error" if status == 500 else "Bad", details)
    assert error.cause == cause
    assert "http" not in error.cause and len(error.cause) <= 120


def test_only_githubs_already_exists_means_the_name_is_taken():
    assert GarmApiError("POST", "/x", 400, "Bad Request", GITHUB_TAKEN).name_taken
    assert not GarmApiError("POST", "/x", 500, "Server error", GITHUB_TAKEN).name_taken
    assert not GarmApiError("POST", "/x", 400, "Bad Request", GITHUB_JOB).name_taken

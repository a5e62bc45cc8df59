"""Pin the GARM double's wire format and status codes to GARM's, as written down in
docs/reference/garm-api.md (read in GARM's source at afda4e76).

Each test names the section of docs/reference/garm-api.md it holds the double to (a bare
``§2.6`` is a section of that page). The double is only useful while it answers like
GARM, so these tests talk to it over real HTTP and look at the raw bytes where Go's
encoder leaves its marks (absent omitempty keys, ``null``, compacted and HTML-escaped
``extra_specs``, trailing newlines).
"""

from __future__ import annotations

import base64
import itertools
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import requests

from tests.garm_double import LISTENER_DELAY, GarmDouble, go_time

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
AUTH_FAILED = {"error": "Authentication failed", "details": ""}
NOT_AUTHORIZED = {"error": "Not Authorized", "details": ""}
INVALID_REQUEST = {"error": "Bad Request", "details": "invalid request"}
SERVER_ERROR = {"error": "Server error", "details": ""}
_NO_BODY = object()


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class Api:
    """Minimal HTTP client for the double, logged in unless told otherwise."""

    def __init__(self, double: GarmDouble, *, login: bool = True):
        self.double = double
        self.base = double.url + "/api/v1"
        self.session = requests.Session()
        self.token = self.login() if login else ""

    def login(self) -> str:
        resp = self.call(
            "POST",
            "/auth/login",
            {"username": self.double.username, "password": self.double.password},
            auth=False,
        )
        assert resp.status_code == 200, resp.text
        return resp.json()["token"]

    def call(
        self,
        method: str,
        path: str,
        body: Any = _NO_BODY,
        *,
        raw: str | None = None,
        auth: bool = True,
        params: dict[str, str] | None = None,
    ) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        data = raw if raw is not None else None if body is _NO_BODY else json.dumps(body)
        return self.session.request(
            method, self.base + path, data=data, headers=headers, params=params, timeout=5
        )


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def double(fake_clock: FakeClock) -> Iterator[GarmDouble]:
    with GarmDouble(clock=fake_clock) as started:
        yield started
        assert started.unexpected == []


@pytest.fixture
def api(double: GarmDouble) -> Api:
    return Api(double)


@pytest.fixture
def org(double: GarmDouble) -> str:
    double.add_provider("openstack")
    return double.add_org("example-org")


def spec(name: str = "ci-small", **overrides: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "provider_name": "openstack",
        "image": "ubuntu-24.04",
        "flavor": "m1.small",
        "os_type": "linux",
        "os_arch": "amd64",
        "max_runners": 5,
    }
    body.update(overrides)
    return body


def create(api: Api, org: str, **overrides: Any) -> dict[str, Any]:
    resp = api.call("POST", f"/organizations/{org}/scalesets", spec(**overrides))
    assert resp.status_code == 200, resp.text
    return resp.json()


def error(resp: requests.Response) -> tuple[int, dict[str, Any]]:
    assert resp.headers["Content-Type"] == "application/json"
    return resp.status_code, resp.json()


# --------------------------------------------------------------------------- §0.1, §2.2


def test_disabled_zeroed_scaleset_has_no_enabled_max_or_min_keys(api: Api, org: str) -> None:
    # §0.1 / §2.2: bool and uint with omitempty are absent when false / 0.
    created = create(api, org, enabled=True, min_idle_runners=1, max_runners=3)
    assert created["enabled"] is True and created["min_idle_runners"] == 1
    body = {"enabled": False, "min_idle_runners": 0, "max_runners": 0}
    updated = api.call("PUT", f"/scalesets/{created['id']}", body).json()
    fetched = api.call("GET", f"/scalesets/{created['id']}").json()
    listed = api.call("GET", "/scalesets").json()[0]
    for shape in (updated, fetched, listed):
        assert not {"enabled", "max_runners", "min_idle_runners"} & shape.keys()


def test_status_messages_null_and_non_omitempty_keys_always_present(api: Api, org: str) -> None:
    # §2.2: status_messages has no omitempty and is never populated -> null.
    created = create(api, org)
    fetched = api.call("GET", f"/scalesets/{created['id']}")
    assert b'"status_messages":null' in fetched.content
    body = fetched.json()
    assert body["disable_update"] is False and body["enable_shell"] is False
    assert body["generation"] == 0 and body["state"] == "pending_create"
    assert {"created_at", "updated_at", "endpoint"} <= body.keys()
    assert body["endpoint"]["name"] == "github.com"


def test_list_lacks_template_name_and_instances(api: Api, org: str, double: GarmDouble) -> None:
    # §2.2 / §7: only GET-by-id loads instances and the template name.
    created = create(api, org)
    double.add_runner(created["id"])
    by_id = api.call("GET", f"/scalesets/{created['id']}").json()
    assert by_id["template_name"] == "github_linux" and len(by_id["instances"]) == 1
    # §3: an instance embedded in GET /scalesets/{id} has its scale set unloaded.
    assert by_id["instances"][0]["provider_name"] == ""
    listed = api.call("GET", "/scalesets").json()
    assert isinstance(listed, list) and len(listed) == 1
    assert "template_name" not in listed[0] and "instances" not in listed[0]
    assert listed[0]["template_id"] == 2


def test_create_defaults_to_disabled_and_fills_defaults(
    api: Api, org: str, fake_clock: FakeClock
) -> None:
    # §2.3: enabled defaults to false; prefix, runner group, timeout, template, state.
    created = create(api, org)
    assert "enabled" not in created
    assert created["runner_prefix"] == "garm"
    assert created["github-runner-group"] == "Default"
    assert created["runner_bootstrap_timeout"] == 20
    assert created["template_id"] == 2 and created["template_name"] == "github_linux"
    assert created["state"] == "pending_create"
    assert created["scale_set_id"] > 0 and created["scale_set_id"] != created["id"]
    assert created["org_id"] == org and created["org_name"] == "example-org"
    assert created["created_at"] == created["updated_at"] == go_time(fake_clock.now)
    # omitempty: no labels -> no tags; no extra_specs; no instances yet; no repo keys.
    assert not {"tags", "extra_specs", "instances", "repo_id", "repo_name"} & created.keys()


def test_create_windows_picks_windows_system_template(api: Api, org: str) -> None:
    # §4: github_windows is created first at server start, so it has id 1.
    created = create(api, org, os_type="windows")
    assert (created["template_id"], created["template_name"]) == (1, "github_windows")


def test_scale_set_id_absent_until_registered(api: Api, org: str, double: GarmDouble) -> None:
    # §2.2: scale_set_id (the GitHub id) is omitempty.
    double.register_on_create = False
    created = create(api, org)
    assert "scale_set_id" not in created
    double.register(created["id"])
    assert api.call("GET", f"/scalesets/{created['id']}").json()["scale_set_id"] > 0


def test_key_order_follows_the_go_struct(api: Api, org: str) -> None:
    # §0.1: Go writes struct fields in declaration order (params/params.go ScaleSet).
    created = create(
        api, org, enabled=True, min_idle_runners=1, labels=["x64"], extra_specs={"a": 1}
    )
    assert list(created) == [
        "runner_prefix",
        "created_at",
        "updated_at",
        "id",
        "scale_set_id",
        "name",
        "disable_update",
        "state",
        "provider_name",
        "max_runners",
        "min_idle_runners",
        "image",
        "flavor",
        "os_type",
        "os_arch",
        "enabled",
        "enable_shell",
        "generation",
        "endpoint",
        "runner_bootstrap_timeout",
        "extra_specs",
        "github-runner-group",
        "tags",
        "status_messages",
        "org_id",
        "org_name",
        "template_id",
        "template_name",
    ]


def test_times_are_utc_rfc3339_with_trimmed_fraction(
    api: Api, org: str, fake_clock: FakeClock
) -> None:
    # §0.1: time.Time marshals as RFC 3339 with trailing fractional zeros trimmed.
    fake_clock.now = datetime(2026, 11, 1, 14, 0, 0, 120000, tzinfo=timezone(timedelta(hours=2)))
    assert create(api, org, name="a")["created_at"] == "2026-11-01T12:00:00.12Z"
    fake_clock.now = datetime(2026, 11, 1, 12, 0, 5)
    assert create(api, org, name="b")["created_at"] == "2026-11-01T12:00:05Z"


def test_every_body_ends_with_newline(api: Api, org: str, double: GarmDouble) -> None:
    # §0.1: json.NewEncoder(w).Encode appends "\n"; deletes answer an empty body.
    created = create(api, org)
    answers = [
        api.call("GET", "/scalesets"),
        api.call("GET", f"/scalesets/{created['id']}"),
        api.call("PUT", f"/scalesets/{created['id']}", {"image": "x"}),
        api.call("GET", "/scalesets/999"),
        api.call("GET", "/instances"),
        api.call("GET", "/providers"),
        api.call("GET", "/controller"),
        api.call("GET", "/scalesets", auth=False),
        api.call("POST", f"/organizations/{org}/scalesets", raw="{"),
        api.call("GET", "/no-such-route"),
    ]
    double.unexpected.clear()
    for resp in answers:
        assert resp.headers["Content-Type"] == "application/json"
        assert resp.content.endswith(b"}\n") or resp.content.endswith(b"]\n")
    deleted = api.call("DELETE", f"/scalesets/{created['id']}")
    assert (deleted.status_code, deleted.content) == (200, b"")
    assert deleted.headers["Content-Type"] == "application/json"


# --------------------------------------------------------------------------- §0.2 routing


def test_unknown_route_is_404_and_recorded_as_unexpected(api: Api, double: GarmDouble) -> None:
    # §0.2: GARM's catch-all route answers with lowercase "found".
    resp = api.call("GET", "/no-such-route")
    assert error(resp) == (404, {"error": "Not found", "details": "Resource not found"})
    # A known path with a method GARM's catch-all also takes lands there too.
    assert api.call("DELETE", "/scalesets").status_code == 404
    # Other methods are gorilla's 405 with an empty body.
    patched = api.call("PATCH", "/scalesets/1", {})
    assert (patched.status_code, patched.content) == (405, b"")
    outside = requests.get(double.url + "/healthz", timeout=5)
    assert (outside.status_code, outside.text) == (404, "404 page not found\n")
    assert double.unexpected == [
        "GET /no-such-route",
        "DELETE /scalesets",
        "PATCH /scalesets/1",
        "GET /healthz",
    ]
    double.unexpected.clear()


def test_unknown_route_still_runs_the_gates(double: GarmDouble) -> None:
    # §0.2 / §0.3: the catch-all sits behind init -> urls -> JWT.
    resp = Api(double, login=False).call("GET", "/no-such-route", auth=False)
    assert error(resp) == (401, AUTH_FAILED)
    double.unexpected.clear()


def test_routes_answer_with_and_without_trailing_slash(api: Api, org: str) -> None:
    # §0.2: every route is registered with and without a trailing slash.
    created = create(api, org)
    for path in ("/scalesets/", f"/scalesets/{created['id']}/", "/instances/", "/providers/"):
        assert api.call("GET", path).status_code == 200
    assert (
        api.call("POST", "/auth/login/", {"username": "admin", "password": "x"}).status_code == 401
    )


def test_empty_lists_are_bare_arrays(api: Api) -> None:
    # §0.2 / §5: lists are unpaginated bare arrays, [] when empty.
    for path in ("/scalesets", "/instances", "/providers", "/organizations", "/repositories"):
        assert api.call("GET", path).content == b"[]\n"


# --------------------------------------------------------------------------- §0.3, §1 gates


def test_init_required_until_first_run(fake_clock: FakeClock) -> None:
    # §0.3 / §1.1 / §1.2.
    with GarmDouble(clock=fake_clock, initialised=False) as double:
        api = Api(double, login=False)
        init_required = (409, {"error": "init_required", "details": "Missing superuser"})
        assert error(api.call("GET", "/scalesets", auth=False)) == init_required
        assert error(api.call("GET", "/controller", auth=False)) == init_required
        login = {"username": "admin", "password": double.password}
        assert error(api.call("POST", "/auth/login", login, auth=False)) == init_required
        user = {"username": "root", "email": "root@example.com", "password": "S3cure-enough!"}
        created = api.call("POST", "/first-run", user, auth=False)
        assert created.status_code == 200
        assert created.json()["enabled"] is True and created.json()["is_admin"] is True
        assert "full_name" not in created.json()
        again = api.call("POST", "/first-run", user, auth=False)
        assert error(again) == (409, {"error": "Conflict", "details": "already initialized"})
        assert (double.username, double.password) == ("root", "S3cure-enough!")
        assert Api(double).token
        assert double.unexpected == []


@pytest.mark.parametrize(
    ("user", "details"),
    [
        ({"username": "root", "password": "S3cure-enough!"}, "missing username or email"),
        (
            {"username": "root", "email": "nope", "password": "S3cure-enough!"},
            "invalid email address",
        ),
        (
            {"username": "ro-ot", "email": "r@example.com", "password": "S3cure-enough!"},
            "invalid username",
        ),
        (
            {"username": "root", "email": "r@example.com", "password": "short1!"},
            "password is too weak",
        ),
    ],
)
def test_first_run_validation(fake_clock: FakeClock, user: dict[str, str], details: str) -> None:
    # §1.1: validation failures are 400 with the handler's message.
    with GarmDouble(clock=fake_clock, initialised=False) as double:
        resp = Api(double, login=False).call("POST", "/first-run", user, auth=False)
        assert error(resp) == (400, {"error": "Bad Request", "details": details})


def test_urls_required_before_auth_but_not_for_controller(fake_clock: FakeClock) -> None:
    # §0.3 / §1.3 / §1.4: the URL check runs before the JWT check; /controller is exempt.
    with GarmDouble(clock=fake_clock, urls_set=False) as double:
        api = Api(double)
        urls_required = (
            409,
            {
                "error": "urls_required",
                "details": "Missing required URLs. "
                "Make sure you update the metadata and callback URLs",
            },
        )
        assert error(api.call("GET", "/scalesets", auth=False)) == urls_required
        assert error(api.call("GET", "/controller-info")) == urls_required
        assert error(api.call("GET", "/controller", auth=False)) == (401, AUTH_FAILED)
        info = api.call("GET", "/controller").json()
        assert "metadata_url" not in info and "agent_url" not in info and info["hostname"]
        base = "https://garm.example.com"
        urls = {
            "metadata_url": f"{base}/api/v1/metadata",
            "callback_url": f"{base}/api/v1/callbacks",
        }
        updated = api.call("PUT", "/controller", urls).json()
        assert "hostname" not in updated
        assert updated["agent_url"] == base  # derived from the callback URL
        assert updated["controller_webhook_url"] == updated["controller_id"]
        assert api.call("GET", "/scalesets").status_code == 200
        assert error(api.call("GET", "/scalesets", auth=False)) == (401, AUTH_FAILED)


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer a b", "Bearer not-a-token", "Bearer  double-space"],
)
def test_bad_authorization_is_401(double: GarmDouble, header: str | None) -> None:
    # §0.3 / §1.2: header split on one space into exactly two parts; token must be valid.
    Api(double)  # a token exists, but these requests do not carry it
    headers = {"Authorization": header} if header else {}
    resp = requests.get(double.url + "/api/v1/scalesets", headers=headers, timeout=5)
    assert error(resp) == (401, AUTH_FAILED)


def test_any_first_word_and_the_cookie_carry_the_token(api: Api) -> None:
    # §1.2: the first word is not checked; without the header the garm_token cookie counts.
    url = api.base + "/scalesets"
    assert requests.get(url, headers={"Authorization": f"Token {api.token}"}, timeout=5).ok
    assert requests.get(url, cookies={"garm_token": api.token}, timeout=5).ok


def test_login_failures(double: GarmDouble) -> None:
    # §1.2: wrong or empty credentials -> 401 Not Authorized, malformed JSON -> 400.
    api = Api(double, login=False)
    wrong = {"username": double.username, "password": "wrong-Passw0rd!"}
    assert error(api.call("POST", "/auth/login", wrong, auth=False)) == (401, NOT_AUTHORIZED)
    assert error(api.call("POST", "/auth/login", {}, auth=False)) == (401, NOT_AUTHORIZED)
    assert error(api.call("POST", "/auth/login", raw="{", auth=False)) == (400, INVALID_REQUEST)
    by_email = {"username": "admin@example.com", "password": double.password}
    assert api.call("POST", "/auth/login", by_email, auth=False).status_code == 200


@pytest.mark.parametrize("url", ["", "garm.example.com", "http://", "/api/v1/metadata"])
def test_controller_rejects_urls_without_scheme_and_host(api: Api, url: str) -> None:
    # §1.4: each URL must parse with a non-empty scheme and host.
    resp = api.call("PUT", "/controller", {"metadata_url": url})
    assert error(resp) == (400, {"error": "Bad Request", "details": "invalid metadata_url"})


# --------------------------------------------------------------------------- §2.3 create


def test_create_body_errors(api: Api, org: str) -> None:
    # §0.1 / §0.4: empty or malformed bodies, and wrong JSON types, are 400 invalid request.
    path = f"/organizations/{org}/scalesets"
    assert error(api.call("POST", path, raw="")) == (400, INVALID_REQUEST)
    assert error(api.call("POST", path, raw="{not json")) == (400, INVALID_REQUEST)
    assert error(api.call("POST", path, raw="[]")) == (400, INVALID_REQUEST)
    assert error(api.call("POST", path, spec(max_runners="5"))) == (400, INVALID_REQUEST)
    assert error(api.call("POST", path, spec(max_runners=-1))) == (400, INVALID_REQUEST)
    assert api.call("GET", "/scalesets").json() == []


def test_create_entity_lookup(api: Api, org: str) -> None:
    # §2: malformed org UUID -> 400, unknown -> 404.
    assert api.call("POST", "/organizations/nope/scalesets", spec()).status_code == 400
    unknown = api.call("POST", f"/organizations/{org[:-4]}ffff/scalesets", spec())
    status, body = error(unknown)
    assert (status, body["error"]) == (404, "Not Found")


@pytest.mark.parametrize("os_type", [None, "", "Linux", "macos"])
def test_create_needs_a_known_os_type(api: Api, org: str, os_type: str | None) -> None:
    # §2.3: os_type picks the default template; anything but linux/windows -> 400.
    body = spec(os_type=os_type)
    if os_type is None:
        del body["os_type"]
    status, payload = error(api.call("POST", f"/organizations/{org}/scalesets", body))
    assert (status, payload["error"]) == (400, "Bad Request")
    assert payload["details"].endswith(
        "no template ID supplied and no default template can be found"
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"image": ""},
        {"flavor": None},
        {"provider_name": ""},
        {"name": ""},
        {"max_runners": 0},
        {"max_runners": 2, "min_idle_runners": 3},
        {"max_runners": None, "maxRunners": 5},  # misspelled keys are ignored
    ],
)
def test_create_validation_failures_are_500(api: Api, org: str, overrides: dict[str, Any]) -> None:
    # §2.3 step 5: CreateScaleSetParams.Validate errors are plain -> 500, empty details.
    body = {k: v for k, v in {**spec(), **overrides}.items() if v is not None}
    resp = api.call("POST", f"/organizations/{org}/scalesets", body)
    assert error(resp) == (500, SERVER_ERROR)


def test_create_keys_match_case_insensitively(api: Api, org: str) -> None:
    # §0.1: Go's decoder matches keys case-insensitively; only unknown names are ignored.
    body = spec()
    body["Max_Runners"] = body.pop("max_runners")
    assert api.call("POST", f"/organizations/{org}/scalesets", body).json()["max_runners"] == 5


def test_duplicate_name_is_githubs_400(api: Api, org: str, double: GarmDouble) -> None:
    # §2.3 step 4: GitHub rejects a taken name (per runner group) with 400.
    create(api, org, name="CI-Small")
    status, body = error(api.call("POST", f"/organizations/{org}/scalesets", spec("ci-small")))
    assert (status, body["error"]) == (400, "Bad Request")
    other = create(api, org, name="ci-small", **{"github-runner-group": "gpu"})
    assert other["github-runner-group"] == "gpu"
    assert len(double.scalesets()) == 2


def test_repo_scaleset_carries_repo_keys(api: Api, double: GarmDouble) -> None:
    # §2.2: exactly one entity set; repo_name is owner/name.
    repo = double.add_repo("example", "repo")
    resp = api.call("POST", f"/repositories/{repo}/scalesets", spec())
    body = resp.json()
    assert (body["repo_id"], body["repo_name"]) == (repo, "example/repo")
    assert "org_id" not in body and "org_name" not in body


def test_labels_link_tags_case_insensitively(api: Api, org: str) -> None:
    # §2.3 Labels: global case-insensitive tag table, first spelling wins, no name tag.
    # (§8: tags come back in no fixed order, so compare them as sets.)
    first = create(api, org, name="a", labels=["Linux", "GPU"])
    second = create(api, org, name="b", labels=["linux", "gpu", "gpu", "x64"])
    assert {t["name"] for t in first["tags"]} == {"Linux", "GPU"}
    assert sorted(t["name"] for t in second["tags"]) == ["GPU", "Linux", "x64"]
    first_ids = {t["name"]: t["id"] for t in first["tags"]}
    second_ids = {t["name"]: t["id"] for t in second["tags"]}
    assert second_ids["Linux"] == first_ids["Linux"] and second_ids["GPU"] == first_ids["GPU"]
    assert list(second["tags"][0]) == ["id", "name"]


def test_extra_specs_compacted_html_escaped_and_compared_raw(api: Api, org: str) -> None:
    # §0.1 / §2.5: RawMessage is compacted and HTML-escaped on output; UTF-8 stays raw;
    # updates compare the stored bytes, so a reformatted equal document is a change.
    raw_specs = '{ "script": "<a> & <b>",\n  "name": "é" }'
    body = json.dumps(spec())[:-1] + f', "extra_specs": {raw_specs}}}'
    created = api.call("POST", f"/organizations/{org}/scalesets", raw=body)
    expected = '"extra_specs":{"script":"\\u003ca\\u003e \\u0026 \\u003cb\\u003e","name":"é"}'
    assert expected.encode() in created.content
    path = f"/scalesets/{created.json()['id']}"
    same = api.call("PUT", path, raw=f'{{"extra_specs": {raw_specs}}}').json()
    assert same["generation"] == 0
    compacted = api.call("PUT", path, {"extra_specs": created.json()["extra_specs"]}).json()
    assert compacted["generation"] == 1


def test_extra_specs_null_is_stored_as_null(api: Api, org: str) -> None:
    # §2.5 + Go: a JSON null decodes into json.RawMessage as the bytes "null" (non-nil),
    # so it is written, bumps the generation and comes back as "extra_specs":null.
    created = create(api, org, extra_specs={"a": 1})
    resp = api.call("PUT", f"/scalesets/{created['id']}", {"extra_specs": None})
    assert b'"extra_specs":null' in resp.content
    assert resp.json()["generation"] == 1


# --------------------------------------------------------------------------- §2.4 update


def test_update_without_change_keeps_updated_at(api: Api, org: str, fake_clock: FakeClock) -> None:
    # §2.4 / §2.7: a PUT with nothing changed writes nothing.
    created = create(api, org, min_idle_runners=1)
    path = f"/scalesets/{created['id']}"
    fake_clock.advance(60)
    same = {"image": created["image"], "max_runners": 5, "min_idle_runners": 1, "enabled": False}
    for body in ({}, same, {"labels": ["new"]}, {"github-runner-group": "other"}):
        assert api.call("PUT", path, body).json()["updated_at"] == created["updated_at"]
    changed = api.call("PUT", path, {"max_runners": 6}).json()
    assert changed["updated_at"] == go_time(fake_clock.now)
    assert changed["generation"] == 0  # max_runners does not bump the generation


def test_update_rules(api: Api, org: str) -> None:
    # §2.4: pointers change only when present; merged min <= max; timeout 0 refused.
    created = create(api, org, min_idle_runners=2)
    path = f"/scalesets/{created['id']}"
    too_big = api.call("PUT", path, {"max_runners": 1})
    assert error(too_big) == (
        400,
        {"error": "Bad Request", "details": "min_idle_runners cannot be larger than max_runners"},
    )
    zero_timeout = api.call("PUT", path, {"runner_bootstrap_timeout": 0})
    assert error(zero_timeout) == (
        400,
        {"error": "Bad Request", "details": "runner_bootstrap_timeout cannot be 0"},
    )
    drained = api.call("PUT", path, {"min_idle_runners": 0, "max_runners": 0})
    assert drained.status_code == 200  # max_runners 0 is accepted on update
    grouped = api.call("PUT", path, {"runner_group": "gpu", "name": "renamed"}).json()
    assert grouped["github-runner-group"] == "gpu" and grouped["name"] == "renamed"
    assert grouped["generation"] == 1  # runner_group bumps, name does not
    imaged = api.call("PUT", path, {"image": "ubuntu-26.04", "state": "", "extended_state": "x"})
    assert imaged.json()["generation"] == 2
    assert imaged.json()["state"] == "" and imaged.json()["extended_state"] == "x"


def test_update_unknown_and_malformed_ids(api: Api) -> None:
    # §2 / §2.4: unknown id -> 404; non-numeric or >32-bit id -> 400.
    status, body = error(api.call("PUT", "/scalesets/42", {"enabled": True}))
    assert (status, body["error"]) == (404, "Not Found")
    assert error(api.call("GET", "/scalesets/abc")) == (400, INVALID_REQUEST)
    assert error(api.call("GET", f"/scalesets/{2**32}")) == (400, INVALID_REQUEST)


def test_disabled_since_follows_enable_transitions(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    created = create(api, org)
    assert double.disabled_since == {created["id"]: T0}
    api.call("PUT", f"/scalesets/{created['id']}", {"enabled": True})
    assert double.disabled_since == {}
    later = fake_clock.advance(30)
    api.call("PUT", f"/scalesets/{created['id']}", {"enabled": False})
    assert double.disabled_since == {created["id"]: later}


# --------------------------------------------------------------------------- §2.6 delete


def test_delete_checks_in_order(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §2.6: unknown -> 200; any runner row -> 400; enabled -> 400; then removed.
    assert api.call("DELETE", "/scalesets/77").content == b""
    created = create(api, org, enabled=True)
    path = f"/scalesets/{created['id']}"
    runner = double.add_runner(created["id"], status="pending_delete")
    has_runners = {"error": "Bad Request", "details": "scale set has runners"}
    assert error(api.call("DELETE", path)) == (400, has_runners)
    double.tick()  # reaps the pending_delete row
    assert runner not in {i["name"] for i in double.instances()}
    enabled = {"error": "Bad Request", "details": "scale set is enabled; disable it first"}
    assert error(api.call("DELETE", path)) == (400, enabled)
    api.call("PUT", path, {"enabled": False})
    deleted = api.call("DELETE", path)
    assert (deleted.status_code, deleted.content) == (200, b"")
    assert api.call("GET", path).status_code == 404
    assert double.deletions == [(created["id"], "ci-small", fake_clock.now)]


def test_delete_keeps_record_when_github_delete_fails(
    api: Api, org: str, double: GarmDouble
) -> None:
    # §2.6: a failed GitHub DELETE still answers 200, but the row stays.
    created = create(api, org)
    double.delete_keeps_record = True
    assert api.call("DELETE", f"/scalesets/{created['id']}").status_code == 200
    assert api.call("GET", f"/scalesets/{created['id']}").status_code == 200
    assert double.deletions == []


# --------------------------------------------------------------------------- §3 instances


def test_instance_shape(api: Api, org: str, double: GarmDouble) -> None:
    # §3: name lower(<prefix>-<id>), GARM scale set id, non-omitempty keys present.
    created = create(api, org, runner_prefix="CI")
    name = double.add_runner(created["id"])
    [instance] = api.call("GET", "/instances").json()
    assert name == instance["name"] and name.startswith("ci-") and name == name.lower()
    assert instance["scale_set_id"] == created["id"]
    assert instance["provider_name"] == "openstack"
    assert (instance["status"], instance["runner_status"]) == ("running", "idle")
    assert instance["capabilities"] == {"has_shell": False}
    assert instance["heartbeat"] == "0001-01-01T00:00:00Z" and instance["generation"] == 0
    assert not {"pool_id", "status_messages", "addresses", "job"} & instance.keys()
    assert api.call("GET", f"/instances/{name}").json() == instance
    assert api.call("GET", f"/scalesets/{created['id']}/instances").json() == [instance]
    assert api.call("GET", "/scalesets/999/instances").json() == []


def test_instance_delete_rules(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §3 / runner.DeleteRunner: allowed statuses, forceRemove, idempotence.
    created = create(api, org)
    status, body = error(api.call("DELETE", "/instances/garm-nope"))
    assert (status, body["error"]) == (404, "Not Found")
    creating = double.add_runner(created["id"], status="creating")
    status, body = error(api.call("DELETE", f"/instances/{creating}"))
    assert (status, body["error"]) == (400, "Bad Request")
    running = double.add_runner(created["id"])
    resp = api.call("DELETE", f"/instances/{running}")
    assert (resp.status_code, resp.content) == (200, b"")
    forced = api.call("DELETE", f"/instances/{running}", params={"forceRemove": "true"})
    assert forced.status_code == 200
    again = api.call("DELETE", f"/instances/{running}")
    assert again.status_code == 200
    statuses = {i["name"]: i["status"] for i in double.instances()}
    assert statuses[running] == "pending_force_delete"  # a plain delete does not downgrade
    assert double.removals == [
        (running, created["id"], fake_clock.now, False),
        (running, created["id"], fake_clock.now, True),
        (running, created["id"], fake_clock.now, False),
    ]


# --------------------------------------------------------------------------- faults, tokens


def test_fault_status_answers_without_processing(api: Api, org: str, double: GarmDouble) -> None:
    created = create(api, org)
    path = f"/scalesets/{created['id']}"
    double.inject("PUT", r"/scalesets/\d+", status=503, error="Server error", times=2)
    for _ in range(2):
        assert error(api.call("PUT", path, {"enabled": True})) == (503, SERVER_ERROR)
    assert "enabled" not in api.call("GET", path).json()
    assert api.call("PUT", path, {"enabled": True}).json()["enabled"] is True


def test_fault_drop_closes_without_processing(api: Api, org: str, double: GarmDouble) -> None:
    created = create(api, org)
    double.inject("PUT", r"/scalesets/\d+", drop=True)
    with pytest.raises(requests.ConnectionError):
        api.call("PUT", f"/scalesets/{created['id']}", {"enabled": True})
    assert "enabled" not in double.scalesets()[0]
    assert double.requests[-1].status is None


def test_fault_drop_after_processes_then_closes(api: Api, org: str, double: GarmDouble) -> None:
    created = create(api, org)
    double.inject("PUT", r"/scalesets/\d+", drop_after=True)
    with pytest.raises(requests.ConnectionError):
        api.call("PUT", f"/scalesets/{created['id']}", {"enabled": True})
    assert double.scalesets()[0]["enabled"] is True
    assert double.requests[-1].status == 200


def test_fault_delay_then_normal_answer(api: Api, double: GarmDouble) -> None:
    double.inject("GET", "/providers", delay=0.2)
    started = time.monotonic()
    assert api.call("GET", "/providers/").status_code == 200
    assert time.monotonic() - started >= 0.2


def test_expired_tokens_force_a_new_login(api: Api, double: GarmDouble) -> None:
    double.expire_tokens()
    assert error(api.call("GET", "/scalesets")) == (401, AUTH_FAILED)
    api.token = api.login()
    assert api.call("GET", "/scalesets").status_code == 200


def test_requests_and_writes_are_recorded(api: Api, org: str, double: GarmDouble) -> None:
    created = create(api, org)
    api.call("GET", "/scalesets", params={"a": "1"})
    api.call("PUT", f"/scalesets/{created['id']}", {"enabled": True})
    methods = [(r.method, r.path, r.status) for r in double.requests]
    assert methods == [
        ("POST", "/auth/login", 200),
        ("POST", f"/organizations/{org}/scalesets", 200),
        ("GET", "/scalesets", 200),
        ("PUT", f"/scalesets/{created['id']}", 200),
    ]
    assert double.requests[2].query == {"a": "1"}
    assert [(w.method, w.body) for w in double.writes()][1] == ("PUT", {"enabled": True})
    assert len(double.writes()) == 2


# --------------------------------------------------------------------------- §2.8 tick


def test_tick_scales_up_only_when_enabled(api: Api, org: str, double: GarmDouble) -> None:
    # §2.8: disabled -> no scale-up; enabled -> runners appear, then finish provisioning.
    created = create(api, org, min_idle_runners=2)
    double.tick()
    assert double.instances() == []
    api.call("PUT", f"/scalesets/{created['id']}", {"enabled": True})
    double.tick()
    assert [(i["status"], i["runner_status"]) for i in double.instances()] == [
        ("creating", "pending")
    ] * 2
    double.tick()
    assert {(i["status"], i["runner_status"]) for i in double.instances()} == {
        ("running", "pending")
    }


def test_tick_target_counts_desired_runners_capped_by_max(
    api: Api, org: str, double: GarmDouble
) -> None:
    # §2.8: target = min(min_idle + desired_runner_count, max_runners).
    created = create(api, org, enabled=True, min_idle_runners=1, max_runners=3)
    double.set_desired_runner_count(created["id"], 5)
    double.tick()
    assert len(double.instances()) == 3
    assert double.scalesets()[0]["desired_runner_count"] == 5


def test_tick_scale_down_spares_busy_runners_even_when_disabled(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §2.8: scale-down runs while disabled and takes only running, non-busy runners.
    created = create(api, org, min_idle_runners=2)
    busy = double.add_runner(created["id"])
    double.start_job(busy)
    idle = [double.add_runner(created["id"]) for _ in range(2)]
    double.tick()  # 3 live > target 2: one idle runner goes
    assert sorted(i["status"] for i in double.instances()) == [
        "pending_delete",
        "running",
        "running",
    ]
    api.call("PUT", f"/scalesets/{created['id']}", {"min_idle_runners": 0, "max_runners": 0})
    double.tick()  # reaps the first, then marks the other idle one
    statuses = {i["name"]: i["status"] for i in double.instances()}
    assert statuses[busy] == "running"
    assert [statuses.get(name) for name in idle] == [None, "pending_delete"]
    assert double.finish_job(busy) is False  # disabled: no listener hears it (§8)
    fake_clock.advance(300)
    double.tick()  # reaps the idle runner; consolidation marks the busy one
    double.tick()
    assert double.instances() == []


# --------------------------------------------------------------------------- §8 observed


def listening_scaleset(api: Api, org: str, fake_clock: FakeClock, **overrides: Any) -> int:
    """An enabled scale set whose GitHub listener is already open; returns its id."""
    created = create(api, org, enabled=True, **overrides)
    fake_clock.advance(LISTENER_DELAY.total_seconds())
    return created["id"]


def test_new_runner_is_pending_until_it_reports(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §3 / §8: running but runner_status pending until the runner calls back, then idle.
    scaleset = listening_scaleset(api, org, fake_clock, min_idle_runners=1)
    double.tick()
    double.tick()  # the provider reports the instance running
    [runner] = double.instances()
    assert (runner["status"], runner["runner_status"]) == ("running", "pending")
    double.tick()  # the runner reports through the callback URL
    assert double.instances()[0]["runner_status"] == "idle"
    # By hand: with auto_report off, only report() moves a runner.
    double.auto_report = False
    pending = double.add_runner(scaleset, runner_status="pending")
    double.tick()
    assert {i["name"]: i["runner_status"] for i in double.instances()}[pending] == "pending"
    double.report(pending)
    fetched = api.call("GET", f"/instances/{pending}").json()
    assert (fetched["status"], fetched["runner_status"]) == ("running", "idle")
    with pytest.raises(ValueError):
        double.report(pending)


def test_listener_opens_after_create_and_re_enable(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §2.8 / §8: the GitHub listener opens 4-4.5 s after create and after re-enable; a
    # disabled scale set has none.
    created = create(api, org, enabled=True)["id"]
    disabled = create(api, org, name="off")["id"]
    fake_clock.advance(4.4)
    assert not double.listening(created)
    fake_clock.advance(0.1)
    assert double.listening(created) and not double.listening(disabled)
    api.call("PUT", f"/scalesets/{created}", {"enabled": False})
    assert not double.listening(created)
    fake_clock.advance(60)
    api.call("PUT", f"/scalesets/{created}", {"enabled": True})
    fake_clock.advance(4.4)
    assert not double.listening(created)
    fake_clock.advance(0.1)
    assert double.listening(created) and not double.listening(disabled)
    assert not double.listening(999)
    # Without its GitHub scale set there is nothing to listen on: the clock starts at
    # registration.
    double.register_on_create = False
    late = create(api, org, name="late", enabled=True)["id"]
    fake_clock.advance(10)
    assert not double.listening(late)
    double.register(late)
    fake_clock.advance(4.5)
    assert double.listening(late)


def test_assigned_jobs_reach_only_a_listening_scale_set(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §2.8 / §8: GitHub's assigned-job count reaches GARM through the listener; before the
    # listener opens it waits on GitHub's side and nothing scales for it.
    created = create(api, org, enabled=True)["id"]
    assert double.assign_jobs(created, 2) is False
    assert double.queued_jobs(created) == 2
    double.tick()
    assert double.instances() == []
    assert "desired_runner_count" not in api.call("GET", f"/scalesets/{created}").json()
    fake_clock.advance(4.5)
    double.tick()  # the listener is open: the queued count arrives, runners follow
    assert double.queued_jobs(created) is None
    fetched = api.call("GET", f"/scalesets/{created}").json()
    assert fetched["desired_runner_count"] == 2
    assert fetched["updated_at"] == go_time(fake_clock.now)
    assert len(double.instances()) == 2
    assert double.assign_jobs(created, 3) is True  # heard at once while listening
    assert double.scalesets()[0]["desired_runner_count"] == 3
    api.call("PUT", f"/scalesets/{created}", {"enabled": False})
    assert double.assign_jobs(created, 0) is False
    assert double.scalesets()[0]["desired_runner_count"] == 3  # frozen while disabled


def undeletable_after_its_job(api: Api, org: str, double: GarmDouble, clock: FakeClock) -> str:
    """A runner whose job ended on a listening scale set and whose provider cannot delete
    its VM: GARM has it ``pending_delete`` and retries. Returns its name."""
    name = double.add_runner(listening_scaleset(api, org, clock))
    double.provider_cannot_delete(name)
    double.start_job(name)
    double.finish_job(name)
    return name


def retry_stamps(double: GarmDouble, clock: FakeClock, seconds: int) -> list[float]:
    """The gaps between the re-stamps of the one runner's row, a tick a second."""
    stamps = []
    for _ in range(seconds):
        clock.advance(1)
        double.tick()
        [row] = double.instances()
        assert row["status"] == "pending_delete"
        if not stamps or stamps[-1] != row["updated_at"]:
            stamps.append(row["updated_at"])
    return [
        (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()
        for a, b in itertools.pairwise(stamps)
    ]


def test_a_delete_its_provider_fails_is_retried_with_back_off_and_re_stamped(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # workers/provider/instance_manager.go: the instance worker's loop ticks every 5 s and
    # sleeps its back-off before each try (none, then 1 s doubling to 5 minutes); a tick
    # missed while it slept is taken at once. Each failure re-stamps the row: it never
    # looks older than its last try. Seen on GARM afda4e76: 6, 6, 7, 9, 16, 33, 64, 132,
    # 258, 300 s (the provider's own call adds a second or a few to the longer ones).
    undeletable_after_its_job(api, org, double, fake_clock)
    started = fake_clock.now
    gaps = retry_stamps(double, fake_clock, 4000)  # an hour and more, a tick a second
    assert gaps[:10] == [6, 6, 7, 9, 16, 32, 64, 128, 256, 300]
    assert set(gaps[10:]) == {300}
    assert fake_clock.now - started > timedelta(hours=1)


def test_a_force_asked_while_the_worker_sleeps_is_overwritten(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # The worker sleeps its back-off holding the runner's lock; woken, it tries the plain
    # delete it was about to, fails, and writes pending_delete over the force (with
    # GARM's ForceUpdateInstance). From the fifth try on it sleeps through every tick, so
    # a force is never carried out while the provider fails.
    name = undeletable_after_its_job(api, org, double, fake_clock)
    retry_stamps(double, fake_clock, 600)  # ten minutes: the back-off is at its cap
    for _ in range(3):
        api.call("DELETE", f"/instances/{name}", params={"forceRemove": "true"})
        [row] = double.instances()
        assert row["status"] == "pending_force_delete"
        for _ in range(301):
            fake_clock.advance(1)
            double.tick()
        [row] = double.instances()
        assert row["status"] == "pending_delete"


def test_a_force_read_before_the_worker_sleeps_is_carried_out(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # Early on the back-off is shorter than the worker's tick: a force asked between two
    # tries is read at the next tick, which deletes whatever the provider answers.
    name = undeletable_after_its_job(api, org, double, fake_clock)
    fake_clock.advance(1)
    double.tick()  # the first try fails: the worker's next call is 5 s later
    api.call("DELETE", f"/instances/{name}", params={"forceRemove": "true"})
    fake_clock.advance(5)
    double.tick()
    assert double.instances() == []


def test_a_force_before_the_first_try_is_carried_out(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # A runner forced out of running, its provider failing: the worker reads the force
    # before any delete was tried, and ignores the provider's error.
    name = double.add_runner(listening_scaleset(api, org, fake_clock))
    double.provider_cannot_delete(name)
    api.call("DELETE", f"/instances/{name}", params={"forceRemove": "true"})
    double.tick()
    assert double.instances() == []


def test_a_recovered_provider_deletes_at_its_next_retry_not_before(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # A provider that deletes again is not asked until GARM's retry is due: the row stays
    # pending_delete through the back-off already running, then goes.
    undeletable_after_its_job(api, org, double, fake_clock)
    for _ in range(40):  # tries at 0, 6, 12, 19 and 28 s fail: the next is due at 44 s
        fake_clock.advance(1)
        double.tick()
    double.providers_recover()
    for _ in range(3):
        fake_clock.advance(1)
        double.tick()
        assert [row["status"] for row in double.instances()] == ["pending_delete"]
    fake_clock.advance(1)
    double.tick()
    assert double.instances() == []


def test_job_finished_while_disabled_is_seen_at_consolidation(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §2.8 / §8: a finished job on a listening scale set is seen at once; on a disabled
    # one the row stays until GARM's 5-minute check against GitHub, the first 300 s after
    # GARM started; a later tick reaps it.
    scaleset = listening_scaleset(api, org, fake_clock)
    seen = double.add_runner(scaleset)
    double.start_job(seen)
    assert double.finish_job(seen) is True
    assert [(i["status"], i["runner_status"]) for i in double.instances()] == [
        ("pending_delete", "terminated")
    ]
    double.tick()
    unseen = double.add_runner(scaleset)
    double.start_job(unseen)
    api.call("PUT", f"/scalesets/{scaleset}", {"enabled": False})
    assert double.finish_job(unseen) is False
    fake_clock.now = T0 + timedelta(seconds=299)
    double.tick()
    [row] = double.instances()
    assert (row["status"], row["runner_status"]) == ("running", "active")
    fake_clock.now = T0 + timedelta(seconds=300)
    double.tick()
    [row] = double.instances()
    assert (row["status"], row["runner_status"]) == ("pending_delete", "active")
    assert row["updated_at"] == go_time(fake_clock.now)
    double.tick()
    assert double.instances() == []
    # The next check is 300 s after this one, not on every later tick.
    again = double.add_runner(scaleset)
    double.start_job(again)
    double.finish_job(again)
    fake_clock.now = T0 + timedelta(seconds=599)
    double.tick()
    assert double.instances()[0]["status"] == "running"
    fake_clock.now = T0 + timedelta(seconds=600)
    double.tick()
    assert double.instances()[0]["status"] == "pending_delete"


def test_removing_a_runner_whose_job_runs_is_refused(
    api: Api, org: str, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §3 / §8: GARM removes the runner from GitHub first (forced or not); GitHub refuses
    # while its job runs and GARM answers 400 with JobStillRunningException.
    scaleset = listening_scaleset(api, org, fake_clock)
    busy = double.add_runner(scaleset)
    double.start_job(busy)
    agent_id = api.call("GET", f"/instances/{busy}").json()["agent_id"]
    url = (
        "https://pipelines.actions.githubusercontent.com/_apis/distributedtask/pools/0/"
        f"agents/{agent_id}?api-version=6.0-preview"
    )
    for params in ({"forceRemove": "true"}, None):
        status, body = error(api.call("DELETE", f"/instances/{busy}", params=params))
        assert (status, body["error"]) == (400, "Bad Request")
        assert body["details"].startswith(
            f"error removing runner from github: request failed for {url}: "
            f'bad request while calling {url}: "{{\\"$id\\":\\"1\\"'
        )
        assert '\\"typeKey\\":\\"JobStillRunningException\\"' in body["details"]
    assert double.instances()[0]["status"] == "running" and double.removals == []
    # Once the job has ended GitHub no longer has the runner, and GARM ignores that.
    api.call("PUT", f"/scalesets/{scaleset}", {"enabled": False})
    double.finish_job(busy)
    assert api.call("DELETE", f"/instances/{busy}", params={"forceRemove": "1"}).ok
    assert double.instances()[0]["status"] == "pending_force_delete"
    # bypassGHUnauthorized makes GARM ignore any GitHub error but not-found.
    other = double.add_runner(scaleset)
    double.start_job(other)
    bypass = {"forceRemove": "true", "bypassGHUnauthorized": "true"}
    assert api.call("DELETE", f"/instances/{other}", params=bypass).status_code == 200


def test_pool_manager_is_starting_up_right_after_start(
    api: Api, double: GarmDouble, fake_clock: FakeClock
) -> None:
    # §5.2 / §8: for the first seconds the pool manager reports that it is starting up
    # (failure_reason set, no running key), then running.
    org = double.add_org("example-org")
    repo = double.add_repo("example", "repo")
    starting = b'"pool_manager_status":{"failure_reason":"pool manager is starting up"}'
    for path in (f"/organizations/{org}", f"/repositories/{repo}", "/organizations"):
        assert starting in api.call("GET", path).content
    fake_clock.advance(4.9)
    assert starting in api.call("GET", f"/organizations/{org}").content
    fake_clock.advance(0.1)
    for path in (f"/organizations/{org}", f"/repositories/{repo}", "/repositories"):
        assert b'"pool_manager_status":{"running":true}' in api.call("GET", path).content
    double.reset()  # a restarted GARM starts its pool managers again
    org = double.add_org("example-org")
    assert starting in Api(double).call("GET", f"/organizations/{org}").content


def test_tags_come_back_in_a_seeded_random_order(api: Api, org: str, double: GarmDouble) -> None:
    # §8: GARM's tag order is not stable; the double shuffles every answer with a seeded
    # generator, so a run can be replayed.
    labels = [f"label-{n}" for n in range(8)]

    def orders(client: Api, org_id: str) -> list[list[str]]:
        """Tag names of the create answer, then of three GET-by-id and list answers."""
        created = create(client, org_id, labels=labels)
        answers: list[dict[str, Any]] = [created]
        for _ in range(3):
            answers.append(client.call("GET", f"/scalesets/{created['id']}").json())
            answers.extend(client.call("GET", "/scalesets").json())
        return [[t["name"] for t in answer["tags"]] for answer in answers]

    first = orders(api, org)
    assert all(sorted(names) == labels for names in first)
    assert len({tuple(names) for names in first}) > 1
    # The ground-truth view keeps the order the labels were sent in.
    assert [t["name"] for t in double.scalesets()[0]["tags"]] == labels
    double.reset()
    double.add_provider("openstack")
    assert orders(Api(double), double.add_org("example-org")) == first
    with GarmDouble(seed=1) as other:
        other.add_provider("openstack")
        assert orders(Api(other), other.add_org("example-org")) != first


# --------------------------------------------------------------------------- §5.3, §5.4 GitHub


def pem(kind: str, body: bytes = b"key material, not a real key") -> str:
    """A PEM block of the given type (the double checks framing and type, not the DER)."""
    return f"-----BEGIN {kind}-----\n{base64.b64encode(body).decode()}\n-----END {kind}-----\n"


PKCS1_KEY = pem("RSA PRIVATE KEY")
PKCS8_KEY = pem("PRIVATE KEY")


def app_credential(name: str = "app-1", key: str = PKCS1_KEY, **app: Any) -> dict[str, Any]:
    """A POST /github/credentials body for a GitHub App credential."""
    fields = {
        "app_id": 11,
        "installation_id": 22,
        "private_key_bytes": base64.b64encode(key.encode()).decode(),
    }
    fields.update(app)
    return {
        "name": name,
        "description": "managed",
        "endpoint": "github.com",
        "auth_type": "app",
        "app": fields,
    }


def add_credential(api: Api, name: str = "app-1", **app: Any) -> dict[str, Any]:
    resp = api.call("POST", "/github/credentials", app_credential(name, **app))
    assert resp.status_code == 200, resp.text
    return resp.json()


def entity_body(name: str = "example-org", credentials: str = "app-1", **extra: Any) -> dict:
    return {"name": name, "credentials_name": credentials, "webhook_secret": "s3cret", **extra}


def add_entity(api: Api, route: str = "organizations", **body: Any) -> dict[str, Any]:
    resp = api.call("POST", f"/{route}", entity_body(**body))
    assert resp.status_code == 200, resp.text
    return resp.json()


def bad_request(details: str) -> tuple[int, dict[str, str]]:
    return 400, {"error": "Bad Request", "details": details}


def test_endpoints_list_builtin_github_com_and_null_when_empty(api: Api) -> None:
    # §5.4: github.com exists from startup; names match case-insensitively; delete is
    # 204 even when unknown; the list is null (not []) once none is left.
    listed = api.call("GET", "/github/endpoints")
    [endpoint] = listed.json()
    assert endpoint == {
        "name": "github.com",
        "description": "The github.com endpoint",
        "api_base_url": "https://api.github.com/",
        "upload_base_url": "https://uploads.github.com/",
        "base_url": "https://github.com",
        "created_at": go_time(T0),
        "updated_at": go_time(T0),
        "endpoint_type": "github",
    }
    assert api.call("GET", "/github/endpoints/GitHub.com/").json() == endpoint
    status, body = error(api.call("GET", "/github/endpoints/ghes.example.com"))
    assert (status, body["error"]) == (404, "Not Found")
    for _ in range(2):
        deleted = api.call("DELETE", "/github/endpoints/github.com")
        assert (deleted.status_code, deleted.content) == (204, b"")
        assert "Content-Type" not in deleted.headers
    assert api.call("GET", "/github/endpoints/").content == b"null\n"


def test_endpoint_in_use_cannot_be_deleted(api: Api) -> None:
    # §5.4: an endpoint used by credentials (or orgs/repos) is kept: 400.
    add_credential(api)
    status, body = error(api.call("DELETE", "/github/endpoints/github.com"))
    assert (status, body["error"]) == (400, "Bad Request")
    assert len(api.call("GET", "/github/endpoints").json()) == 1


def test_credentials_list_is_null_when_none(api: Api) -> None:
    # §5.3 / §7: GitHub credentials list null, not [], on both routes.
    for path in ("/github/credentials", "/github/credentials/", "/credentials", "/credentials/"):
        assert api.call("GET", path).content == b"null\n"


def test_credentials_response_has_hyphenated_auth_type_and_no_secrets(
    api: Api, double: GarmDouble
) -> None:
    # §5.3: `auth-type` (hyphen) in responses, `auth_type` in requests; secrets never sent
    # back; the full endpoint is embedded; key order follows params.ForgeCredentials.
    created = api.call("POST", "/github/credentials", app_credential())
    assert b'"auth-type":"app"' in created.content and b"auth_type" not in created.content
    assert b"private_key" not in created.content and b"app_id" not in created.content
    body = created.json()
    assert list(body) == [
        "id",
        "name",
        "description",
        "api_base_url",
        "upload_base_url",
        "base_url",
        "auth-type",
        "forge_type",
        "endpoint",
        "created_at",
        "updated_at",
    ]
    assert (body["id"], body["name"], body["forge_type"]) == (1, "app-1", "github")
    assert body["endpoint"]["name"] == "github.com"
    assert api.call("GET", "/github/credentials").json() == [body]
    assert api.call("GET", "/credentials").json() == [body]
    assert api.call("GET", "/github/credentials/1").json() == body
    # Ground truth keeps what was sent, for tests to assert on.
    [stored] = double.credentials()
    assert (stored["app_id"], stored["installation_id"]) == (11, 22)
    assert (stored["auth_type"], stored["private_key"]) == ("app", PKCS1_KEY)
    token = {"oauth2_token": "ghp_x"}
    pat = {"name": "pat-1", "endpoint": "github.com", "auth_type": "pat", "pat": token}
    assert api.call("POST", "/github/credentials", pat).json()["auth-type"] == "pat"
    assert double.credentials()[1]["oauth2_token"] == "ghp_x"


def test_pkcs8_app_key_is_500_with_empty_details(api: Api, double: GarmDouble) -> None:
    # §5.3: x509.ParsePKCS1PrivateKey fails with a plain error -> 500, details "".
    resp = api.call("POST", "/github/credentials", app_credential(key=PKCS8_KEY))
    assert error(resp) == (500, SERVER_ERROR)
    assert double.credentials() == []
    created = add_credential(api)
    update = {"app": app_credential(key=PKCS8_KEY)["app"]}
    assert error(api.call("PUT", f"/github/credentials/{created['id']}", update)) == (
        500,
        SERVER_ERROR,
    )
    assert double.credentials()[0]["private_key"] == PKCS1_KEY


@pytest.mark.parametrize(
    ("body", "details"),
    [
        (app_credential(app_id=0), "invalid app: missing app_id"),
        (app_credential(installation_id=None), "invalid app: missing installation_id"),
        (app_credential(private_key_bytes=""), "invalid app: missing private_key_bytes"),
        (app_credential(key="not a PEM"), "invalid app: invalid private_key_bytes"),
        (
            app_credential(
                key="-----BEGIN RSA PRIVATE KEY-----\n!!\n-----END RSA PRIVATE KEY-----"
            ),
            "invalid app: invalid private_key_bytes",
        ),
        ({**app_credential(), "name": ""}, "missing name"),
        ({**app_credential(), "endpoint": ""}, "missing endpoint"),
        ({**app_credential(), "auth_type": "oauth"}, "invalid auth_type"),
        ({**app_credential(), "auth_type": "pat"}, "missing oauth2_token"),
    ],
)
def test_credential_validation_is_400(api: Api, body: dict[str, Any], details: str) -> None:
    # §5.3: missing ids/key, undecodable PEM, missing name/endpoint, bad auth type -> 400.
    resp = api.call("POST", "/github/credentials", body)
    assert error(resp) == bad_request(f"failed to validate github credentials params: {details}")


def test_credential_key_must_be_base64_in_json(api: Api) -> None:
    # §0.1 / §5.3: private_key_bytes is []byte, so the JSON string must be base64.
    body = app_credential(private_key_bytes="-----BEGIN RSA PRIVATE KEY-----")
    assert error(api.call("POST", "/github/credentials", body)) == (400, INVALID_REQUEST)


def test_credential_unknown_endpoint_is_404_and_duplicate_name_409(api: Api) -> None:
    # §5.3: endpoint looked up by name (404 if missing); names unique case-insensitively.
    body = {**app_credential(), "endpoint": "ghes.example.com"}
    status, payload = error(api.call("POST", "/github/credentials", body))
    assert (status, payload["error"]) == (404, "Not Found")
    add_credential(api, "App-1")
    status, payload = error(api.call("POST", "/github/credentials", app_credential("app-1")))
    assert (status, payload["error"]) == (409, "Conflict")
    assert len(api.call("GET", "/github/credentials").json()) == 1


def test_credential_update_rules(api: Api, double: GarmDouble, fake_clock: FakeClock) -> None:
    # §5.3: pat and app together -> 400; the wrong kind for the stored type -> 400; a new
    # App key is stored; unknown id -> 404; a non-integer id -> 400.
    created = add_credential(api)
    path = f"/github/credentials/{created['id']}"
    new_key = pem("RSA PRIVATE KEY", b"rotated")
    app = app_credential(key=new_key, app_id=12)["app"]
    both = {"pat": {"oauth2_token": "x"}, "app": app}
    wrap = "failed to validate github credentials params: "
    assert error(api.call("PUT", path, both)) == bad_request(
        wrap + "cannot update both PAT and App"
    )
    status, payload = error(api.call("PUT", path, {"pat": {"oauth2_token": "x"}}))
    assert (status, payload["error"]) == (400, "Bad Request")
    assert payload["details"].endswith("cannot update PAT credentials for app: invalid request")
    fake_clock.advance(60)
    updated = api.call("PUT", path, {"description": "rotated", "app": app}).json()
    assert updated["description"] == "rotated" and updated["auth-type"] == "app"
    assert updated["updated_at"] == go_time(fake_clock.now) != created["updated_at"]
    [stored] = double.credentials()
    assert (stored["app_id"], stored["private_key"]) == (12, new_key)
    status, payload = error(api.call("PUT", "/github/credentials/99", {"description": "x"}))
    assert (status, payload["error"]) == (404, "Not Found")
    assert error(api.call("GET", "/github/credentials/abc")) == (400, INVALID_REQUEST)
    status, payload = error(api.call("GET", "/github/credentials/99"))
    assert (status, payload["error"]) == (404, "Not Found")


def test_credential_delete_is_204_and_refused_while_in_use(api: Api) -> None:
    # §0.2 / §5.3: delete answers 204 with no body (also when unknown); refused with 400
    # while an organization or repository uses the credential.
    unknown = api.call("DELETE", "/github/credentials/42")
    assert (unknown.status_code, unknown.content) == (204, b"")
    created = add_credential(api)
    org = add_entity(api)
    path = f"/github/credentials/{created['id']}"
    status, payload = error(api.call("DELETE", path))
    assert (status, payload["error"]) == (400, "Bad Request")
    assert payload["details"].endswith(
        "cannot delete credentials with organizations: invalid request"
    )
    assert api.call("DELETE", f"/organizations/{org['id']}").status_code == 200
    deleted = api.call("DELETE", path + "/")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert api.call("GET", "/github/credentials").content == b"null\n"


def test_credential_get_by_id_lists_its_users_shallowly(api: Api) -> None:
    # §5.3: GET-by-id adds the orgs/repos using the credential; GARM converts them without
    # their credentials or endpoint loaded (zero values) and without pools.
    created = add_credential(api)
    org = add_entity(api)
    detailed = api.call("GET", f"/github/credentials/{created['id']}").json()
    assert "repositories" not in detailed
    [embedded] = detailed["organizations"]
    assert (embedded["id"], embedded["credentials_name"]) == (org["id"], "app-1")
    zero = {"created_at": "0001-01-01T00:00:00Z", "updated_at": "0001-01-01T00:00:00Z"}
    assert embedded["endpoint"] == zero
    assert embedded["credentials"] == {"endpoint": zero, **zero}
    assert "organizations" not in api.call("GET", "/github/credentials").json()[0]


# --------------------------------------------------------------------------- §5.2 orgs, repos


def test_org_create_shape(api: Api, double: GarmDouble, fake_clock: FakeClock) -> None:
    # §5.2: response keys in params.Organization order; pool_balancing_type defaults to
    # roundrobin; agent_mode always present; the webhook secret never comes back.
    credential = add_credential(api)
    created = add_entity(api)
    assert list(created) == [
        "id",
        "name",
        "credentials_name",
        "credentials",
        "credentials_id",
        "pool_manager_status",
        "pool_balancing_type",
        "endpoint",
        "created_at",
        "updated_at",
        "agent_mode",
    ]
    assert (created["credentials_name"], created["credentials_id"]) == ("app-1", 1)
    assert created["credentials"] == credential
    assert created["pool_balancing_type"] == "roundrobin" and created["agent_mode"] is False
    assert created["pool_manager_status"] == {}  # read back before the pool manager starts
    assert b"s3cret" not in api.call("GET", "/organizations").content
    fake_clock.advance(5)  # past the pool manager's start-up (§8)
    fetched = api.call("GET", f"/organizations/{created['id']}/").json()
    assert fetched == {**created, "pool_manager_status": {"running": True}}
    [stored] = double.entities()
    assert (stored["webhook_secret"], stored["credentials_id"]) == ("s3cret", 1)


def test_repo_create_shape(api: Api) -> None:
    # §5.2: a Repository adds owner; its name is the bare repository name.
    add_credential(api)
    repo = add_entity(api, "repositories", name="repo", owner="example", pool_balancer_type="pack")
    assert (repo["owner"], repo["name"], repo["pool_balancing_type"]) == (
        "example",
        "repo",
        "pack",
    )
    assert list(repo)[:7] == [
        "id",
        "owner",
        "name",
        "credentials_name",
        "credentials_id",
        "credentials",
        "agent_mode",
    ]
    [listed] = api.call("GET", "/repositories", params={"owner": "example"}).json()
    assert listed["id"] == repo["id"]


@pytest.mark.parametrize("route", ["organizations", "repositories"])
def test_entity_with_unknown_credentials_is_400(api: Api, route: str) -> None:
    # §5.2: an unknown credentials_name is 400 "credentials X not defined", not 404.
    body = entity_body(credentials="nope", owner="example")
    assert error(api.call("POST", f"/{route}", body)) == bad_request(
        "credentials nope not defined"
    )
    assert api.call("GET", f"/{route}").json() == []


def test_entity_needs_a_webhook_secret(api: Api) -> None:
    # §5.2: webhook_secret is required even for scale-set-only use (MissingSecretError).
    add_credential(api)
    body = entity_body(webhook_secret="")
    assert error(api.call("POST", "/organizations", body)) == bad_request(
        "error validating params: missing secret"
    )


def test_entity_duplicates_are_409(api: Api) -> None:
    # §5.2: same name (and owner) on the same endpoint, case-insensitively -> 409.
    add_credential(api)
    add_entity(api, name="Example-Org")
    status, payload = error(api.call("POST", "/organizations", entity_body("example-org")))
    assert (status, payload) == (
        409,
        {"error": "Conflict", "details": "organization example-org already exists"},
    )
    add_entity(api, "repositories", name="repo", owner="example")
    dup = entity_body("REPO", owner="Example")
    status, payload = error(api.call("POST", "/repositories", dup))
    assert (status, payload["error"]) == (409, "Conflict")
    add_entity(api, "repositories", name="repo", owner="other")  # another owner is fine


@pytest.mark.parametrize("route", ["organizations", "repositories"])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_entity_ids_malformed_400_unknown_404(api: Api, route: str, method: str) -> None:
    # §2 / §5.2: UUID ids; malformed -> 400, unknown -> 404 (delete is not idempotent).
    body = {} if method == "PUT" else _NO_BODY
    status, payload = error(api.call(method, f"/{route}/nope", body))
    assert (status, payload["error"]) == (400, "Bad Request")
    unknown = f"/{route}/00000000-0000-4000-8000-000000000000"
    status, payload = error(api.call(method, unknown, body))
    assert (status, payload["error"]) == (404, "Not Found")


def test_entity_put_rebinds_credentials(api: Api, fake_clock: FakeClock) -> None:
    # §5.2: PUT credentials_name re-binds; an unchanged PUT writes nothing; an unknown
    # credential is 404 (the DB lookup's not-found); a bad balancer type is 400.
    add_credential(api, "app-1")
    second = add_credential(api, "app-2")
    org = add_entity(api)
    path = f"/organizations/{org['id']}"
    fake_clock.advance(60)
    same = api.call("PUT", path, {"credentials_name": "APP-1", "webhook_secret": "s3cret"}).json()
    assert same["updated_at"] == org["updated_at"]
    moved = api.call("PUT", path, {"credentials_name": "app-2", "agent_mode": True}).json()
    assert (moved["credentials_id"], moved["credentials_name"]) == (second["id"], "app-2")
    assert moved["agent_mode"] is True and moved["updated_at"] == go_time(fake_clock.now)
    status, payload = error(api.call("PUT", path, {"credentials_name": "nope"}))
    assert (status, payload["error"]) == (404, "Not Found")
    assert error(api.call("PUT", path, {"pool_balancer_type": "random"})) == bad_request(
        "invalid pool balancer type: random"
    )
    assert api.call("GET", path).json()["credentials_name"] == "app-2"


def test_add_org_can_bind_a_credential(api: Api, double: GarmDouble) -> None:
    # Control API: add_credential + add_org(credentials=...) show like a POSTed org.
    credential_id = double.add_credential("seeded", app_id=7)
    org_id = double.add_org("seeded-org", credentials="seeded")
    org = api.call("GET", f"/organizations/{org_id}").json()
    assert (org["credentials_id"], org["credentials_name"]) == (credential_id, "seeded")
    assert org["credentials"]["auth-type"] == "app"
    assert double.credentials()[0]["app_id"] == 7
    with pytest.raises(ValueError):
        double.add_repo("example", "repo", credentials="missing")


@pytest.mark.parametrize(
    ("route", "details"),
    [
        ("organizations", "organization has scale sets defined; delete them first"),
        ("repositories", "repo has scale sets defined; delete them first"),
    ],
)
def test_entity_delete_refused_while_a_scale_set_exists(
    api: Api, double: GarmDouble, route: str, details: str
) -> None:
    # §5.2: delete -> 400 while any scale set belongs to the entity; then 200, empty body.
    double.add_provider("openstack")
    add_credential(api)
    entity = add_entity(api, route, name="repo", owner="example")
    path = f"/{route}/{entity['id']}"
    created = api.call("POST", f"{path}/scalesets", spec()).json()
    assert error(api.call("DELETE", path)) == bad_request(details)
    assert api.call("DELETE", f"/scalesets/{created['id']}").status_code == 200
    deleted = api.call("DELETE", path)
    assert (deleted.status_code, deleted.content) == (200, b"")
    assert deleted.headers["Content-Type"] == "application/json"
    assert api.call("GET", path).status_code == 404
    assert double.entities() == []


# --------------------------------------------------------------------------- §1, §0.3 bootstrap


def test_uninitialised_double_bootstraps_like_garm_cli_init(fake_clock: FakeClock) -> None:
    # §1.1 / §1.2 / §1.4 / §0.3: first-run creates the admin (a second one is 409), login
    # works with the new user, and every non-controller route is 409 urls_required (before
    # auth) until both metadata_url and callback_url are set.
    with GarmDouble(clock=fake_clock, initialised=False, urls_set=False) as double:
        api = Api(double, login=False)
        user = {"username": "garm", "email": "garm@example.com", "password": "S3cure-enough!"}
        assert api.call("POST", "/first-run", user, auth=False).status_code == 200
        again = api.call("POST", "/first-run/", user, auth=False)
        assert error(again) == (409, {"error": "Conflict", "details": "already initialized"})
        login = {"username": "garm", "password": "S3cure-enough!"}
        api.token = api.call("POST", "/auth/login", login, auth=False).json()["token"]
        urls_required = (
            409,
            {
                "error": "urls_required",
                "details": "Missing required URLs. "
                "Make sure you update the metadata and callback URLs",
            },
        )
        gated = [
            ("GET", "/github/credentials", _NO_BODY),
            ("POST", "/github/credentials", app_credential()),
            ("GET", "/github/endpoints", _NO_BODY),
            ("POST", "/organizations", entity_body()),
            ("GET", "/scalesets", _NO_BODY),
        ]
        for method, path, body in gated:
            assert error(api.call(method, path, body)) == urls_required
            assert error(api.call(method, path, body, auth=False)) == urls_required
        base = "https://garm.example.com"
        api.call("PUT", "/controller", {"metadata_url": f"{base}/api/v1/metadata"})
        assert error(api.call("GET", "/github/credentials")) == urls_required
        api.call("PUT", "/controller", {"callback_url": f"{base}/api/v1/callbacks"})
        assert api.call("GET", "/github/credentials").content == b"null\n"
        assert error(api.call("GET", "/github/credentials", auth=False)) == (401, AUTH_FAILED)
        stored = double.controller()
        assert stored["metadata_url"] == f"{base}/api/v1/metadata"
        assert stored["callback_url"] == f"{base}/api/v1/callbacks"
        assert stored["agent_url"] == "" and stored["webhook_url"] == ""
        assert stored["controller_id"] == api.call("GET", "/controller").json()["controller_id"]
        assert double.unexpected == []

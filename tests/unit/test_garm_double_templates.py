"""Pin the GARM double's runner install templates to docs/reference/garm-api.md §4.

Templates are state in the double, as in GARM: the four built-in system templates exist
from the start, clients create, edit, delete and restore them, and scale sets name one.
A client that manages templates is only as right as its handling of GARM's answers here
(``data`` base64 in single reads but ``null`` in the list, an idempotent delete, a 400
while a scale set uses the template), so these tests talk to the double over real HTTP and
hold it to the facts GARM's source gives (runner/templates.go, database/sql/templates.go,
apiserver/controllers/templates.go, internal/templates/templates.go).
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any

import pytest
import requests

from tests.clock import FakeClock
from tests.garm_double import GITHUB_LINUX_TEMPLATE, GarmDouble, go_time

VALID = "#!/bin/bash\necho {{ .RunnerName }}\n{{- if .UseJITConfig }}\necho jit\n{{- end }}\n"
SYSTEM = [
    (
        1,
        "github_windows",
        "Default Windows runner install template for GitHub",
        "windows",
        "github",
    ),
    (2, "github_linux", "Default Linux runner install template for GitHub", "linux", "github"),
    (3, "gitea_linux", "Default Linux runner install template for Gitea", "linux", "gitea"),
    (4, "gitea_windows", "Default Windows runner install template for Gitea", "windows", "gitea"),
]
TEMPLATE_KEYS = [
    "id",
    "created_at",
    "updated_at",
    "name",
    "description",
    "os_type",
    "forge_type",
    "data",
    "owner_id",
]
IN_USE = (
    "failed to delete template: failed to delete template: "
    "cannot delete template while in use by pools or scale sets"
)


class Client:
    """Raw calls to the double as its admin (one login per client)."""

    def __init__(self, garm: GarmDouble):
        self.base = garm.url + "/api/v1"
        self.session = requests.Session()
        login = self.session.post(
            self.base + "/auth/login",
            json={"username": garm.username, "password": garm.password},
            timeout=5,
        )
        self.headers = {"Authorization": f"Bearer {login.json()['token']}"}

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        auth: bool = True,
    ) -> requests.Response:
        return self.session.request(
            method,
            self.base + path,
            data=None if body is None else json.dumps(body),
            params=params,
            headers=self.headers if auth else {},
            timeout=5,
        )

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        resp = self.call(method, path, body, **kwargs)
        assert resp.status_code == 200, resp.text
        return resp.json() if resp.content else None

    def create(self, name: str = "mine", data: str = VALID, **overrides: Any) -> dict[str, Any]:
        return self.ok("POST", "/templates", template_body(name, data, **overrides))


def template_body(name: str = "mine", data: str = VALID, **overrides: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "description": "my template",
        "data": b64(data),
        "os_type": "linux",
        "forge_type": "github",
    }
    body.update(overrides)
    return body


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(value: str) -> str:
    return base64.b64decode(value).decode()


def error(resp: requests.Response) -> tuple[int, dict[str, Any]]:
    assert resp.headers["Content-Type"] == "application/json"
    return resp.status_code, resp.json()


def bad_request(details: str) -> tuple[int, dict[str, str]]:
    return 400, {"error": "Bad Request", "details": details}


def names(rows: list[dict[str, Any]]) -> list[str]:
    return [row["name"] for row in rows]


@pytest.fixture
def api(garm: GarmDouble) -> Client:
    return Client(garm)


@pytest.fixture
def org(garm: GarmDouble) -> str:
    garm.add_provider("openstack")
    return garm.add_org("example-org")


def scaleset(api: Client, org: str, **overrides: Any) -> requests.Response:
    body = {
        "name": "ci-small",
        "provider_name": "openstack",
        "image": "ubuntu-24.04",
        "flavor": "m1.small",
        "os_type": "linux",
        "max_runners": 5,
        **overrides,
    }
    return api.call("POST", f"/organizations/{org}/scalesets", body)


# --------------------------------------------------------------------------- built-ins


def test_system_templates_exist_at_start_in_ensure_templates_order(
    api: Client, clock: FakeClock
) -> None:
    listed = api.call("GET", "/templates")
    assert listed.status_code == 200 and listed.content.endswith(b"]\n")
    rows = listed.json()
    assert [
        (r["id"], r["name"], r["description"], r["os_type"], r["forge_type"]) for r in rows
    ] == SYSTEM
    assert all(r["owner_id"] == "system" for r in rows)
    # data is []byte without omitempty, and the list query omits the column: null.
    assert listed.content.count(b'"data":null') == 4
    assert all(list(r) == TEMPLATE_KEYS for r in rows)
    assert all(r["created_at"] == r["updated_at"] == go_time(clock.now) for r in rows)


def test_single_read_carries_base64_data(api: Client) -> None:
    fetched = api.ok("GET", "/templates/2")
    assert list(fetched) == TEMPLATE_KEYS
    assert unb64(fetched["data"]) == GITHUB_LINUX_TEMPLATE
    assert fetched["owner_id"] == "system"


def test_github_linux_stand_in_has_garms_structure() -> None:
    lines = GITHUB_LINUX_TEMPLATE.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "set -e" in lines and "set -o pipefail" in lines
    assert 'CALLBACK_URL="{{ .CallbackURL }}"' in lines
    assert 'METADATA_URL="{{ .MetadataURL }}"' in lines
    assert 'RUN_HOME="/home/{{ .RunnerUsername }}/actions-runner"' in lines
    assert any(line.startswith("function sendStatus()") for line in lines)
    assert 'if [ ! -d "$RUN_HOME" ]; then' in lines
    anchor = lines.index('sendStatus "configuring runner"')
    assert lines.count('sendStatus "configuring runner"') == 1
    assert lines[anchor + 1] == "{{- if .UseJITConfig }}"
    assert "{{- end}}" in lines[anchor:]
    assert [line for line in lines if line][-1].startswith("success ")
    assert 40 <= len(lines) <= 60


def test_templates_helper_decodes_data(garm: GarmDouble) -> None:
    stored = {t["name"]: t for t in garm.templates()}
    assert stored["github_linux"]["data"] == GITHUB_LINUX_TEMPLATE
    assert stored["github_linux"]["id"] == 2 and stored["github_linux"]["owner_id"] == "system"
    assert all(t["data"] for t in stored.values())


def test_reset_brings_the_built_ins_back(garm: GarmDouble, api: Client) -> None:
    api.ok("DELETE", "/templates/2")
    api.create()
    garm.reset()
    assert [(t["id"], t["name"]) for t in garm.templates()] == [(i, n) for i, n, *_ in SYSTEM]


# --------------------------------------------------------------------------- create


def test_create_answers_the_template_with_base64_data(
    garm: GarmDouble, api: Client, clock: FakeClock
) -> None:
    clock.advance(timedelta(minutes=3))
    created = api.create("mine", VALID, forge_type="gitea")
    assert list(created) == TEMPLATE_KEYS
    assert created["id"] == 5
    assert (created["name"], created["description"]) == ("mine", "my template")
    assert (created["os_type"], created["forge_type"]) == ("linux", "gitea")
    assert unb64(created["data"]) == VALID
    # owner_id holds the logged-in user's name, not an id.
    assert created["owner_id"] == garm.username == "admin"
    assert created["created_at"] == created["updated_at"] == go_time(clock.now)
    assert api.ok("GET", "/templates/5") == created
    listed = api.ok("GET", "/templates")[-1]
    assert listed == {**created, "data": None}


def test_same_name_for_the_same_owner_conflicts(api: Client) -> None:
    api.create("mine")
    resp = api.call("POST", "/templates", template_body("mine", os_type="windows"))
    assert error(resp) == (
        409,
        {
            "error": "Conflict",
            "details": "failed to create template: a template name already exists with "
            "the specified name",
        },
    )
    # System templates have no user (NULL in the unique index): their names are free.
    assert api.create("github_linux")["owner_id"] == "admin"


@pytest.mark.parametrize(
    ("overrides", "details"),
    [
        ({"name": ""}, 'invalid create params "name cannot be empty"'),
        ({"data": ""}, 'invalid create params "template data is empty"'),
        ({"data": None}, 'invalid create params "template data is empty"'),
        ({"os_type": "macos"}, 'invalid create params "invalid OS type: \\"macos\\""'),
        ({"os_type": "Linux"}, 'invalid create params "invalid OS type: \\"Linux\\""'),
        ({"forge_type": "gitlab"}, 'invalid create params "invalid forge type: \\"gitlab\\""'),
        ({"forge_type": None}, 'invalid create params "invalid forge type: \\"\\""'),
    ],
)
def test_create_validates_its_params(api: Client, overrides: dict[str, Any], details: str) -> None:
    body = template_body()
    for key, value in overrides.items():
        if value is None:
            del body[key]
        else:
            body[key] = value
    assert error(api.call("POST", "/templates", body)) == bad_request(details)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ("{{ if .UseJITConfig }}\necho jit\n", "line 3: unexpected EOF"),
        ("echo {{ .RunnerName", "line 1: unclosed action"),
        ("echo {{ .RunnerName\n\n", "line 3: unclosed action started at :1"),
        ("echo {{ .RunnerName }\n", 'line 1: unexpected "}" in operand'),
        ("{{ .RunnerName {{ .RunnerGroup }}", 'line 1: unexpected "{" in operand'),
        ("{{ if .X }}a{{ end }}\n{{ end }}", "line 2: unexpected {{end}}"),
        ("{{ else }}", "line 1: unexpected {{else}}"),
        ("{{ if .X }}{{ else }}{{ else }}{{ end }}", "line 1: expected end; found {{else}}"),
        ("{{/* note", "line 1: unclosed comment"),
        ("{{ }}", "line 1: missing value for command"),
        ('{{ "open }}', "line 1: unterminated quoted string"),
        ("{{ shellquote .RunnerName }}", 'line 1: function "shellquote" not defined'),
    ],
)
def test_create_refuses_a_template_go_cannot_parse(api: Client, data: str, problem: str) -> None:
    resp = api.call("POST", "/templates", template_body(data=data))
    assert error(resp) == bad_request(f"failed to validate template: invalid template: {problem}")


@pytest.mark.parametrize(
    "data",
    [
        "no actions at all }} {",
        "{{- if .A -}} x {{- else if .B -}} y {{- else -}} z {{- end -}}",
        '{{ range $i, $l := .Labels }}{{ $i }}={{ printf "%q" $l }}{{ end }}',
        '{{/* a comment */}}{{ index .ExtraContext "key" }}{{ "}}" }}',
        '{{ define "x" }}{{ .Y }}{{ end }}{{ template "x" . }}',
    ],
)
def test_create_accepts_templates_go_parses(api: Client, data: str) -> None:
    assert unb64(api.create(data=data)["data"]) == data


def test_the_stand_ins_are_valid_templates(api: Client) -> None:
    for row in api.ok("GET", "/templates"):
        fetched = api.ok("GET", f"/templates/{row['id']}")
        api.create(f"copy-{row['name']}", unb64(fetched["data"]), os_type=row["os_type"])


def test_undecodable_body_is_invalid_request(api: Client) -> None:
    resp = api.call("POST", "/templates", {**template_body(), "data": "not base64!"})
    assert error(resp) == bad_request("invalid request")


# --------------------------------------------------------------------------- get, ids


def test_unknown_and_malformed_ids(api: Client) -> None:
    assert error(api.call("GET", "/templates/99")) == (
        404,
        {
            "error": "Not Found",
            "details": "failed to get template: failed to get template: not found",
        },
    )
    for raw in ("abc", "-1", "18446744073709551616"):
        assert error(api.call("GET", f"/templates/{raw}")) == bad_request(
            f'invalid value for "templateID": "{raw}"'
        )
    # GET /templates/restore is the {templateID} route: restore is POST only.
    assert error(api.call("GET", "/templates/restore")) == bad_request(
        'invalid value for "templateID": "restore"'
    )


# --------------------------------------------------------------------------- update


def test_update_changes_only_the_keys_sent(api: Client, clock: FakeClock) -> None:
    created = api.create()
    clock.advance(timedelta(minutes=1))
    renamed = api.ok("PUT", f"/templates/{created['id']}", {"name": "renamed"})
    assert renamed == {**created, "name": "renamed", "updated_at": go_time(clock.now)}
    clock.advance(timedelta(minutes=1))
    new_data = VALID + "echo more\n"
    edited = api.ok(
        "PUT",
        f"/templates/{created['id']}",
        {"description": "", "data": b64(new_data), "os_type": "windows", "forge_type": "gitea"},
    )
    # os_type and forge_type are not in UpdateTemplateParams: ignored.
    assert (edited["os_type"], edited["forge_type"]) == ("linux", "github")
    assert (edited["name"], edited["description"]) == ("renamed", "")
    assert unb64(edited["data"]) == new_data
    assert edited["updated_at"] == go_time(clock.now)
    assert edited["created_at"] == created["created_at"]


def test_update_writes_nothing_without_keys_but_any_key_sent_counts(
    api: Client, clock: FakeClock
) -> None:
    created = api.create()
    clock.advance(timedelta(minutes=1))
    assert api.ok("PUT", f"/templates/{created['id']}", {"os_type": "windows"}) == created
    assert api.ok("PUT", f"/templates/{created['id']}", {"data": ""}) == created
    # GARM saves the row whenever name or description is sent, even unchanged.
    same = api.ok("PUT", f"/templates/{created['id']}", {"name": "mine"})
    assert same == {**created, "updated_at": go_time(clock.now)}


def test_update_refusals(api: Client) -> None:
    created = api.create()
    path = f"/templates/{created['id']}"
    assert error(api.call("PUT", path, {"name": ""})) == bad_request(
        'invalid update params: "name cannot be empty"'
    )
    assert error(api.call("PUT", path, {"data": b64("{{ end }}")})) == bad_request(
        "failed to validate template: invalid template: line 1: unexpected {{end}}"
    )
    assert error(api.call("PUT", "/templates/99", {"name": "x"})) == (
        404,
        {
            "error": "Not Found",
            "details": "failed to update template: failed to update template: "
            "failed to get template: not found",
        },
    )
    # Validation comes before the lookup.
    assert error(api.call("PUT", "/templates/99", {"name": ""}))[0] == 400
    assert api.ok("GET", path) == created


def test_rename_onto_an_own_template_is_a_server_error(api: Client) -> None:
    api.create("one")
    two = api.create("two")
    resp = api.call("PUT", f"/templates/{two['id']}", {"name": "one"})
    assert error(resp) == (500, {"error": "Server error", "details": ""})
    assert api.ok("GET", f"/templates/{two['id']}")["name"] == "two"


def test_system_templates_may_be_edited(garm: GarmDouble, api: Client) -> None:
    edited = api.ok("PUT", "/templates/2", {"data": b64(VALID)})
    assert unb64(edited["data"]) == VALID and edited["owner_id"] == "system"
    assert garm.templates()[1]["data"] == VALID


# --------------------------------------------------------------------------- delete


def test_delete_is_idempotent_and_answers_an_empty_body(api: Client) -> None:
    created = api.create()
    for _ in range(2):
        resp = api.call("DELETE", f"/templates/{created['id']}")
        assert (resp.status_code, resp.content) == (200, b"")
        assert resp.headers["Content-Type"] == "application/json"
    assert api.call("GET", f"/templates/{created['id']}").status_code == 404
    assert api.call("DELETE", "/templates/12345").status_code == 200


def test_ids_are_never_reused(api: Client) -> None:
    # GARM's template ids come from an AUTOINCREMENT sequence.
    first = api.create("first")
    api.ok("DELETE", f"/templates/{first['id']}")
    assert api.create("second")["id"] == first["id"] + 1


def test_admin_may_delete_a_system_template(api: Client) -> None:
    assert api.call("DELETE", "/templates/1").status_code == 200
    assert names(api.ok("GET", "/templates")) == ["github_linux", "gitea_linux", "gitea_windows"]


def test_delete_refused_while_a_scaleset_uses_it(api: Client, org: str) -> None:
    created = api.create()
    made = scaleset(api, org, template_id=created["id"]).json()
    path = f"/templates/{created['id']}"
    assert error(api.call("DELETE", path)) == bad_request(IN_USE)
    # The default template picked for a scale set is in use as well.
    other = scaleset(api, org, name="ci-default").json()
    assert other["template_id"] == 2
    assert error(api.call("DELETE", "/templates/2")) == bad_request(IN_USE)
    assert api.call("DELETE", f"/scalesets/{made['id']}").status_code == 200
    assert api.call("DELETE", path).status_code == 200
    assert api.call("GET", path).status_code == 404


# --------------------------------------------------------------------------- scale sets


def test_scaleset_create_checks_template_id(api: Client, org: str) -> None:
    wrap = "failed to find suitable template: "
    assert error(scaleset(api, org, template_id=99)) == (
        404,
        {
            "error": "Not Found",
            "details": wrap + "failed to get template: failed to get template: not found",
        },
    )
    assert error(scaleset(api, org, template_id=1)) == bad_request(
        wrap + "selected template OS type (windows) and pool OS type (linux) do not match"
    )
    assert error(scaleset(api, org, template_id=3)) == bad_request(
        wrap + "selected template forge type (gitea) and pool forge type (github) do not match"
    )
    gitea_linux = api.create("mine-gitea", forge_type="gitea")
    assert error(scaleset(api, org, template_id=gitea_linux["id"]))[0] == 400


def test_scaleset_names_a_user_template(api: Client, org: str) -> None:
    mine = api.create("mine")
    made = scaleset(api, org, template_id=mine["id"]).json()
    assert (made["template_id"], made["template_name"]) == (mine["id"], "mine")
    api.ok("PUT", f"/templates/{mine['id']}", {"name": "renamed"})
    # template_name is read from the template table on every GET-by-id ...
    fetched = api.ok("GET", f"/scalesets/{made['id']}")
    assert (fetched["template_id"], fetched["template_name"]) == (mine["id"], "renamed")
    # ... and lists do not load it.
    listed = api.ok("GET", "/scalesets")[0]
    assert listed["template_id"] == mine["id"] and "template_name" not in listed


def test_scaleset_update_checks_template_id_without_bumping_generation(
    api: Client, org: str
) -> None:
    made = scaleset(api, org).json()
    path = f"/scalesets/{made['id']}"
    assert error(api.call("PUT", path, {"template_id": 99}))[0] == 404
    assert error(api.call("PUT", path, {"template_id": 1})) == bad_request(
        "failed to find suitable template: selected template OS type (windows) and pool OS "
        "type (linux) do not match"
    )
    # Checked against the os_type sent in the same body.
    assert api.ok("PUT", path, {"template_id": 1, "os_type": "windows"})["template_id"] == 1
    mine = api.create("mine")
    updated = api.ok("PUT", path, {"template_id": mine["id"], "os_type": "linux"})
    assert (updated["template_id"], updated["template_name"]) == (mine["id"], "mine")
    generation = updated["generation"]
    again = api.ok("PUT", path, {"template_id": 2})
    assert (again["template_id"], again["template_name"]) == (2, "github_linux")
    assert again["generation"] == generation


def test_default_pick_needs_a_system_template(api: Client, org: str) -> None:
    api.create("mine")  # linux/github but owned by admin: never a default
    api.ok("DELETE", "/templates/2")
    assert error(scaleset(api, org)) == bad_request(
        "failed to find suitable template: no template ID supplied and no default template "
        "can be found"
    )
    api.ok("POST", "/templates/restore", {"forge": "github", "os_type": "linux"})
    made = scaleset(api, org).json()
    assert (made["template_id"], made["template_name"]) == (6, "github_linux")


# --------------------------------------------------------------------------- restore


def test_restore_overwrites_an_edited_system_template(
    garm: GarmDouble, api: Client, clock: FakeClock
) -> None:
    api.ok("PUT", "/templates/2", {"name": "edited", "description": "mine", "data": b64(VALID)})
    clock.advance(timedelta(minutes=1))
    resp = api.call("POST", "/templates/restore", {"forge": "github", "os_type": "linux"})
    assert (resp.status_code, resp.content) == (200, b"")
    assert resp.headers["Content-Type"] == "application/json"
    restored = api.ok("GET", "/templates/2")
    assert restored["name"] == "github_linux"  # renamed back
    assert restored["description"] == "mine"  # restore leaves the description alone
    assert unb64(restored["data"]) == GITHUB_LINUX_TEMPLATE
    assert restored["updated_at"] == go_time(clock.now)
    assert len(garm.templates()) == 4


def test_restore_all_recreates_deleted_system_templates(api: Client) -> None:
    api.ok("DELETE", "/templates/4")
    api.ok("DELETE", "/templates/2")
    api.create("gitea_windows", os_type="windows", forge_type="gitea")  # id 5, not system
    api.ok("POST", "/templates/restore", {"restore_all": True, "forge": "x", "os_type": "y"})
    rows = api.ok("GET", "/templates")
    # Created again with fresh ids (never reused), in restore's order: linux then
    # windows, gitea before github; restore's own description.
    assert [(r["id"], r["name"], r["owner_id"]) for r in rows] == [
        (1, "github_windows", "system"),
        (3, "gitea_linux", "system"),
        (5, "gitea_windows", "admin"),
        (6, "github_linux", "system"),
        (7, "gitea_windows", "system"),
    ]
    assert rows[3]["description"] == "Default template for github runners on linux"
    assert rows[4]["description"] == "Default template for gitea runners on windows"
    assert unb64(api.ok("GET", "/templates/6")["data"]) == GITHUB_LINUX_TEMPLATE


@pytest.mark.parametrize(
    ("body", "details"),
    [
        (
            {"forge": "gitlab", "os_type": "linux"},
            "failed to get template content for gitlab/linux: "
            'could not find template for forge type: "gitlab"',
        ),
        (
            {"forge": "github", "os_type": "macos"},
            "failed to get template content for github/macos: "
            'could not find template for forge github and OS type: "macos"',
        ),
        (
            {},
            'failed to get template content for /: could not find template for forge type: ""',
        ),
    ],
)
def test_restore_of_an_unknown_pair_is_not_found(
    api: Client, body: dict[str, Any], details: str
) -> None:
    resp = api.call("POST", "/templates/restore", body)
    assert error(resp) == (404, {"error": "Not Found", "details": details})


# --------------------------------------------------------------------------- list filters


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"osType": "windows"}, ["github_windows", "gitea_windows"]),
        ({"forgeType": "gitea"}, ["gitea_linux", "gitea_windows", "mine"]),
        ({"partialName": "LINUX"}, ["github_linux", "gitea_linux"]),
        ({"osType": "linux", "forgeType": "gitea"}, ["gitea_linux", "mine"]),
        ({"partialName": "git_a"}, ["gitea_linux", "gitea_windows"]),  # LIKE: _ is any char
        ({"partialName": "ne"}, ["mine"]),
        ({"osType": "Linux"}, []),  # exact match, case and all
        ({"osType": "", "partialName": ""}, [n for _, n, *_ in SYSTEM] + ["mine"]),
    ],
)
def test_list_filters(api: Client, params: dict[str, str], expected: list[str]) -> None:
    api.create("mine", forge_type="gitea")
    assert names(api.ok("GET", "/templates", params=params)) == expected


# --------------------------------------------------------------------------- plumbing


def test_routes_are_gated_recorded_and_faultable(garm: GarmDouble, api: Client) -> None:
    resp = api.call("GET", "/templates", auth=False)
    assert error(resp) == (401, {"error": "Authentication failed", "details": ""})
    assert api.call("GET", "/templates/").status_code == 200  # trailing slash too
    created = api.create()
    api.ok("PUT", f"/templates/{created['id']}", {"name": "x"})
    api.ok("DELETE", f"/templates/{created['id']}")
    api.ok("POST", "/templates/restore/", {"restore_all": True})
    api.ok("GET", "/templates", params={"osType": "linux"})
    assert [(w.method, w.path) for w in garm.writes()] == [
        ("POST", "/templates"),
        ("PUT", f"/templates/{created['id']}"),
        ("DELETE", f"/templates/{created['id']}"),
        ("POST", "/templates/restore/"),
    ]
    assert garm.writes()[0].body == template_body()
    assert garm.requests[-1].query == {"osType": "linux"}
    garm.inject("POST", r"/templates", status=503, error="Unavailable", details="later")
    assert error(api.call("POST", "/templates", template_body())) == (
        503,
        {"error": "Unavailable", "details": "later"},
    )
    assert garm.requests[-1].status == 503
    assert api.create()["name"] == "mine"  # the fault was used up
    garm.inject("GET", r"/templates/\d+", drop=True)
    with pytest.raises(requests.ConnectionError):
        api.call("GET", "/templates/2")


def test_add_template_helper(garm: GarmDouble, api: Client) -> None:
    mine = garm.add_template("seeded", VALID, description="from a test")
    system = garm.add_template("extra", VALID, os_type="windows", system=True)
    assert (mine, system) == (5, 6)
    fetched = api.ok("GET", f"/templates/{mine}")
    assert (fetched["name"], fetched["owner_id"], unb64(fetched["data"])) == (
        "seeded",
        "admin",
        VALID,
    )
    assert api.ok("GET", f"/templates/{system}")["owner_id"] == "system"

"""A loopback HTTP test double of GARM's REST API: the routes a scale-set client uses.

Why a real HTTP server rather than a mocked client: the bugs a GARM client has live in the
wire format — keys Go's ``omitempty`` leaves out, ``null`` where a list was expected, status
codes that differ from route to route, gates answered before authentication. So this double
reproduces GARM's bytes (key order of the Go structs, compacted ``extra_specs``, HTML-escaped
strings, RFC 3339 times, a trailing newline) and its status codes, as read in GARM's Go
source and written down in ``docs/reference/garm-api.md``. Every request is recorded and
faults can be injected so tests can assert on what the client sent and how it copes; what
GARM keeps but never returns (credential secrets, webhook secrets, stored controller
settings) is readable through ``credentials()``, ``entities()`` and ``controller()``.
Runner install templates are state too: the four built-in system templates GARM creates
on an empty database (short stand-ins of the double's own, ``GITHUB_LINUX_TEMPLATE`` among
them) and whatever a client creates, edits, deletes or restores, readable through
``templates()``.

Metrics as GARM serves them with ``[metrics] enable`` and auth on: ``GET /api/v1/metrics-token``
hands an admin a JWT (HS256 over the double's ``jwt_secret``, claims in GARM's order, ``exp``
``jwt_ttl`` after now on the double's clock), and ``/metrics``, outside ``/api/v1``, answers
a short Prometheus text only to a request bearing a valid one (401 otherwise, as GARM's
metrics middleware does). ``set_jwt_secret`` plays GARM restarted with a new secret.

Beyond the wire, the double plays the timing a client meets on a real GARM (observed on
GARM afda4e76, docs/reference/garm-api.md §8), on the double's clock (``clock=``) and its ``tick``:

- a scale set's GitHub listener (message session) opens ``LISTENER_DELAY`` (4.5 s) after
  the create or re-enable returns; a disabled scale set has none. GitHub's job messages
  (``assign_jobs``, job completions) reach only a listening scale set. A create is at
  once by default; ``create_takes`` (a timedelta) is how long GARM takes over it instead
  (its calls to GitHub, §2.3), the clock moved on by that much before the row is stamped
  and the create returns (it needs a clock the double can move, ``tests.clock.FakeClock``);
- a new runner is ``running``/``pending`` until the runner itself reports through GARM's
  callback URL (a later tick, or ``report``), only then ``idle``. By default a tick makes
  the row (``creating``), the next one has the provider report it running and the one
  after that has it report idle, so how long a runner boots is how often the caller ticks.
  ``runner_boot`` (a timedelta, off by default) paces it on the clock instead: a runner
  reports idle only on a tick at least that long after its row was made, whatever the
  ticks' rate (on GARM afda4e76, §8: the row about 10 s after the scale set's create, the
  provider reporting it running about 5 s later, and the runner itself some 13 s more);
- a runner on its way out (``pending_delete``, ``pending_force_delete``, ``deleting``)
  is reaped, its row gone, on the next tick by default. ``runner_delete`` (a timedelta,
  off by default) is how long its provider takes to delete it instead: the row goes on a
  tick at least that long after its last change (``updated_at``, stamped as it took the
  lane), so a tick every second does not make runners vanish faster than GARM does (§8:
  both counts set to 0, the idle runner gone in 4-5 s). A provider that fails the delete
  (``provider_cannot_delete``) is retried by the runner's instance worker on GARM's
  back-off (1 s doubling to 5 minutes), and a force-removal asked while that worker
  sleeps is overwritten by its next try's ``pending_delete``: never carried out;
- a job that finishes while its scale set is not listening goes unseen: the row stays as
  it was until GARM's consolidation against GitHub, every ``CONSOLIDATION_INTERVAL``
  (5 min), moves it to ``pending_delete``;
- removing a runner whose job still runs is refused by GitHub (400,
  ``JobStillRunningException``);
- organizations and repositories read ``pool manager is starting up`` for
  ``POOL_MANAGER_STARTUP`` (5 s) after their pool manager starts;
- scale-set ``tags`` come back in a seeded random order (``seed=``), since GARM's order
  is not stable.

Two GARM processes on one database (``add_process``, §8.1): the double's state is the
database; each process (``GarmProcess``) has its own memory of it, as each GARM does
(its database watcher is in-process): the scale sets it runs workers for, with the
worker's own copy of their settings, and a runner cache filled when it starts and by its
own writes only (its creates, the reports its callback URL takes, the job messages its
session hears, the deletes its port takes). ``tick`` runs each running process's workers
from that memory. So a process scales a scale set with runners the other does not know;
every ``CONSOLIDATION_INTERVAL`` after its start each one deletes the provider VMs it
does not know, a busy one included (``provider_deletions``, ``lost_jobs``), leaving the
rows as ghosts (``ghosts``) that only a process knowing them marks; GitHub grants one
message session per scale set and the other process's listener retries every
``LISTENER_RETRY``, one registration-token call each
(``GarmProcess.registration_token_calls``). A process (re)started alone loads every row
and converges. Each serves the API on its own port (``GarmProcess.url``). With one
process, the default, nothing of this shows.

HTTPS as GARM serves it with ``[apiserver] use_tls`` (``tls=(certificate_file, key_file)``):
every port takes TLS only, with the leaf and chain of the certificate file, loaded as
GARM loads them at start (``load_cert_chain`` refuses a key that is not the leaf's, as
Go's ``tls.LoadX509KeyPair`` does); ``url`` and the default controller URLs are
``https://``. A client that refuses the certificate never sends a request, so none is
recorded; its refusal (the TLS alert it sent) is in ``tls_failures``. GARM's metadata
routes (``/api/v1/metadata/...``) are there so a runner's TLS can be tried: they want an
instance token, which the double never issues, so they answer 401 as GARM does without
one (``auth/instance_middleware.go``).

Run it standalone with ``python -m tests.garm_double --port 9997 --seed``.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import contextlib
import hashlib
import hmac
import json
import posixpath
import random
import re
import secrets
import socket
import ssl
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import Message
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

API_PREFIX = "/api/v1"
DEFAULT_PASSWORD = "Garm-D0uble-Passw0rd!"  # strong enough for GARM's first-run rules

# Instance statuses on GARM's deletion lane (internal/errors InstanceIsBeingDeleted).
_DELETION_LANE = frozenset({"pending_delete", "pending_force_delete", "deleting", "deleted"})
# Rows the provider worker reaps on a tick of the double.
_REAPED_BY_TICK = frozenset({"pending_delete", "pending_force_delete", "deleting"})
# Statuses DELETE /instances/{name} accepts, in the order runner/runner.go names them.
_DELETABLE = ("running", "error", "pending_force_delete", "pending_delete")
_ZERO_TIME = "0001-01-01T00:00:00Z"
_GO_VERBS = ("GET", "POST", "PUT", "DELETE")  # methods GARM's catch-all 404 route accepts
_EMAIL_RE = re.compile(
    r"[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*"
)
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_CREDENTIALS_NAME = "github-credentials"
_ENTITY_KINDS = {"organizations": "organization", "repositories": "repository"}
_ACTIONS_SERVICE = "https://pipelines.actions.githubusercontent.com"
_GITHUB_ACTIONS_URL = _ACTIONS_SERVICE + "/_apis/runtime/runnerscalesets"
# GitHub's Actions service refuses to remove a runner whose job still runs. GARM passes
# the refusal on (util/github/scalesets/client.go Do: a 400 becomes a BadRequestError
# quoting the body). The exception type is observed; the message and the other keys are
# the Actions service's usual exception body, inferred, not observed.
_JOB_STILL_RUNNING = (
    '{"$id":"1","innerException":null,'
    '"message":"The runner cannot be removed while it is running a job.",'
    '"typeName":"GitHub.DistributedTask.WebApi.JobStillRunningException, '
    'GitHub.DistributedTask.WebApi","typeKey":"JobStillRunningException",'
    '"errorCode":0,"eventId":3000}'
)

# Timings observed on a running GARM (docs/reference/garm-api.md §8); the double plays
# them on its clock so tests can step over them deterministically.
LISTENER_DELAY = timedelta(seconds=4.5)  # create / re-enable -> GitHub message session open
CONSOLIDATION_INTERVAL = timedelta(minutes=5)  # GARM's periodic check against GitHub
POOL_MANAGER_STARTUP = timedelta(seconds=5)  # "pool manager is starting up" window
# A runner delete its provider fails is retried by the runner's instance worker
# (workers/provider/instance_manager.go): its loop ticks every ``INSTANCE_WORKER_TICK``
# and, for a runner in ``pending_delete``, sleeps its back-off first (none before the first
# try, then 1 s, doubled after each failure, at most 5 minutes: ``incrementBackOff``),
# holding the runner's lock, then tries a plain delete and writes ``pending_delete`` back,
# re-stamping the row. A tick missed while it slept is taken at once, so the tries are 6,
# 6, 7, 9, 16, 32 ... 300 s apart (6, 6, 7, 9, 16, 33, 64, 132, 258, 300 s seen on GARM
# afda4e76, docs/reference/garm-api.md §8.1).
INSTANCE_WORKER_TICK = timedelta(seconds=5)
DELETE_RETRY_FIRST = timedelta(seconds=1)
DELETE_RETRY_LONGEST = timedelta(minutes=5)
# GARM processes on one database (``add_process``). A process that starts opens the GitHub
# sessions of the scale sets it loaded about 2 s later (seen, §8.1). A listener whose
# session GitHub refuses (another process holds it) is started again 2 s later, for ever
# (workers/scaleset/scaleset.go keepListenerAlive sleeps 2 s after a failed Start).
STARTUP_LISTENER_DELAY = timedelta(seconds=2)
LISTENER_RETRY = timedelta(seconds=2)
FIRST_PROCESS = "first"  # the name of the GARM process the double has always played

# Runner install templates (docs/reference/garm-api.md §4). GARM embeds long scripts; the
# double keeps short stand-ins of its own that have the same shape and use the same Go
# template fields, so a client that edits or renders a template meets the same structure.
GITHUB_LINUX_TEMPLATE = r"""#!/bin/bash
# GARM double: a short stand-in for GARM's built-in GitHub Linux install template.

set -e
set -o pipefail

CALLBACK_URL="{{ .CallbackURL }}"
METADATA_URL="{{ .MetadataURL }}"
BEARER_TOKEN="{{ .CallbackToken }}"
RUN_HOME="/home/{{ .RunnerUsername }}/actions-runner"

function report() {
    BODY=$(printf '{"status": "%s", "message": "%s"%s}' "$1" "$2" "$3")
    curl --fail -s -X POST -H "Authorization: Bearer ${BEARER_TOKEN}" \
        -d "$BODY" "${CALLBACK_URL}/status" || echo "could not reach GARM"
}

function sendStatus() {
    report installing "$1"
}

function success() {
    report idle "$1" ", \"agent_id\": ${2:-null}"
}

function fail() {
    report failed "$1"
    exit 1
}

if [ ! -d "$RUN_HOME" ]; then
    sendStatus "fetching the runner from {{ .DownloadURL }}"
    mkdir -p "$RUN_HOME" || fail "cannot create $RUN_HOME"
    curl --fail -sL -o "/tmp/{{ .FileName }}" "{{ .DownloadURL }}" || fail "download failed"
    tar xzf "/tmp/{{ .FileName }}" -C "$RUN_HOME" || fail "cannot unpack the runner"
    chown -R {{ .RunnerUsername }}:{{ .RunnerGroup }} "$RUN_HOME"
fi

sendStatus "configuring runner"
{{- if .UseJITConfig }}
function fetch() {
    curl --fail -s -H "Authorization: Bearer ${BEARER_TOKEN}" "${METADATA_URL}/$1" -o "$2"
}

sendStatus "fetching JIT credentials"
fetch credentials/runner "$RUN_HOME/.runner" || fail "no runner file"
fetch credentials/credentials "$RUN_HOME/.credentials" || fail "no credentials file"
fetch system/service-name "$RUN_HOME/.service" || fail "no service name"
SVC_NAME="$(cat "$RUN_HOME/.service").service"
fetch "systemd/unit-file?runAsUser={{ .RunnerUsername }}" "/etc/systemd/system/$SVC_NAME" \
    || fail "no unit file"
systemctl daemon-reload && systemctl start "$SVC_NAME" || fail "the runner did not start"
{{- end}}

success "runner installed"
"""
_GITHUB_WINDOWS_TEMPLATE = """#ps1_sysnative
# GARM double: a short stand-in for GARM's built-in GitHub Windows install template.
$ErrorActionPreference = "Stop"
$CallbackURL = "{{ .CallbackURL }}"
$MetadataURL = "{{ .MetadataURL }}"
Write-Output "installing {{ .RunnerName }} from {{ .DownloadURL }}"
{{- if .UseJITConfig }}
Write-Output "fetching JIT credentials from $MetadataURL"
{{- end }}
Write-Output "reporting to $CallbackURL"
"""
_GITEA_LINUX_TEMPLATE = """#!/bin/bash
# GARM double: a short stand-in for GARM's built-in Gitea Linux install template.
set -e
set -o pipefail
CALLBACK_URL="{{ .CallbackURL }}"
RUN_HOME="/home/{{ .RunnerUsername }}/act-runner"
echo "installing {{ .RunnerName }} from {{ .DownloadURL }} into $RUN_HOME"
{{- if .UseJITConfig }}
echo "fetching JIT credentials from {{ .MetadataURL }}"
{{- end }}
echo "reporting to $CALLBACK_URL"
"""
_GITEA_WINDOWS_TEMPLATE = """#ps1_sysnative
# GARM double: a short stand-in for GARM's built-in Gitea Windows install template.
$ErrorActionPreference = "Stop"
Write-Output "installing {{ .RunnerName }} from {{ .DownloadURL }}"
Write-Output "reporting to {{ .CallbackURL }}"
"""
# The built-in templates in the order database/sql/sql.go ensureTemplates creates them on
# an empty database (so ids 1-4): name, description, os_type, forge_type.
_SYSTEM_TEMPLATES: tuple[tuple[str, str, str, str], ...] = (
    ("github_windows", "Default Windows runner install template for GitHub", "windows", "github"),
    ("github_linux", "Default Linux runner install template for GitHub", "linux", "github"),
    ("gitea_linux", "Default Linux runner install template for Gitea", "linux", "gitea"),
    ("gitea_windows", "Default Windows runner install template for Gitea", "windows", "gitea"),
)
# What internal/templates GetTemplateContent hands out per (os_type, forge_type).
_SYSTEM_TEMPLATE_DATA = {
    ("linux", "github"): GITHUB_LINUX_TEMPLATE,
    ("windows", "github"): _GITHUB_WINDOWS_TEMPLATE,
    ("linux", "gitea"): _GITEA_LINUX_TEMPLATE,
    ("windows", "gitea"): _GITEA_WINDOWS_TEMPLATE,
}
_SYSTEM_OWNER = "system"  # params.SystemUser: the owner_id GARM shows for built-in templates

# Request bodies, as the Go structs decode them: "*" marks a pointer (null resets it),
# "raw" a json.RawMessage (kept byte for byte; a JSON null becomes the text "null").
_CREATE_FIELDS = {
    "runner_prefix": "str",
    "name": "str",
    "disable_update": "bool",
    "scale_set_id": "int",
    "provider_name": "str",
    "max_runners": "uint",
    "min_idle_runners": "uint",
    "image": "str",
    "flavor": "str",
    "os_type": "str",
    "os_arch": "str",
    "enabled": "bool",
    "runner_bootstrap_timeout": "uint",
    "extra_specs": "raw",
    "enable_shell": "bool",
    "github-runner-group": "str",
    "template_id": "*uint",
    "labels": "[str]",
    "proxy_id": "*uint",
}
_UPDATE_FIELDS = {
    "runner_prefix": "str",
    "name": "str",
    "disable_update": "*bool",
    "enabled": "*bool",
    "max_runners": "*uint",
    "min_idle_runners": "*uint",
    "runner_bootstrap_timeout": "*uint",
    "image": "str",
    "flavor": "str",
    "os_type": "str",
    "os_arch": "str",
    "extra_specs": "raw",
    "enable_shell": "*bool",
    "runner_group": "*str",
    "state": "*str",
    "extended_state": "*str",
    "template_id": "*uint",
    "proxy_id": "*uint",
}
_CONTROLLER_FIELDS = {
    "metadata_url": "*str",
    "callback_url": "*str",
    "webhook_url": "*str",
    "agent_url": "*str",
    "garm_agent_releases_url": "*str",
    "enable_agent_tools_sync": "*bool",
    "garm_agent_version": "*str",
    "allow_insecure_garm_agent": "*bool",
    "minimum_job_age_backoff": "*uint",
    "ca_cert_bundle": "bytes",
    "clear_ca_cert_bundle": "*bool",
}
# params/requests.go CreateTemplateParams, UpdateTemplateParams, RestoreTemplateRequest.
_TEMPLATE_CREATE_FIELDS = {
    "name": "str",
    "description": "str",
    "data": "bytes",
    "os_type": "str",
    "forge_type": "str",
}
_TEMPLATE_UPDATE_FIELDS = {"name": "*str", "description": "*str", "data": "bytes"}
_TEMPLATE_RESTORE_FIELDS = {"forge": "str", "os_type": "str", "restore_all": "bool"}
_USER_FIELDS = {"email": "str", "username": "str", "full_name": "str", "password": "str"}
_LOGIN_FIELDS = {"username": "str", "password": "str"}
# Nested structs of the credentials bodies (params/requests.go GithubPAT, GithubApp).
_PAT_FIELDS = {"oauth2_token": "str"}
_APP_FIELDS = {"app_id": "int", "installation_id": "int", "private_key_bytes": "bytes"}
_NESTED: dict[str, Mapping[str, str]] = {"pat": _PAT_FIELDS, "app": _APP_FIELDS}
# CreateGithubCredentialsParams holds pat/app by value, UpdateGithubCredentialsParams by
# pointer (so there a null clears an earlier duplicate key).
_CREDENTIALS_CREATE_FIELDS = {
    "name": "str",
    "description": "str",
    "endpoint": "str",
    "auth_type": "str",
    "pat": "pat",
    "app": "app",
}
_CREDENTIALS_UPDATE_FIELDS = {"name": "*str", "description": "*str", "pat": "*pat", "app": "*app"}
_ORG_CREATE_FIELDS = {
    "name": "str",
    "credentials_name": "str",
    "webhook_secret": "str",
    "pool_balancer_type": "str",
    "forge_type": "str",
    "agent_mode": "bool",
}
_REPO_CREATE_FIELDS = {"owner": "str", **_ORG_CREATE_FIELDS}
_ENTITY_UPDATE_FIELDS = {
    "credentials_name": "str",
    "webhook_secret": "str",
    "pool_balancer_type": "str",
    "agent_mode": "*bool",
}
_BALANCER_TYPES = ("roundrobin", "pack", "")
_PKCS1_PEM_TYPE = "RSA PRIVATE KEY"
# A syntactically valid PKCS#1 PEM (not a usable key) for add_credential's default.
FAKE_APP_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + base64.b64encode(b"not a real RSA key, only PEM framing").decode()
    + "\n-----END RSA PRIVATE KEY-----\n"
)
_DEFAULT_RELEASES_URL = "https://api.github.com/repos/cloudbase/garm-agent/releases"
_SEMVER_RE = re.compile(
    r"v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


# --------------------------------------------------------------------------- Go JSON


class _RawJSON:
    """JSON text emitted verbatim, as Go emits a (compacted) ``json.RawMessage``."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


_HTML_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_HTML_RE = re.compile("[<>&\u2028\u2029]")


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_SPACE = re.compile(r"[ \t\r\n]+")


def _go_compact(raw: str) -> str:
    """Compact JSON text like Go's encoder does for a RawMessage: drop insignificant
    whitespace and HTML-escape inside strings, leaving every other byte (and escape) alone.

    By regular expression, not character by character: scale sets' ``extra_specs`` hold
    scripts, and a list of a thousand is megabytes that Go encodes in milliseconds.
    """
    out: list[str] = []
    position = 0
    for string in _JSON_STRING.finditer(raw):
        out.append(_JSON_SPACE.sub("", raw[position : string.start()]))
        out.append(_HTML_RE.sub(lambda m: _HTML_ESCAPES[m.group()], string.group()))
        position = string.end()
    out.append(_JSON_SPACE.sub("", raw[position:]))
    return "".join(out)


def _encode(value: object) -> str:
    """Serialize dicts (in insertion order), lists and scalars as Go's encoding/json would.

    By the standard library's C encoder, then Go's HTML escapes over the whole text (the
    characters escaped cannot occur outside a string in JSON): the double encodes every
    answer and every read of its ground truth, and a walk in Python cost the unit suite
    a minute. A ``_RawJSON`` goes out as a placeholder string, swapped for its text after.
    """
    raws: list[str] = []

    def raw(item: object) -> str:
        if not isinstance(item, _RawJSON):
            raise TypeError(f"cannot encode {type(item).__name__}")
        raws.append(item.text)
        return f"{_RAW_MARK}{len(raws) - 1}"

    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=raw)
    text = _HTML_RE.sub(lambda m: _HTML_ESCAPES[m.group()], text)
    if raws:
        text = _RAW_SLOT.sub(lambda m: raws[int(m.group(1))], text)
    return text


# A placeholder no string of the double's state holds: one per process, at random.
_RAW_MARK = f"raw-json-{secrets.token_hex(8)}-"
_RAW_SLOT = re.compile(f'"{_RAW_MARK}(\\d+)"')


def _is_zero(value: object) -> bool:
    """Go's omitempty test for the value kinds used here."""
    if value is None or value is False:
        return True
    if isinstance(value, (int, str, list, dict)):
        return not value
    return False


def _obj(fields: list[tuple[str, object, bool]]) -> dict[str, object]:
    """Build a Go struct's JSON object from (key, value, omitempty) in struct order."""
    return {key: value for key, value, omitempty in fields if not (omitempty and _is_zero(value))}


def go_time(moment: datetime) -> str:
    """RFC 3339 in UTC with Go's trimmed fractional seconds (naive means UTC)."""
    moment = _utc(moment)
    text = (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )
    if moment.microsecond:
        text += "." + f"{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


def _utc(moment: datetime) -> datetime:
    """Treat naive datetimes as UTC; convert aware ones to UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


# --------------------------------------------------------------------------- errors


class _ApiError(Exception):
    """An error GARM's handleError would write: status plus ``{"error","details"}``."""

    def __init__(self, status: int, error: str, details: str = ""):
        super().__init__(details)
        self.status = status
        self.error = error
        self.details = details


def _bad_request(details: str = "invalid request") -> _ApiError:
    return _ApiError(400, "Bad Request", details)


def _not_found(details: str) -> _ApiError:
    return _ApiError(404, "Not Found", details)


def _server_error() -> _ApiError:
    return _ApiError(500, "Server error", "")


# --------------------------------------------------------------------------- body decoding


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_WS = " \t\r\n"


def _skip_ws(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WS:
        index += 1
    return index


def _members(text: str, start: int) -> Iterator[tuple[str, object, str]]:
    """Yield (key, value, raw value text) of the already-validated top-level object."""
    index = _skip_ws(text, start + 1)
    while text[index] != "}":
        key, index = json.decoder.scanstring(text, index + 1)  # type: ignore[attr-defined]
        index = _skip_ws(text, _skip_ws(text, index) + 1)  # past ':'
        value, end = _DECODER.raw_decode(text, index)
        yield key, value, text[index:end]
        index = _skip_ws(text, end)
        if text[index] == ",":
            index = _skip_ws(text, index + 1)


def _go_text(text: str) -> str:
    """Go replaces lone UTF-16 surrogates with U+FFFD when it decodes a string."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _decode(text: str, fields: Mapping[str, str]) -> dict[str, Any]:
    """Decode a request body into the named fields the way Go's json.Decoder fills a struct.

    Only the first JSON value counts (trailing bytes are ignored), a JSON ``null`` body is
    a no-op, keys match case-insensitively (exact match preferred), unknown keys are
    ignored, a later duplicate wins, and any type mismatch fails the whole decode, which
    GARM answers with 400 ``invalid request``. Absent and null-pointer fields are left out
    of the result.
    """
    start = _skip_ws(text, 0)
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except ValueError:
        raise _bad_request() from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad_request()
    folded = {name.lower(): name for name in fields}
    out: dict[str, Any] = {}
    for key, member, raw in _members(text, start):
        name = key if key in fields else folded.get(key.lower())
        if name is not None:
            _assign(out, name, fields[name], member, raw)
    return out


def _uint(value: object, raw: str) -> bool:
    return _is_int(value) and 0 <= value < 2**64 and raw[0] != "-"  # type: ignore[operator]


def _int64(value: object, raw: str) -> bool:
    return _is_int(value) and -(2**63) <= value < 2**63  # type: ignore[operator]


def _str_list(value: object, raw: str) -> bool:
    return isinstance(value, list) and all(i is None or isinstance(i, str) for i in value)


# Which JSON values each Go field type accepts (anything else fails the decode).
_ACCEPTS: dict[str, Callable[[object, str], bool]] = {
    "str": lambda value, raw: isinstance(value, str),
    "bool": lambda value, raw: isinstance(value, bool),
    "uint": _uint,
    "int": _int64,
    "[str]": _str_list,
    "bytes": lambda value, raw: isinstance(value, str),
}


def _assign(out: dict[str, Any], name: str, kind: str, value: object, raw: str) -> None:
    """Store one decoded member, enforcing the Go type of its field."""
    base = kind.lstrip("*")
    if base in _NESTED:
        _assign_struct(out, name, kind, value, raw)
    elif base == "raw":
        out[name] = raw
    elif value is None:
        if kind.startswith("*") or base in ("[str]", "bytes"):
            out.pop(name, None)
    elif not _ACCEPTS[base](value, raw):
        raise _bad_request()
    elif isinstance(value, str):
        out[name] = _go_text(value) if base == "str" else _base64(value)
    elif isinstance(value, list):
        out[name] = ["" if item is None else _go_text(item) for item in value]
    else:
        out[name] = value


def _assign_struct(out: dict[str, Any], name: str, kind: str, value: object, raw: str) -> None:
    """A nested struct: an object decodes into it (merging into an earlier duplicate key,
    as Go reuses the value), null clears a pointer and leaves a value struct alone."""
    if value is None:
        if kind.startswith("*"):
            out.pop(name, None)
    elif not isinstance(value, dict):
        raise _bad_request()
    else:
        out[name] = {**out.get(name, {}), **_decode(raw, _NESTED[kind.lstrip("*")])}


def _base64(text: str) -> bytes:
    """Go decodes a JSON string into []byte as padded standard base64 (newlines skipped)."""
    try:
        return base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True)
    except ValueError:
        raise _bad_request() from None


def _parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool, with errors read as false (as GARM's handlers do)."""
    return text in ("1", "t", "T", "TRUE", "true", "True")


def _parse_uint32(text: str) -> int:
    """GARM's ``strconv.ParseUint(id, 10, 32)`` for scale set ids; 400 on failure."""
    if not re.fullmatch(r"[0-9]+", text) or int(text) >= 2**32:
        raise _bad_request()
    return int(text)


def _parse_uint64(text: str) -> int:
    """``strconv.ParseUint(id, 10, 64)`` for credential ids; 400 on failure."""
    if not re.fullmatch(r"[0-9]+", text) or int(text) >= 2**64:
        raise _bad_request()
    return int(text)


def _parse_uuid(text: str) -> str | None:
    """Canonical form of a UUID Go's uuid.Parse accepts, or None."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def _uuid_error(text: str) -> str:
    """The message of the error Go's uuid.Parse returns for a malformed id."""
    if len(text) not in (32, 36, 38, 45):
        return f"invalid UUID length: {len(text)}"
    return "invalid UUID format"


def _url_ok(value: str) -> bool:
    """GARM's controller URL rule: parses, with non-empty scheme and host."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return bool(parts.scheme) and bool(parts.netloc.rpartition("@")[2])


_PEM_BEGIN_RE = re.compile(r"(?:\A|(?<=\n))-----BEGIN ([^\r\n]*)-----[ \t\r]*\n")


def _pem_type(data: bytes) -> str | None:
    """The type of the first PEM block Go's ``pem.Decode`` would accept, or None.

    A block is a ``-----BEGIN T-----`` line, optional ``Key: value`` header lines, a
    base64 body (whitespace ignored, padding required) and the matching
    ``-----END T-----`` line; a block whose body does not decode is skipped, as Go does.
    """
    text = data.decode("latin-1")
    for begin in _PEM_BEGIN_RE.finditer(text):
        kind = begin.group(1)
        rest = text[begin.end() :]
        cut = 0 if rest.startswith("-----END ") else rest.find("\n-----END ")
        if cut < 0:
            return None  # no END line anywhere after this point
        end_line = rest[cut:].lstrip("\n").split("\n", 1)[0].rstrip(" \t\r")
        if end_line != f"-----END {kind}-----":
            continue
        lines = rest[:cut].split("\n")
        while lines and ":" in lines[0]:
            lines.pop(0)
        try:
            base64.b64decode(re.sub(r"\s", "", "".join(lines)), validate=True)
        except ValueError:
            continue
        return kind
    return None


# --------------------------------------------------------------------------- state


@dataclass
class Recorded:
    """One request as the double received it, so tests can assert on a client's traffic.

    ``path`` is the part after ``/api/v1`` (the full path for requests outside the API),
    ``query`` holds the first value of each parameter (as Go's ``Query().Get`` reads it),
    ``body`` the parsed JSON (the raw text when it is not JSON, None when empty) and
    ``status`` the status the double produced — None when the request was dropped before
    processing (a ``drop_after`` fault keeps the status of the processing it did), and
    ``process`` the GARM process (``add_process``) whose port took it.
    """

    method: str
    path: str
    query: dict[str, str]
    body: object | None
    status: int | None = None
    process: str = FIRST_PROCESS  # the GARM process whose HTTP port took the request


@dataclass
class _Fault:
    """An injected failure for requests matching a method and a path regex."""

    method: str
    pattern: re.Pattern[str]
    status: int | None
    error: str
    details: str
    drop: bool
    drop_after: bool
    delay: float
    remaining: int

    def matches(self, method: str, path: str) -> bool:
        if self.method not in ("*", method):
            return False
        trimmed = path[:-1] if path.endswith("/") and len(path) > 1 else path
        return bool(self.pattern.fullmatch(path) or self.pattern.fullmatch(trimmed))


@dataclass
class _User:
    id: str
    username: str
    email: str
    full_name: str
    password: str
    created_at: datetime


@dataclass
class _Endpoint:
    """A GitHub endpoint (database/sql/models.go GithubEndpoint)."""

    name: str
    description: str
    api_base_url: str
    upload_base_url: str
    base_url: str
    created_at: datetime
    updated_at: datetime
    endpoint_type: str = "github"
    ca_cert_bundle: bytes = b""


@dataclass
class _Credential:
    """A GitHub credential with its secret parts (GARM seals them; never on the wire)."""

    id: int
    name: str
    description: str
    endpoint: str
    auth_type: str  # "pat" or "app"
    created_at: datetime
    updated_at: datetime
    oauth2_token: str = ""
    app_id: int = 0
    installation_id: int = 0
    private_key: bytes = b""


@dataclass
class _Entity:
    """An organization or repository GARM manages (kind is ``organization``/``repository``).

    ``credentials_id`` None means bound to no credential: only ``add_org``/``add_repo``
    make such entities (GARM cannot), and they are shown with a placeholder credential.
    """

    kind: str
    id: str
    owner: str
    name: str
    created_at: datetime
    updated_at: datetime
    endpoint: str = "github.com"
    credentials_id: int | None = None
    webhook_secret: str = ""
    pool_balancer_type: str = ""
    agent_mode: bool = False


@dataclass
class _Tag:
    id: str
    name: str


@dataclass
class _Template:
    """A runner install template (database/sql/models.go Template).

    ``user_id`` is the owning user's id, None for a system template (GARM stores NULL
    there and shows the owner as ``system``). GARM's unique index is (name, user_id), and
    NULLs never collide in it, so only one user's own templates clash by name."""

    id: int
    name: str
    description: str
    os_type: str
    forge_type: str
    data: bytes
    user_id: str | None
    created_at: datetime
    updated_at: datetime


@dataclass
class _ScaleSet:
    id: int
    scale_set_id: int
    name: str
    entity: _Entity
    created_at: datetime
    updated_at: datetime
    runner_prefix: str
    provider_name: str
    image: str
    flavor: str
    os_type: str
    os_arch: str
    max_runners: int
    min_idle_runners: int
    enabled: bool
    disable_update: bool
    enable_shell: bool
    runner_bootstrap_timeout: int
    runner_group: str
    template_id: int
    extra_specs: str | None  # the raw text as sent (SQLite keeps it), None when never set
    tags: list[_Tag]
    state: str = "pending_create"
    extended_state: str = ""
    desired_runner_count: int = 0
    generation: int = 0


@dataclass
class _Instance:
    id: str
    name: str
    scaleset_id: int
    agent_id: int
    os_type: str
    os_arch: str
    runner_group: str
    status: str
    runner_status: str
    created_at: datetime
    updated_at: datetime
    provider_id: str = ""


@dataclass
class _DeleteRetry:
    """A runner's instance worker between two tries of a delete its provider fails: from
    ``asleep`` it holds the runner's lock, sleeping ``backoff``, and tries at ``due``."""

    asleep: datetime
    due: datetime
    backoff: timedelta

    @classmethod
    def fresh(cls, now: datetime) -> _DeleteRetry:
        """A worker that has not tried yet: its first try as the row takes the lane."""
        return cls(now, now, timedelta(0))


@dataclass
class _View:
    """What one GARM process's scale set worker holds of its scale set.

    The worker works from its own copy of the row (``w.scaleSet`` in
    workers/scaleset/scaleset.go), taken when the worker starts and replaced only by
    update events of its own process's database watcher (``handleScaleSetEvent``). The
    watcher is in-process (database/watcher): another GARM's writes to the same database
    never reach it, so this copy goes stale when they write."""

    enabled: bool
    scale_set_id: int
    min_idle_runners: int
    max_runners: int
    desired_runner_count: int

    @classmethod
    def of(cls, scaleset: _ScaleSet) -> _View:
        return cls(
            scaleset.enabled,
            scaleset.scale_set_id,
            scaleset.min_idle_runners,
            scaleset.max_runners,
            scaleset.desired_runner_count,
        )


@dataclass
class _Proc:
    """One GARM process on the double's database: what it holds in memory.

    ``views``: the scale sets it runs a worker for, with the worker's copy of each.
    ``runners``: its runner cache, name -> scale set id. It stands for both the scale set
    workers' ``w.runners`` (workers/scaleset/scaleset.go) and the provider worker's
    instance managers (workers/provider/provider.go): filled when the process starts
    (from the database) and by the process's own writes (its watcher's events), never by
    the other process's. A name whose row another process reaped stays here (stale) until
    this process's next consolidation finds the row gone.
    ``listener_from``: per scale set, when its listener next tries to open a session.
    ``token_calls``: per scale set, the listener starts it made, each one GitHub
    registration-token call (kept across restarts)."""

    name: str
    running: bool
    started_at: datetime
    last_consolidation: datetime
    views: dict[int, _View]
    runners: dict[str, int]
    listener_from: dict[int, datetime]
    token_calls: dict[int, int]


@dataclass
class _Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


def _json_response(value: object, status: int = 200) -> _Response:
    return _Response(status, (_encode(value) + "\n").encode())


def _error_response(status: int, error: str, details: str) -> _Response:
    return _json_response({"error": error, "details": details}, status)


_INIT_REQUIRED = ("init_required", "Missing superuser")
_AUTH_FAILED = ("Authentication failed", "")
DEFAULT_JWT_TTL = timedelta(hours=24)  # the charm's [jwt_auth] time_to_live
_DEFAULT_JWT_SECRET = "Double-JWT-5ecret-" + "x" * 46  # the double's own
# golang-jwt v5's HMAC methods, which GARM's metrics middleware accepts (auth/metrics.go).
_JWT_HMAC = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}
_URLS_REQUIRED = (
    "urls_required",
    "Missing required URLs. Make sure you update the metadata and callback URLs",
)


@dataclass
class _Request:
    """What a route handler needs: path variables, query and body text."""

    args: tuple[str, ...]
    query: dict[str, str]
    text: str


@dataclass
class _Route:
    pattern: re.Pattern[str]
    group: str  # which middleware chain GARM runs: none, login, controller or api
    handlers: dict[str, str]


_ROUTES = [
    _Route(re.compile(r"/first-run"), "none", {"POST": "_first_run"}),
    # apiserver/routers/routers.go: the metadata router, behind the instance middleware
    # only (no init or URLs gate); the handlers are never reached without an instance
    # token, and the double issues none.
    _Route(
        re.compile(
            r"/metadata/(?:runner-metadata|runner-registration-token|credentials/[^/]+"
            r"|system/service-name|systemd/unit-file|system/cert-bundle|install-script"
            r"|tools/garm-agent(?:/[^/]+(?:/download)?)?)"
        ),
        "instance",
        {"GET": "_no_instance"},
    ),
    _Route(re.compile(r"/auth/login"), "login", {"POST": "_login"}),
    _Route(re.compile(r"/metrics-token"), "api", {"GET": "_metrics_token"}),
    _Route(
        re.compile(r"/controller"),
        "controller",
        {"GET": "_controller_get", "PUT": "_controller_put"},
    ),
    _Route(re.compile(r"/controller-info"), "api", {"GET": "_controller_get"}),
    _Route(re.compile(r"/scalesets"), "api", {"GET": "_list_scalesets"}),
    _Route(
        re.compile(r"/scalesets/([^/]+)"),
        "api",
        {"GET": "_get_scaleset", "PUT": "_update_scaleset", "DELETE": "_delete_scaleset"},
    ),
    _Route(re.compile(r"/scalesets/([^/]+)/instances"), "api", {"GET": "_scaleset_instances"}),
    _Route(
        re.compile(r"/(organizations|repositories)"),
        "api",
        {"GET": "_list_entities", "POST": "_create_entity"},
    ),
    _Route(
        re.compile(r"/(organizations|repositories)/([^/]+)"),
        "api",
        {"GET": "_get_entity", "PUT": "_update_entity", "DELETE": "_delete_entity"},
    ),
    _Route(
        re.compile(r"/(organizations|repositories)/([^/]+)/scalesets"),
        "api",
        {"GET": "_entity_scalesets", "POST": "_create_scaleset"},
    ),
    _Route(re.compile(r"/instances"), "api", {"GET": "_list_instances"}),
    _Route(
        re.compile(r"/instances/([^/]+)"),
        "api",
        {"GET": "_get_instance", "DELETE": "_delete_instance"},
    ),
    _Route(re.compile(r"/providers"), "api", {"GET": "_list_providers"}),
    _Route(
        re.compile(r"/templates"),
        "api",
        {"GET": "_list_templates", "POST": "_create_template"},
    ),
    _Route(re.compile(r"/templates/restore"), "api", {"POST": "_restore_templates"}),
    _Route(
        re.compile(r"/templates/([^/]+)"),
        "api",
        {"GET": "_get_template", "PUT": "_update_template", "DELETE": "_delete_template"},
    ),
    _Route(re.compile(r"/github/endpoints"), "api", {"GET": "_list_endpoints"}),
    _Route(
        re.compile(r"/github/endpoints/([^/]+)"),
        "api",
        {"GET": "_get_endpoint", "DELETE": "_delete_endpoint"},
    ),
    _Route(re.compile(r"/credentials"), "api", {"GET": "_list_credentials"}),  # legacy
    _Route(
        re.compile(r"/github/credentials"),
        "api",
        {"GET": "_list_credentials", "POST": "_create_credential"},
    ),
    _Route(
        re.compile(r"/github/credentials/([^/]+)"),
        "api",
        {"GET": "_get_credential", "PUT": "_update_credential", "DELETE": "_delete_credential"},
    ),
]


def _outside_routes(full_path: str, in_api: bool) -> _Response | None:
    """Answers that come before GARM's API router: gorilla/mux's 301 to the cleaned path,
    and Go's plain-text 404 for anything outside /api/v1/."""
    cleaned = "/" + posixpath.normpath(full_path).lstrip("/") if full_path else "/"
    if full_path.endswith("/") and cleaned != "/":
        cleaned += "/"
    if cleaned != full_path:
        return _Response(301, b"", (("Location", cleaned),))
    if not in_api:
        return _Response(
            404,
            b"404 page not found\n",
            (
                ("Content-Type", "text/plain; charset=utf-8"),
                ("X-Content-Type-Options", "nosniff"),
            ),
        )
    return None


def _short_id() -> str:
    """A random base62 id like GARM's util.NewID (callers lower-case runner names)."""
    return "".join(secrets.choice(_BASE62) for _ in range(12))


# --------------------------------------------------------------------------- the double


class GarmDouble:
    """GARM's REST API on loopback, with switches and records for tests.

    Why it exists: a GARM client is only as right as its handling of GARM's real wire
    format and gates, so tests drive the client against this server instead of a mock.
    State lives behind one lock; the HTTP threads and the test's helper calls share it.
    """

    version = "v0.0.0-unknown"  # what an unversioned GARM build reports

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] | None = None,
        username: str = "admin",
        password: str = DEFAULT_PASSWORD,
        initialised: bool = True,
        urls_set: bool = True,
        port: int = 0,
        seed: int = 0,
        tls: tuple[str, str] | None = None,
    ):
        """``clock`` drives every timestamp and timing (listener, consolidation, pool
        manager start-up); ``seed`` fixes the order tags come back in, so a run that a
        client's order-dependence breaks can be replayed. ``tls`` (the certificate file,
        leaf then chain, and the key file) serves HTTPS on every port instead of HTTP."""
        self._clock = clock or (lambda: datetime.now(UTC))
        self._initial = (username, password, initialised, urls_set)
        self._seed = seed
        self._lock = threading.RLock()
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            self.use_certificate(*tls)
        self._serve_http = False
        self._http: dict[str, _Http] = {FIRST_PROCESS: _Http(self, FIRST_PROCESS, port)}
        self.url = self._http[FIRST_PROCESS].url
        self.reset()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> GarmDouble:
        """Serve in a background thread; returns self so ``GarmDouble().start()`` chains.

        Every running GARM process (``add_process``) serves on its own port from now on."""
        with self._lock:
            self._serve_http = True
            serving = [self._http[name] for name, proc in self._procs.items() if proc.running]
        for http in serving:
            http.serve()
        return self

    def stop(self) -> None:
        """Stop serving, drop open keep-alive connections and free the ports."""
        with self._lock:
            self._serve_http = False
            servers = list(self._http.values())
        for http in servers:
            http.close()

    def use_certificate(self, certificate_file: str, key_file: str) -> None:
        """Serve HTTPS with this certificate and key from the next connection on, as GARM
        restarted with new TLS files would (open connections are dropped). Raises
        ``ssl.SSLError`` for a pair GARM would refuse to start with. Only in TLS mode (or
        from the constructor): the double's URLs do not change scheme."""
        with self._lock:
            if self._tls is None and hasattr(self, "_http"):
                raise ValueError("the double serves HTTP: pass tls= to the constructor")
        self.serve_as(certificate_file, key_file)

    def serve_as(self, certificate_file: str | None, key_file: str | None) -> None:
        """Serve as GARM restarted with ``[apiserver] use_tls`` on (these files) or off
        (None): HTTPS or plain HTTP from the next connection on, open connections dropped,
        ``url`` following. The controller's stored URLs stay as they were set, as GARM's
        do. Raises ``ssl.SSLError`` for a pair GARM would refuse to start with."""
        context = None
        if certificate_file is not None and key_file is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certificate_file, key_file)
        with self._lock:
            self._tls = context
            servers = list(getattr(self, "_http", {}).values())
            if servers:
                self.url = self._http[FIRST_PROCESS].url
        for http in servers:
            http.drop_connections()

    def __enter__(self) -> GarmDouble:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Return to the constructor's state (same server and port): no data, no records,
        no faults, no tokens, default switches, the tag shuffle re-seeded. GARM counts as
        (re)started now: the first consolidation against GitHub is due
        ``CONSOLIDATION_INTERVAL`` later. Processes added with ``add_process`` are stopped
        and forgotten; the first one runs (and serves, if the double does) again. The
        data being new, so is the ``controller_id``: GARM makes one per database, at its
        first run (``InitController`` in database/sql/controller.go)."""
        with self._lock:
            self._controller_id = str(uuid.uuid4())
            closing = [http for name, http in self._http.items() if name != FIRST_PROCESS]
            self._http = {FIRST_PROCESS: self._http[FIRST_PROCESS]}
            username, password, initialised, urls_set = self._initial
            now = self._now()
            self.username = username
            self.password = password
            self.register_on_create = True
            self.delete_keeps_record = False
            self.auto_report = True
            # A runner's boot, and a runner's delete by its provider, on the clock rather
            # than a tick each (None, the default: a tick each; see the module docstring).
            self.runner_boot: timedelta | None = None
            self.runner_delete: timedelta | None = None
            # How long a create takes on the clock (None, the default: at once).
            self.create_takes: timedelta | None = None
            # GitHub's runner groups besides Default; None: whatever GARM is asked for.
            self.runner_groups: set[str] | None = None
            self._random = random.Random(self._seed)
            # The GARM processes on this database, in start order (``add_process``), the
            # one whose port is serving the request at hand, and GitHub's one message
            # session per scale set: scale set id -> the process holding it.
            self._procs: dict[str, _Proc] = {FIRST_PROCESS: self._new_proc(FIRST_PROCESS, now)}
            self._serving = FIRST_PROCESS
            self._sessions: dict[int, str] = {}
            # Which process the controller's callback URL reaches (None: the one whose
            # own URL begins it, else the first); what consolidations did to VMs.
            self.callbacks_to: str | None = None
            self.provider_deletions: list[tuple[str, str, datetime, bool]] = []
            self.lost_jobs: list[tuple[str, str, datetime]] = []
            self._vm_gone: set[str] = set()
            # GitHub-side facts GARM has not (yet) heard: scale set id -> assigned-job
            # total waiting for a listener, and runners whose job ended while no listener
            # was there to read it.
            self._queued_jobs: dict[int, int] = {}
            self._finished_unseen: set[str] = set()
            # Runners whose VM their provider cannot delete, and their instance worker's
            # tries of the delete.
            self._undeletable: dict[str, _DeleteRetry] = {}
            self._recovered: set[str] = set()
            self.requests: list[Recorded] = []
            self.unexpected: list[str] = []
            # TLS handshakes that failed (TLS mode): the reason OpenSSL gave, e.g.
            # TLSV1_ALERT_UNKNOWN_CA for a client that does not trust the certificate.
            self.tls_failures: list[str] = []
            self.disabled_since: dict[int, datetime] = {}
            self.removals: list[tuple[str, int, datetime, bool]] = []
            self.deletions: list[tuple[int, str, datetime]] = []
            self._faults: list[_Fault] = []
            self._tokens: set[str] = set()
            # [jwt_auth] and [metrics] as the charm renders them: time_to_live 24h.
            self.jwt_secret = _DEFAULT_JWT_SECRET
            self.jwt_ttl = DEFAULT_JWT_TTL
            self.metrics_enabled = True
            self.metrics_tokens: list[str] = []
            self._admin: _User | None = None
            if initialised:
                self._admin = self._new_user(username, f"{username}@example.com", "", password)
            self._controller: dict[str, Any] = {
                "metadata_url": "",
                "callback_url": "",
                "webhook_url": "",
                "agent_url": "",
                "garm_agent_releases_url": _DEFAULT_RELEASES_URL,
                "enable_agent_tools_sync": False,
                "garm_agent_version": "",
                "allow_insecure_garm_agent": False,
                "minimum_job_age_backoff": 30,
                "ca_cert_bundle": b"",
            }
            if urls_set:
                self._controller.update(
                    metadata_url=f"{self.url}/api/v1/metadata",
                    callback_url=f"{self.url}/api/v1/callbacks",
                    webhook_url=f"{self.url}/webhooks",
                    agent_url=f"{self.url}/agent",
                )
            # database/sql/sql.go ensureGithubEndpoint: the built-in endpoint.
            self._endpoints: dict[str, _Endpoint] = {
                "github.com": _Endpoint(
                    name="github.com",
                    description="The github.com endpoint",
                    api_base_url="https://api.github.com/",
                    upload_base_url="https://uploads.github.com/",
                    base_url="https://github.com",
                    created_at=now,
                    updated_at=now,
                )
            }
            self._credentials: dict[int, _Credential] = {}
            self._next_credential_id = 1
            self._providers: list[str] = []
            self._entities: dict[str, _Entity] = {}
            self._tags: dict[str, _Tag] = {}
            self._scalesets: dict[int, _ScaleSet] = {}
            self._instances: dict[str, _Instance] = {}
            self._next_scaleset_id = 1
            self._next_github_id = 101
            self._next_agent_id = 1001
            # database/sql/sql.go ensureTemplates: the built-in templates of an empty DB.
            self._templates: dict[int, _Template] = {}
            self._next_template_id = 1
            for name, description, os_type, forge_type in _SYSTEM_TEMPLATES:
                data = _SYSTEM_TEMPLATE_DATA[(os_type, forge_type)].encode()
                self._new_template(name, description, os_type, forge_type, data, None)
            first, serve = self._http[FIRST_PROCESS], self._serve_http
        for http in closing:
            http.close()
        first.bind()  # again, if a test stopped the first process
        if serve:
            first.serve()

    # ------------------------------------------------------------------ setup

    def add_provider(self, name: str) -> None:
        """Configure a provider, as a ``[[provider]]`` section of GARM's config would."""
        with self._lock:
            self._providers.append(name)

    def set_providers(self, names: list[str]) -> None:
        """Replace the configured providers, as GARM re-reading its config at a restart does."""
        with self._lock:
            self._providers = list(names)

    def providers(self) -> list[str]:
        """The configured provider names, in config order."""
        with self._lock:
            return list(self._providers)

    def add_org(self, name: str, *, credentials: str | None = None) -> str:
        """Register a GitHub organization; returns its id.

        With ``credentials`` (a credential's name) it is bound to that credential, as
        ``POST /organizations`` would bind it. Without, it is bound to none and shown
        with a placeholder PAT credential ``github-credentials`` (id 1) that no
        credentials route knows about."""
        return self._add_entity("organization", name, name, credentials)

    def add_repo(self, owner: str, name: str, *, credentials: str | None = None) -> str:
        """Register a GitHub repository ``owner/name``; returns its id (``credentials``
        as for ``add_org``)."""
        return self._add_entity("repository", owner, name, credentials)

    def add_credential(
        self,
        name: str,
        *,
        description: str = "",
        endpoint: str = "github.com",
        app_id: int = 1,
        installation_id: int = 1,
        private_key: str = FAKE_APP_KEY,
        oauth2_token: str | None = None,
    ) -> int:
        """Store a GitHub credential without the API's checks; returns its id. A PAT
        credential when ``oauth2_token`` is given, else a GitHub App one."""
        with self._lock:
            found = self._endpoint_named(endpoint)
            if found is None:
                raise ValueError(f"no GitHub endpoint named {endpoint!r}")
            if oauth2_token is not None:
                auth_type, auth = "pat", {"oauth2_token": oauth2_token}
            else:
                auth_type = "app"
                auth = {
                    "app_id": app_id,
                    "installation_id": installation_id,
                    "private_key": private_key.encode(),
                }
            return self._new_credential(name, description, found.name, auth_type, auth).id

    def register(self, scaleset_id: int) -> None:
        """Give a scale set created with ``register_on_create = False`` its GitHub id.

        A listener needs the GitHub scale set, so an enabled scale set starts listening
        ``LISTENER_DELAY`` after this, not after its create."""
        with self._lock:
            scaleset = self._scalesets[scaleset_id]
            if scaleset.scale_set_id:
                raise ValueError(f"scale set {scaleset_id} is already registered")
            now = self._now()
            self._settle(scaleset_id, now)
            scaleset.scale_set_id = self._take_github_id()
            scaleset.updated_at = now
            for proc in self._running():  # each worker of it learns the id (a shortcut)
                view = proc.views.get(scaleset_id)
                if view is not None:
                    view.scale_set_id = scaleset.scale_set_id
                    if view.enabled:
                        proc.listener_from[scaleset_id] = now + LISTENER_DELAY

    def add_template(
        self,
        name: str,
        data: str,
        *,
        description: str = "",
        os_type: str = "linux",
        forge_type: str = "github",
        system: bool = False,
    ) -> int:
        """Store a runner install template without the API's checks; returns its id.

        It belongs to the admin user, as one made with ``POST /templates`` would, or is a
        system template (owner ``system``) with ``system=True``."""
        with self._lock:
            user_id = None
            if not system:
                if self._admin is None:
                    raise ValueError("no admin user yet to own the template")
                user_id = self._admin.id
            return self._new_template(
                name, description, os_type, forge_type, data.encode(), user_id
            ).id

    # ------------------------------------------------------------------ GARM processes

    def process(self, name: str | None = None) -> GarmProcess:
        """A handle on the GARM process ``name`` (None: the first, the one the double has
        always played, whose port is ``url``)."""
        with self._lock:
            name = FIRST_PROCESS if name is None else name
            if name not in self._procs:
                raise KeyError(f"no GARM process named {name!r}")
            return GarmProcess(self, name)

    def add_process(self, name: str, *, port: int = 0, start: bool = True) -> GarmProcess:
        """Another GARM process on the same database, with its own HTTP port (``port``, 0:
        any free one), started at once unless ``start`` is False.

        The double's state (scale sets, runners, entities, credentials, users, templates)
        is the database both share; each process has its own memory of it (``_Proc``) and
        its own workers, which ``tick`` runs one process after the other."""
        with self._lock:
            if name in self._procs:
                raise ValueError(f"a GARM process named {name!r} exists already")
            proc = self._new_proc(name, self._now())
            proc.running = False
            self._procs[name] = proc
            self._http[name] = _Http(self, name, port)
            http = self._http[name]
        handle = GarmProcess(self, name)
        if start:
            handle.start()
        else:
            http.close()
        return handle

    def processes(self) -> list[GarmProcess]:
        """Every GARM process, running or not, in the order they were added."""
        with self._lock:
            return [GarmProcess(self, name) for name in self._procs]

    def running_processes(self) -> list[str]:
        """The names of the running GARM processes."""
        with self._lock:
            return [name for name, proc in self._procs.items() if proc.running]

    def has_vm(self, name: str) -> bool:
        """Whether the provider still has the runner's VM (it has none before its create
        finished, and none once a consolidation deleted it or the row was reaped)."""
        with self._lock:
            instance = self._instances.get(name)
            return instance is not None and self._has_vm(instance)

    def ghosts(self) -> list[str]:
        """Runner rows whose VM is gone while the row stays: another process's
        consolidation deleted the VM of a runner it did not know. No GitHub runner either
        (the runner died with its VM). Only a process that knows the row (its creator, or
        any process started since) ever marks it ``pending_delete``."""
        with self._lock:
            return [n for n in self._instances if n in self._vm_gone]

    def _new_proc(self, name: str, now: datetime) -> _Proc:
        return _Proc(name, True, now, now, {}, {}, {}, {})

    def _running(self) -> list[_Proc]:
        return [proc for proc in self._procs.values() if proc.running]

    def _serving_proc(self) -> _Proc:
        return self._procs.get(self._serving) or self._procs[FIRST_PROCESS]

    def _start_process(self, name: str) -> None:
        """GARM starts on the database (cmd/garm): its scale set controllers load every
        scale set and start a worker for each (``_start_worker``); the first consolidation
        is due ``CONSOLIDATION_INTERVAL`` later (workers/entity/worker.go
        consolidateRunnerLoop ticks every ``PoolReapTimeoutInterval``, 5 min)."""
        with self._lock:
            proc = self._procs[name]
            if not proc.running:
                now = self._now()
                self._settle_all(now)
                proc.running = True
                proc.started_at = proc.last_consolidation = now
                for scaleset in list(self._scalesets.values()):
                    self._start_worker(proc, scaleset, now, STARTUP_LISTENER_DELAY)
            http, serve = self._http[name], self._serve_http
        http.bind()
        if serve:
            http.serve()

    def _stop_process(self, name: str) -> None:
        """GARM stops (a clean stop: each listener deletes its message session,
        workers/scaleset/scaleset_listener.go Stop). Its memory is gone and its port is
        closed; its VMs and rows stay."""
        with self._lock:
            proc = self._procs[name]
            if proc.running:
                self._settle_all(self._now())
                proc.running = False
                for scaleset_id in [i for i, holder in self._sessions.items() if holder == name]:
                    del self._sessions[scaleset_id]
                proc.views.clear()
                proc.runners.clear()
                proc.listener_from.clear()
            http = self._http[name]
        http.close()

    def _start_worker(
        self, proc: _Proc, scaleset: _ScaleSet, now: datetime, delay: timedelta
    ) -> None:
        """A scale set worker starts (workers/scaleset/scaleset.go Start): it copies the
        scale set and loads its runners from the database, ``creating`` ones marked
        ``pending_delete`` (their create died with an earlier process, or is another
        process's in flight: the worker cannot tell), ``deleting`` ones ``pending_delete``
        again, ``deleted`` rows removed; the provider worker loads the same rows
        (workers/provider/provider.go loadAllRunners). Its listener tries ``delay`` later."""
        proc.views[scaleset.id] = _View.of(scaleset)
        for instance in [i for i in self._instances.values() if i.scaleset_id == scaleset.id]:
            if instance.status == "deleted":
                self._drop_row(instance.name)
                continue
            if instance.status in ("creating", "deleting"):
                instance.status = "pending_delete"
                instance.updated_at = now
            if instance.name in self._undeletable:  # a new instance worker: no back-off
                self._undeletable[instance.name] = _DeleteRetry.fresh(now)
            proc.runners[instance.name] = scaleset.id
        if scaleset.enabled and scaleset.scale_set_id:
            proc.listener_from[scaleset.id] = now + delay

    def _adopt(self, proc: _Proc | None, instance: _Instance) -> None:
        """A process wrote the row: its own watcher hands the event to its scale set worker,
        which puts the runner in its cache (workers/scaleset/scaleset.go
        handleInstanceEntityEvent), and to its provider worker, which starts an instance
        manager for it (workers/provider/provider.go handleInstanceEvent)."""
        if proc is not None and proc.running and instance.scaleset_id in proc.views:
            proc.runners[instance.name] = instance.scaleset_id

    def _callback_proc(self) -> _Proc | None:
        """The running process runners report to: ``callbacks_to``, else the one whose own
        URL begins the controller's callback URL, else the first."""
        name = self.callbacks_to
        if name is None:
            url = self._controller["callback_url"]
            name = next(
                (n for n, h in self._http.items() if url.startswith(h.url + "/")), FIRST_PROCESS
            )
        proc = self._procs.get(name)
        return proc if proc is not None and proc.running else None

    def _has_vm(self, instance: _Instance) -> bool:
        return bool(instance.provider_id) and instance.name not in self._vm_gone

    # ------------------------------------------------------------------ GitHub listener

    def listening(self, scaleset_id: int) -> bool:
        """Whether GARM's GitHub listener (message session) for the scale set is open now.

        It opens ``LISTENER_DELAY`` after the scale set is created enabled, re-enabled or
        (enabled) registered, and closes when it is disabled. Only a listening scale set
        hears GitHub: assigned jobs (``assign_jobs``) and finished jobs (``finish_job``).
        With several GARM processes: whether one of them holds the session
        (``GarmProcess.listening`` says which)."""
        with self._lock:
            return self._listening(self._scalesets.get(scaleset_id))

    def assign_jobs(self, scaleset_id: int, total: int) -> bool:
        """GitHub now counts ``total`` jobs assigned to the scale set (its
        ``TotalAssignedJobs`` statistic, which GARM stores as ``desired_runner_count``).

        Returns whether GARM heard it: a listening scale set records it at once; any other
        keeps it queued on GitHub's side (``queued_jobs``) until a tick finds the listener
        open. Before that nothing acquires jobs for the scale set's labels. Only the
        process holding the session hears it: another process's worker keeps its count."""
        with self._lock:
            scaleset = self._scalesets[scaleset_id]
            holder = self._holder(scaleset)
            if holder is not None:
                self._queued_jobs.pop(scaleset_id, None)
                self._record_desired(scaleset, total, [holder])
                return True
            self._queued_jobs[scaleset_id] = total
            return False

    def queued_jobs(self, scaleset_id: int) -> int | None:
        """The assigned-job total GitHub holds for a scale set whose listener has not read
        it yet, or None when nothing is waiting."""
        with self._lock:
            return self._queued_jobs.get(scaleset_id)

    # ------------------------------------------------------------------ runners

    def add_runner(
        self,
        scaleset_id: int,
        *,
        status: str = "running",
        runner_status: str = "idle",
        process: str | None = None,
    ) -> str:
        """Create a runner row in a scale set; returns its name. The default is a runner
        that has already reported (``idle``); pass ``runner_status="pending"`` for one
        that has not. The GARM process ``process`` (None: the first) made it: it is in
        that process's runner cache (if it runs a worker for the scale set), in no other."""
        with self._lock:
            proc = self._procs[FIRST_PROCESS if process is None else process]
            scaleset = self._scalesets[scaleset_id]
            return self._new_instance(scaleset, status, runner_status, proc).name

    def set_runner(
        self, name: str, *, status: str | None = None, runner_status: str | None = None
    ) -> None:
        """Force a runner's statuses (no transition checks: tests set up any situation)."""
        with self._lock:
            instance = self._instances[name]
            if status is not None:
                instance.status = status
                if status not in ("pending_create", "creating") and not instance.provider_id:
                    instance.provider_id = str(uuid.uuid4())
            if runner_status is not None:
                instance.runner_status = runner_status
            instance.updated_at = self._now()

    def report(self, name: str) -> None:
        """The runner reports through GARM's callback URL that it is up: ``idle``.

        Ticks do this for every ``running``/``pending`` runner (one tick after the provider
        reported it running) unless ``auto_report`` is False; this moves one by hand.
        Only a runner that has not reported yet (``pending``/``installing``) can, and only
        while its VM lives. The report reaches the process the callback URL names
        (``callbacks_to``), which learns the runner by writing its row
        (runner/runner.go AddInstanceStatusMessage); none running, it cannot report."""
        with self._lock:
            instance = self._instances[name]
            if instance.runner_status not in ("pending", "installing"):
                raise ValueError(f"runner {name} is {instance.runner_status}, not pending")
            if name in self._vm_gone:
                raise ValueError(f"runner {name} has no VM to report from")
            target = self._callback_proc()
            if target is None:
                raise ValueError("no running GARM answers the callback URL")
            instance.runner_status = "idle"
            instance.updated_at = self._now()
            self._adopt(target, instance)

    def start_job(self, name: str) -> None:
        """GitHub handed the runner a job: it is busy (``runner_status`` active).

        The double assumes GARM heard it (it does not check the listener here). The process
        holding the scale set's session, if any, writes it (``JobStarted``,
        workers/scaleset/scaleset_helper.go HandleJobsStarted) and so learns the runner."""
        with self._lock:
            instance = self._instances[name]
            if name in self._vm_gone:
                raise ValueError(f"runner {name} has no VM to run a job on")
            self.set_runner(name, runner_status="active")
            self._adopt(self._holder(self._scalesets.get(instance.scaleset_id)), instance)

    def finish_job(self, name: str) -> bool:
        """The ephemeral runner finished its job and left GitHub; returns whether GARM saw.

        With the scale set listening, GARM reads ``JobCompleted`` at once: the row goes
        ``pending_delete``/``terminated``. Otherwise nothing reaches GARM and the row stays
        as it was (typically ``running``/``active``) until the next consolidation against
        GitHub (a tick ``CONSOLIDATION_INTERVAL`` after the last) moves it to
        ``pending_delete``; a later tick reaps it.

        The process holding the session writes the row (``JobCompleted``,
        workers/scaleset/scaleset_helper.go HandleJobsCompleted), so it learns the runner
        and its provider worker reaps it. A runner whose VM a consolidation deleted lost
        its job (``lost_jobs``): it cannot finish one (ValueError)."""
        with self._lock:
            instance = self._instances[name]
            if name in self._vm_gone:
                raise ValueError(f"runner {name} lost its VM, and its job with it")
            holder = self._holder(self._scalesets.get(instance.scaleset_id))
            if holder is not None:
                self.set_runner(name, status="pending_delete", runner_status="terminated")
                self._adopt(holder, instance)
                return True
            self._finished_unseen.add(name)
            return False

    def provider_cannot_delete(self, name: str) -> None:
        """The runner's provider fails every delete of its VM (an OpenStack that errors).

        GARM then keeps the row ``pending_delete`` and its instance worker retries with
        back-off (``INSTANCE_WORKER_TICK``, ``DELETE_RETRY_*``), stamping ``updated_at``
        each time it fails, so the row never looks older than the last retry. A
        force-removal (``pending_force_delete``) is carried out whatever the provider
        answers only if the worker reads it before its next try: asked while the worker
        sleeps its back-off, holding the runner's lock, it is overwritten when the worker
        wakes, tries the plain delete it was about to, fails, and writes ``pending_delete``
        back (``consolidateState``; ``SetInstanceStatus`` with force). From the fifth try
        on the worker sleeps through every tick, so a force is never carried out while the
        provider fails."""
        with self._lock:
            self._undeletable[name] = _DeleteRetry.fresh(self._now())

    def providers_recover(self) -> None:
        """Every provider deletes VMs again: GARM's next retry of each delete, when its
        back-off is due, succeeds."""
        with self._lock:
            self._recovered |= set(self._undeletable)

    def set_desired_runner_count(self, scaleset_id: int, n: int) -> None:
        """Force what GARM last recorded as GitHub's assigned jobs, listener or not (set-up
        shortcut; ``assign_jobs`` plays the message). The write re-stamps updated_at. Every
        running GARM process's worker takes the new count (a shortcut too: GARM's own write
        reaches only the writer's worker)."""
        with self._lock:
            self._record_desired(self._scalesets[scaleset_id], n, self._running())

    def _reap(self, proc: _Proc, now: datetime) -> None:
        """The process's provider worker deletes the rows on their way out that it knows,
        but for those whose provider fails: those it retries (``_retry_delete``), unless
        force-removed. A row no running process knows stays on the deletion lane."""
        for name in [n for n, i in self._instances.items() if i.status in _REAPED_BY_TICK]:
            if name not in proc.runners:
                continue
            instance = self._instances[name]
            if name in self._undeletable and self._delete_fails(instance, now):
                continue
            if self.runner_delete is not None and now - instance.updated_at < self.runner_delete:
                continue  # its provider is still deleting it
            self._drop_row(name)
            del proc.runners[name]

    def _drop_row(self, name: str) -> None:
        """The row (and its VM) is gone; other processes' caches keep the name (stale)."""
        del self._instances[name]
        self._finished_unseen.discard(name)
        self._undeletable.pop(name, None)
        self._recovered.discard(name)
        self._vm_gone.discard(name)

    def _delete_fails(self, instance: _Instance, now: datetime) -> bool:
        """Whether the row of a runner its provider cannot delete stays, its instance
        worker's tries up to ``now`` played (``provider_cannot_delete``).

        A force the worker reads before a try is carried out (the row goes); one asked
        while it sleeps is overwritten by the ``pending_delete`` of its next failed try. A
        recovered provider deletes at the next try."""
        name = instance.name
        retry = self._undeletable[name]
        if not retry.backoff:  # no try yet: the first as the row took the lane (a tick of 5 s)
            if instance.status == "pending_force_delete" or name in self._recovered:
                return False
            self._fail_delete(instance, max(retry.due, instance.updated_at), timedelta(0))
            retry = self._undeletable[name]
        while True:
            if instance.status == "pending_force_delete" and instance.updated_at < retry.asleep:
                return now < retry.asleep  # read at the worker's next tick: provider ignored
            if now < retry.due:
                return True
            if name in self._recovered:
                return False
            self._fail_delete(instance, retry.due, retry.backoff)
            retry = self._undeletable[name]

    def _fail_delete(self, instance: _Instance, at: datetime, slept: timedelta) -> None:
        """The worker's try at ``at``, after sleeping ``slept``, failed: ``pending_delete``
        (over a force asked meanwhile), re-stamped, and its next try scheduled."""
        instance.status = "pending_delete"
        instance.updated_at = at
        backoff = min(slept * 2, DELETE_RETRY_LONGEST) if slept else DELETE_RETRY_FIRST
        # Its next call starts at the next tick, at once when it slept through one.
        asleep = at + max(INSTANCE_WORKER_TICK - slept, timedelta(0))
        self._undeletable[instance.name] = _DeleteRetry(asleep, asleep + backoff, backoff)

    def tick(self) -> None:
        """One pass of GARM's workers, in this order: reap deleted rows (those their
        provider has had ``runner_delete`` to delete, when set); consolidate against
        GitHub when ``CONSOLIDATION_INTERVAL`` has passed since the last check; let runners
        the provider reported running on an earlier tick report ``idle`` (``auto_report``;
        once ``runner_boot`` has passed since their row was made, when set); finish
        provisioning (``creating`` -> ``running``/``pending``); then per scale set hand a
        now-listening one its queued jobs and scale it towards
        ``min(min_idle + desired_runner_count, max_runners)``.

        Scale-up needs the scale set enabled and registered on GitHub (a JIT config needs
        the GitHub id), not its listener; scale-down runs regardless and only takes running
        runners that are neither busy nor terminated. Runners are considered in creation
        order.

        With several GARM processes each step runs for every running process in turn, from
        its own memory: it reaps, consolidates, provisions and counts only the runners it
        knows, scales the scale sets it runs a worker for with that worker's copy of the
        settings, and consolidates every ``CONSOLIDATION_INTERVAL`` after its own start.
        Queued jobs go to the process holding the session; reports to ``callbacks_to``.
        """
        with self._lock:
            now = self._now()
            self._settle_all(now)
            running = self._running()
            for proc in running:
                self._reap(proc, now)
            for proc in running:
                if now - proc.last_consolidation >= CONSOLIDATION_INTERVAL:
                    self._consolidate(proc, now)
            if self.auto_report:
                self._report_pending(now)
            for proc in running:
                self._provision(proc, now)
            for scaleset in self._scalesets.values():
                holder = self._holder(scaleset)
                if scaleset.id in self._queued_jobs and holder is not None:
                    self._record_desired(scaleset, self._queued_jobs.pop(scaleset.id), [holder])
                for proc in running:
                    self._scale(proc, scaleset, now)

    def _report_pending(self, now: datetime) -> None:
        """Runners the provider reported running report ``idle`` through the callback URL,
        once booted (``runner_boot`` after their row was made, when set); the process it
        reaches learns them. None running: no report lands."""
        target = self._callback_proc()
        if target is None:
            return
        boot = self.runner_boot
        for instance in self._instances.values():
            if (
                instance.status == "running"
                and instance.runner_status == "pending"
                and instance.name not in self._vm_gone
                and (boot is None or now - instance.created_at >= boot)
            ):
                instance.runner_status = "idle"
                instance.updated_at = now
                self._adopt(target, instance)

    def _provision(self, proc: _Proc, now: datetime) -> None:
        """The process's provider worker finishes the creates it started."""
        for instance in self._instances.values():
            if instance.status == "creating" and instance.name in proc.runners:
                instance.status, instance.runner_status = "running", "pending"
                instance.provider_id = instance.provider_id or str(uuid.uuid4())
                instance.updated_at = now

    # ------------------------------------------------------------------ faults

    def inject(
        self,
        method: str,
        path: str,
        *,
        status: int | None = None,
        error: str = "Server error",
        details: str = "",
        drop: bool = False,
        drop_after: bool = False,
        delay: float = 0.0,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` requests matching ``method`` ("*" for any) and the regex
        ``path`` (after /api/v1, matched whole) fail: ``status`` answers that error without
        processing, ``drop`` closes the connection unprocessed, ``drop_after`` processes
        then closes without answering, ``delay`` sleeps first."""
        if status is None and not drop and not drop_after and not delay:
            raise ValueError("a fault needs status, drop, drop_after or delay")
        if sum((status is not None, drop, drop_after)) > 1:
            raise ValueError("status, drop and drop_after exclude each other")
        with self._lock:
            self._faults.append(
                _Fault(
                    method.upper(),
                    re.compile(path),
                    status,
                    error,
                    details,
                    drop,
                    drop_after,
                    delay,
                    times,
                )
            )

    def clear_faults(self) -> None:
        """Forget every injected fault."""
        with self._lock:
            self._faults.clear()

    def expire_tokens(self) -> None:
        """Invalidate every issued token, forcing clients to log in again."""
        with self._lock:
            self._tokens.clear()

    def set_jwt_secret(self, secret: str) -> None:
        """GARM restarted with a new ``[jwt_auth] secret``: every JWT it signed before,
        logins and metrics tokens alike, fails verification from now on."""
        with self._lock:
            self.jwt_secret = secret
            self._tokens.clear()

    def change_admin_password(self, password: str) -> None:
        """The admin's password changed (``garm-cli``, say): logins with the old one are
        refused, and so is every login token issued before, GARM's password generation
        having moved on (docs/reference/garm-api.md §0.3)."""
        with self._lock:
            assert self._admin is not None
            self._admin.password = self.password = password
            self._tokens.clear()

    # ------------------------------------------------------------------ records

    def writes(self) -> list[Recorded]:
        """Recorded non-GET requests, leaving out logins and first-run."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method != "GET" and r.path.rstrip("/") not in ("/auth/login", "/first-run")
            ]

    def scalesets(self) -> list[dict[str, Any]]:
        """Every scale set as ``GET /scalesets/{id}`` would return it, but with ``tags`` in
        the order the labels were first sent: the ground truth stays comparable between
        calls and reading it does not move the seeded shuffle of the HTTP answers."""
        with self._lock:
            return [
                json.loads(_encode(self._scaleset_json(s, "detail", shuffle=False)))
                for s in self._scalesets.values()
            ]

    def templates(self) -> list[dict[str, Any]]:
        """Every runner install template as ``GET /templates/{id}`` would return it, but with
        ``data`` decoded to text rather than base64, so a test can read the script a client
        stored (or the built-in stand-ins, ``GITHUB_LINUX_TEMPLATE`` among them)."""
        with self._lock:
            return [
                {
                    **json.loads(_encode(self._template_json(t, with_data=True))),
                    "data": t.data.decode("utf-8", errors="replace"),
                }
                for t in self._templates.values()
            ]

    def instances(self) -> list[dict[str, Any]]:
        """Every runner row as ``GET /instances`` would return it."""
        with self._lock:
            return [json.loads(_encode(self._instance_json(i))) for i in self._instances.values()]

    def credentials(self) -> list[dict[str, Any]]:
        """Every GitHub credential as stored, secrets included (GARM never returns them):
        ``id``, ``name``, ``description``, ``endpoint``, ``auth_type``, ``oauth2_token``,
        ``app_id``, ``installation_id``, ``private_key`` (the PEM text that was sent),
        ``created_at`` and ``updated_at`` (datetimes). Unused secret fields are empty."""
        with self._lock:
            return [
                {
                    "id": c.id,
                    "name": c.name,
                    "description": c.description,
                    "endpoint": c.endpoint,
                    "auth_type": c.auth_type,
                    "oauth2_token": c.oauth2_token,
                    "app_id": c.app_id,
                    "installation_id": c.installation_id,
                    "private_key": c.private_key.decode("utf-8", errors="replace"),
                    "created_at": c.created_at,
                    "updated_at": c.updated_at,
                }
                for c in self._credentials.values()
            ]

    def entities(self) -> list[dict[str, Any]]:
        """Every organization and repository as stored: ``kind``, ``id``, ``owner`` (the
        name for organizations), ``name``, ``endpoint``, ``credentials_id`` (None when
        bound to none), ``webhook_secret``, ``pool_balancer_type`` (as sent, "" when
        unset), ``agent_mode``, ``created_at`` and ``updated_at``."""
        with self._lock:
            return [
                {
                    "kind": e.kind,
                    "id": e.id,
                    "owner": e.owner,
                    "name": e.name,
                    "endpoint": e.endpoint,
                    "credentials_id": e.credentials_id,
                    "webhook_secret": e.webhook_secret,
                    "pool_balancer_type": e.pool_balancer_type,
                    "agent_mode": e.agent_mode,
                    "created_at": e.created_at,
                    "updated_at": e.updated_at,
                }
                for e in self._entities.values()
            ]

    def controller(self) -> dict[str, Any]:
        """The controller settings as stored: ``controller_id`` plus every key of
        ``PUT /controller`` but ``clear_ca_cert_bundle``. ``agent_url`` is the stored
        value ("" until set; the wire shows one derived from ``callback_url``) and
        ``ca_cert_bundle`` is bytes."""
        with self._lock:
            return {"controller_id": self._controller_id, **self._controller}

    # ------------------------------------------------------------------ internals: state

    def _now(self) -> datetime:
        return _utc(self._clock())

    def _new_user(self, username: str, email: str, full_name: str, password: str) -> _User:
        return _User(str(uuid.uuid4()), username, email, full_name, password, self._now())

    def _add_entity(self, kind: str, owner: str, name: str, credentials: str | None) -> str:
        with self._lock:
            credential = None
            if credentials is not None:
                credential = self._credential_named(credentials)
                if credential is None:
                    raise ValueError(f"no GitHub credential named {credentials!r}")
            endpoint = credential.endpoint if credential is not None else "github.com"
            if self._endpoint_named(endpoint) is None:
                raise ValueError(f"no GitHub endpoint named {endpoint!r}")
            now = self._now()
            entity = _Entity(kind, str(uuid.uuid4()), owner, name, now, now, endpoint)
            entity.credentials_id = credential.id if credential is not None else None
            self._entities[entity.id] = entity
            return entity.id

    def _new_credential(
        self, name: str, description: str, endpoint: str, auth_type: str, auth: dict[str, Any]
    ) -> _Credential:
        now = self._now()
        credential = _Credential(
            self._next_credential_id, name, description, endpoint, auth_type, now, now, **auth
        )
        self._credentials[credential.id] = credential
        self._next_credential_id += 1
        return credential

    def _new_template(
        self,
        name: str,
        description: str,
        os_type: str,
        forge_type: str,
        data: bytes,
        user_id: str | None,
    ) -> _Template:
        """Insert a template row; ids come from a sequence and are never reused (SQLite
        ``AUTOINCREMENT``), so a restored system template gets a fresh id."""
        now = self._now()
        template = _Template(
            self._next_template_id, name, description, os_type, forge_type, data, user_id, now, now
        )
        self._templates[template.id] = template
        self._next_template_id += 1
        return template

    def _template_owner(self, template: _Template) -> str:
        """The owner_id GARM shows: ``system`` for a NULL user, else the user's name."""
        if template.user_id is None:
            return _SYSTEM_OWNER
        admin = self._admin
        return admin.username if admin is not None and admin.id == template.user_id else ""

    def _endpoint_named(self, name: str) -> _Endpoint | None:
        """GARM looks endpoints up with ``LOWER(name) = LOWER(?)``."""
        return next((e for e in self._endpoints.values() if e.name.lower() == name.lower()), None)

    def _credential_named(self, name: str) -> _Credential | None:
        """GARM looks credentials up by name with ``LOWER(name) = LOWER(?)``."""
        return next(
            (c for c in self._credentials.values() if c.name.lower() == name.lower()), None
        )

    def _take_github_id(self) -> int:
        self._next_github_id += 1
        return self._next_github_id - 1

    def _new_instance(
        self, scaleset: _ScaleSet, status: str, runner_status: str, proc: _Proc | None = None
    ) -> _Instance:
        name = f"{scaleset.runner_prefix}-{_short_id()}".lower()
        while name in self._instances:
            name = f"{scaleset.runner_prefix}-{_short_id()}".lower()
        now = self._now()
        instance = _Instance(
            id=str(uuid.uuid4()),
            name=name,
            scaleset_id=scaleset.id,
            agent_id=self._next_agent_id,
            os_type=scaleset.os_type,
            os_arch=scaleset.os_arch,
            runner_group=scaleset.runner_group,
            status=status,
            runner_status=runner_status,
            created_at=now,
            updated_at=now,
        )
        if status not in ("pending_create", "creating"):
            instance.provider_id = str(uuid.uuid4())
        self._next_agent_id += 1
        self._instances[name] = instance
        self._adopt(proc, instance)
        return instance

    def _listening(self, scaleset: _ScaleSet | None) -> bool:
        return self._holder(scaleset) is not None

    def _holder(self, scaleset: _ScaleSet | None) -> _Proc | None:
        """The process holding the scale set's GitHub message session now, if any."""
        if scaleset is None:
            return None
        holder = self._settle(scaleset.id, self._now())
        return None if holder is None else self._procs[holder]

    def _may_listen(self, proc: _Proc, scaleset_id: int) -> bool:
        """Whether the process's worker keeps a listener going: its own copy of the scale
        set says enabled and registered (keepListenerAlive reads ``w.scaleSet.Enabled``)."""
        view = proc.views.get(scaleset_id)
        return proc.running and view is not None and view.enabled and bool(view.scale_set_id)

    def _settle(self, scaleset_id: int, now: datetime) -> str | None:
        """Play the scale set's listeners up to ``now``; returns the session holder's name.

        GitHub grants one message session per scale set (util/github/scalesets/
        message_sessions.go CreateMessageSession; a second is refused). Each process's
        worker that may listen starts its listener at ``listener_from``: the first to try
        while no session is open gets it and keeps it until it stops listening (process
        stopped, its copy of the scale set disabled, the scale set deleted). Every other
        try fails and is tried again ``LISTENER_RETRY`` later, for ever. Each try is one
        GitHub registration-token call: the worker makes a new ScaleSetClient for each
        (workers/scaleset/scaleset_helper.go GetScaleSetClient), whose first request
        fetches a token (util/github/scalesets/token.go ensureAdminInfo). Callers settle
        before anything changes who may listen, so a release lands at its own moment."""
        scaleset = self._scalesets.get(scaleset_id)
        holder = self._sessions.get(scaleset_id)
        if holder is not None and (
            scaleset is None or not self._may_listen(self._procs[holder], scaleset_id)
        ):
            del self._sessions[scaleset_id]
            holder = None
        trying = [
            p
            for p in self._procs.values()
            if p.name != holder
            and self._may_listen(p, scaleset_id)
            and scaleset_id in p.listener_from
        ]
        if holder is None and scaleset is not None:
            due = [p for p in trying if p.listener_from[scaleset_id] <= now]
            if due:
                winner = min(due, key=lambda p: p.listener_from[scaleset_id])
                winner.token_calls[scaleset_id] = winner.token_calls.get(scaleset_id, 0) + 1
                del winner.listener_from[scaleset_id]
                holder = self._sessions[scaleset_id] = winner.name
                trying.remove(winner)
        for proc in trying:
            at = proc.listener_from[scaleset_id]
            if at <= now:
                tries = (now - at) // LISTENER_RETRY + 1
                proc.token_calls[scaleset_id] = proc.token_calls.get(scaleset_id, 0) + tries
                proc.listener_from[scaleset_id] = at + tries * LISTENER_RETRY
        return holder

    def _settle_all(self, now: datetime) -> None:
        known = set(self._scalesets) | {i for p in self._procs.values() for i in p.views}
        for scaleset_id in sorted(known):
            self._settle(scaleset_id, now)

    def _record_desired(self, scaleset: _ScaleSet, total: int, writers: list[_Proc]) -> None:
        """GARM's SetDesiredRunnerCount: a column write, so updated_at is re-stamped. Only
        the writers' workers hear of it (their own watcher's update event)."""
        scaleset.desired_runner_count = total
        scaleset.updated_at = self._now()
        for proc in writers:
            if scaleset.id in proc.views:
                proc.views[scaleset.id] = _View.of(scaleset)

    def _consolidate(self, proc: _Proc, now: datetime) -> None:
        """One process's consolidation (workers/entity/worker.go consolidateRunnerState,
        then workers/scaleset/scaleset.go consolidateRunnerState and
        consolidateProviderState), from its own runner cache:

        - against GitHub: a runner row it knows that GitHub no longer lists (its job ended
          unseen) goes ``pending_delete``, its runner_status untouched; rows already on
          the deletion lane or still being created are left alone. A name it knows whose
          row is gone leaves its cache (the update finds no row);
        - against the provider: every VM of its scale sets that it does not know is deleted
          ("runner does not exist in database; removing from provider"), whatever the row
          says, busy or not (``provider_deletions``; a running job is lost, ``lost_jobs``).
          The row stays: a ghost no other process marks. A runner it knows whose VM is gone
          is removed from GitHub and goes ``pending_delete``.

        With one process, which knows every row and VM, only the first part ever acts."""
        proc.last_consolidation = now
        for name in list(proc.runners):
            if name not in self._instances:
                del proc.runners[name]
        for instance in self._instances.values():
            if (
                instance.name in proc.runners
                and instance.name in self._finished_unseen
                and instance.status not in (_DELETION_LANE | {"creating"})
            ):
                instance.status = "pending_delete"  # stays in _finished_unseen until reaped
                instance.updated_at = now
        for instance in self._instances.values():
            if (
                instance.scaleset_id in proc.views
                and instance.name not in proc.runners
                and self._has_vm(instance)
            ):
                busy = (
                    instance.runner_status == "active"
                    and instance.name not in self._finished_unseen
                )
                self._vm_gone.add(instance.name)
                self.provider_deletions.append((instance.name, proc.name, now, busy))
                if busy and instance.status not in _DELETION_LANE:
                    self.lost_jobs.append((instance.name, proc.name, now))
        for instance in self._instances.values():
            if (
                instance.name in proc.runners
                and instance.name in self._vm_gone
                and instance.status not in _DELETION_LANE | {"creating", "pending_create"}
            ):
                instance.status = "pending_delete"
                instance.updated_at = now

    def _scale(self, proc: _Proc, scaleset: _ScaleSet, now: datetime) -> None:
        """The process's worker scales its scale set (workers/scaleset/scaleset.go
        handleAutoScale): its target from its own copy of the settings, its count from its
        own cache (stale names included), new runners known to it alone."""
        view = proc.views.get(scaleset.id)
        if view is None:
            return
        live = [
            i
            for i in self._instances.values()
            if i.scaleset_id == scaleset.id
            and i.name in proc.runners
            and i.status not in _DELETION_LANE
        ]
        stale = sum(
            1 for n, s in proc.runners.items() if s == scaleset.id and n not in self._instances
        )
        desired = max(view.desired_runner_count, 0)
        target = min(view.min_idle_runners + desired, view.max_runners)
        if view.enabled and view.scale_set_id:
            for _ in range(target - len(live) - stale):
                self._new_instance(scaleset, "creating", "pending", proc)
        excess = len(live) + stale - target
        for name in [n for n, s in proc.runners.items() if s == scaleset.id]:
            if excess > 0 and name not in self._instances:  # its update finds no row
                del proc.runners[name]
                excess -= 1
        for instance in live:
            if excess <= 0:
                break
            if instance.status == "running" and instance.runner_status not in (
                "active",
                "terminated",
            ):
                instance.status = "pending_delete"
                instance.updated_at = now
                excess -= 1

    def _urls_ok(self) -> bool:
        return bool(
            self._controller["metadata_url"]
            and self._controller["callback_url"]
            and self._agent_url()
        )

    def _agent_url(self) -> str:
        """The stored agent URL, else ``scheme://host`` of the callback URL (as GARM infers)."""
        if self._controller["agent_url"]:
            return str(self._controller["agent_url"])
        parts = urlsplit(self._controller["callback_url"])
        if not parts.scheme:
            return ""
        return f"{parts.scheme}://{parts.netloc}".rstrip("/")

    # ------------------------------------------------------------------ internals: JSON

    def _endpoint_json(self, endpoint: _Endpoint | None) -> dict[str, object]:
        """A ForgeEndpoint; None gives the shape of an endpoint GARM did not load."""
        if endpoint is None:
            return {"created_at": _ZERO_TIME, "updated_at": _ZERO_TIME}
        return _obj(
            [
                ("name", endpoint.name, True),
                ("description", endpoint.description, True),
                ("api_base_url", endpoint.api_base_url, True),
                ("upload_base_url", endpoint.upload_base_url, True),
                ("base_url", endpoint.base_url, True),
                ("ca_cert_bundle", base64.b64encode(endpoint.ca_cert_bundle).decode(), True),
                ("created_at", go_time(endpoint.created_at), False),
                ("updated_at", go_time(endpoint.updated_at), False),
                ("endpoint_type", endpoint.endpoint_type, True),
            ]
        )

    def _entity_endpoint(self, entity: _Entity) -> _Endpoint | None:
        return self._endpoint_named(entity.endpoint)

    def _credential_json(
        self, credential: _Credential | None, *, detailed: bool = False
    ) -> dict[str, object]:
        """A ForgeCredentials (no secrets); None gives the zero value GARM embeds when it
        did not convert the credentials. ``detailed`` (GET-by-id) adds the orgs and repos
        using it, converted shallowly as GARM does."""
        if credential is None:
            return {
                "endpoint": self._endpoint_json(None),
                "created_at": _ZERO_TIME,
                "updated_at": _ZERO_TIME,
            }
        endpoint = self._endpoint_named(credential.endpoint)
        users = [e for e in self._entities.values() if e.credentials_id == credential.id]
        repos = [self._entity_json(e, "shallow") for e in users if e.kind == "repository"]
        orgs = [self._entity_json(e, "shallow") for e in users if e.kind == "organization"]
        return _obj(
            [
                ("id", credential.id, True),
                ("name", credential.name, True),
                ("description", credential.description, True),
                ("api_base_url", endpoint.api_base_url if endpoint else "", True),
                ("upload_base_url", endpoint.upload_base_url if endpoint else "", True),
                ("base_url", endpoint.base_url if endpoint else "", True),
                (
                    "ca_bundle",
                    base64.b64encode(endpoint.ca_cert_bundle if endpoint else b"").decode(),
                    True,
                ),
                ("auth-type", credential.auth_type, True),
                ("forge_type", endpoint.endpoint_type if endpoint else "", True),
                ("repositories", repos if detailed else [], True),
                ("organizations", orgs if detailed else [], True),
                ("endpoint", self._endpoint_json(endpoint), False),
                ("created_at", go_time(credential.created_at), False),
                ("updated_at", go_time(credential.updated_at), False),
            ]
        )

    def _placeholder_credential_json(self, endpoint: _Endpoint | None) -> dict[str, object]:
        """What an entity bound to no credential (``add_org``/``add_repo``) shows."""
        created = go_time(endpoint.created_at) if endpoint else _ZERO_TIME
        return {
            "id": 1,
            "name": _CREDENTIALS_NAME,
            "description": "GitHub credentials",
            "api_base_url": "https://api.github.com/",
            "upload_base_url": "https://uploads.github.com/",
            "base_url": "https://github.com",
            "auth-type": "pat",
            "forge_type": "github",
            "endpoint": self._endpoint_json(endpoint),
            "created_at": created,
            "updated_at": created,
        }

    def _entity_json(self, entity: _Entity, shape: str = "detail") -> dict[str, object]:
        """An Organization or Repository in one of GARM's shapes: ``detail`` (lists,
        GET-by-id, PUT), ``created`` (the POST answer: read back before the pool manager
        started, so ``pool_manager_status`` is still empty) or ``shallow`` (inside
        ``GET /github/credentials/{id}``: credentials and endpoint not loaded).
        ``pool_manager_status`` reads "starting up" until ``POOL_MANAGER_STARTUP`` after
        the entity's pool manager started (GARM's start, or the entity's creation)."""
        credential = (
            self._credentials.get(entity.credentials_id) if entity.credentials_id else None
        )
        endpoint = self._entity_endpoint(entity)
        if credential is None:
            cred_name, cred_id = _CREDENTIALS_NAME, 1
            cred_json = self._placeholder_credential_json(endpoint)
        else:
            cred_name, cred_id = credential.name, credential.id
            cred_json = self._credential_json(None if shape == "shallow" else credential)
        if shape == "shallow":
            endpoint = None
        status = {} if shape == "created" else self._pool_manager_status(entity)
        balancer = entity.pool_balancer_type or "roundrobin"
        created, updated = go_time(entity.created_at), go_time(entity.updated_at)
        if entity.kind == "organization":
            return _obj(
                [
                    ("id", entity.id, True),
                    ("name", entity.name, True),
                    ("pool", [], True),
                    ("credentials_name", cred_name, True),
                    ("credentials", cred_json, False),
                    ("credentials_id", cred_id, True),
                    ("pool_manager_status", status, False),
                    ("pool_balancing_type", balancer, True),
                    ("endpoint", self._endpoint_json(endpoint), False),
                    ("created_at", created, False),
                    ("updated_at", updated, False),
                    ("events", [], True),
                    ("agent_mode", entity.agent_mode, False),
                ]
            )
        return _obj(
            [
                ("id", entity.id, True),
                ("owner", entity.owner, True),
                ("name", entity.name, True),
                ("pool", [], True),
                ("credentials_name", cred_name, True),
                ("credentials_id", cred_id, True),
                ("credentials", cred_json, False),
                ("agent_mode", entity.agent_mode, False),
                ("pool_manager_status", status, False),
                ("pool_balancing_type", balancer, True),
                ("endpoint", self._endpoint_json(endpoint), False),
                ("created_at", created, False),
                ("updated_at", updated, False),
                ("events", [], True),
            ]
        )

    def _pool_manager_status(self, entity: _Entity) -> dict[str, object]:
        """params.PoolManagerStatus (both keys omitempty). basePoolManager.Start sets
        "pool manager is starting up" and only the first tools update sets it running."""
        started = max(self._serving_proc().started_at, entity.created_at)
        if self._now() < started + POOL_MANAGER_STARTUP:
            return _obj(
                [("running", False, True), ("failure_reason", "pool manager is starting up", True)]
            )
        return _obj([("running", True, True), ("failure_reason", "", True)])

    def _instance_json(self, instance: _Instance, *, embedded: bool = False) -> dict[str, object]:
        """An Instance; embedded in ``GET /scalesets/{id}`` its scale set is not loaded, so
        ``provider_name`` is empty there."""
        scaleset = self._scalesets.get(instance.scaleset_id)
        provider = "" if embedded or scaleset is None else scaleset.provider_name
        return _obj(
            [
                ("id", instance.id, True),
                ("provider_id", instance.provider_id, True),
                ("provider_name", provider, False),
                ("agent_id", instance.agent_id, True),
                ("name", instance.name, True),
                ("os_type", instance.os_type, True),
                ("os_name", "", True),
                ("os_version", "", True),
                ("os_arch", instance.os_arch, True),
                ("addresses", [], True),
                ("status", instance.status, True),
                ("runner_status", instance.runner_status, True),
                ("pool_id", "", True),
                ("scale_set_id", instance.scaleset_id, True),
                ("provider_fault", "", True),
                ("status_messages", [], True),
                ("created_at", go_time(instance.created_at), False),
                ("updated_at", go_time(instance.updated_at), False),
                ("github-runner-group", instance.runner_group, True),
                ("job", None, True),
                ("heartbeat", _ZERO_TIME, False),
                ("capabilities", {"has_shell": False}, False),
                ("generation", 0, False),
            ]
        )

    def _scaleset_json(
        self, scaleset: _ScaleSet, shape: str, *, shuffle: bool = True
    ) -> dict[str, object]:
        """A ScaleSet in one of GARM's three read shapes: ``detail`` (GET-by-id, create,
        update), ``list`` (GET /scalesets) or ``entity`` (GET /{entity}/{id}/scalesets).
        ``tags`` are shuffled afresh for every answer (unless ``shuffle`` is False), so no
        client can lean on an order."""
        detail = shape == "detail"
        entity = scaleset.entity
        is_org = entity.kind == "organization"
        instances = (
            [
                self._instance_json(i, embedded=True)
                for i in self._instances.values()
                if i.scaleset_id == scaleset.id
            ]
            if detail
            else []
        )
        extra = (
            None if scaleset.extra_specs is None else _RawJSON(_go_compact(scaleset.extra_specs))
        )
        tags = [{"id": t.id, "name": t.name} for t in scaleset.tags]
        if shuffle:
            self._random.shuffle(tags)  # GARM's tag order is not stable between runs
        return _obj(
            [
                ("runner_prefix", scaleset.runner_prefix, True),
                ("created_at", go_time(scaleset.created_at), False),
                ("updated_at", go_time(scaleset.updated_at), False),
                ("id", scaleset.id, True),
                ("scale_set_id", scaleset.scale_set_id, True),
                ("name", scaleset.name, True),
                ("disable_update", scaleset.disable_update, False),
                ("state", scaleset.state, False),
                ("extended_state", scaleset.extended_state, True),
                ("provider_name", scaleset.provider_name, True),
                ("max_runners", scaleset.max_runners, True),
                ("min_idle_runners", scaleset.min_idle_runners, True),
                ("image", scaleset.image, True),
                ("flavor", scaleset.flavor, True),
                ("os_type", scaleset.os_type, True),
                ("os_arch", scaleset.os_arch, True),
                ("enabled", scaleset.enabled, True),
                ("instances", instances, True),
                ("desired_runner_count", scaleset.desired_runner_count, True),
                ("enable_shell", scaleset.enable_shell, False),
                ("generation", scaleset.generation, False),
                (
                    "endpoint",
                    self._endpoint_json(
                        None if shape == "entity" else self._entity_endpoint(entity)
                    ),
                    False,
                ),
                ("runner_bootstrap_timeout", scaleset.runner_bootstrap_timeout, True),
                ("extra_specs", extra, True),
                ("github-runner-group", scaleset.runner_group, True),
                ("tags", tags, True),
                ("status_messages", None, False),
                ("repo_id", "" if is_org else entity.id, True),
                ("repo_name", "" if is_org else f"{entity.owner}/{entity.name}", True),
                ("org_id", entity.id if is_org else "", True),
                ("org_name", entity.name if is_org else "", True),
                ("template_id", scaleset.template_id, True),
                ("template_name", self._template_name(scaleset) if detail else "", True),
            ]
        )

    def _template_json(self, template: _Template, *, with_data: bool) -> dict[str, object]:
        """A Template (params/params.go). ``data`` has no omitempty: base64 when loaded,
        ``null`` in the list, whose query omits the column."""
        data = base64.b64encode(template.data).decode() if with_data else None
        return _obj(
            [
                ("id", template.id, False),
                ("created_at", go_time(template.created_at), False),
                ("updated_at", go_time(template.updated_at), False),
                ("name", template.name, False),
                ("description", template.description, False),
                ("os_type", template.os_type, False),
                ("forge_type", template.forge_type, True),
                ("data", data, False),
                ("owner_id", self._template_owner(template), True),
            ]
        )

    def _template_name(self, scaleset: _ScaleSet) -> str:
        """The preloaded template's name ("" if the row were gone: a zero Template)."""
        template = self._templates.get(scaleset.template_id)
        return template.name if template is not None else ""

    def _controller_json(self, *, with_hostname: bool) -> dict[str, object]:
        ctl = self._controller
        webhook = ctl["webhook_url"]
        return _obj(
            [
                ("controller_id", self._controller_id, False),
                ("hostname", socket.gethostname() if with_hostname else "", True),
                ("metadata_url", ctl["metadata_url"], True),
                ("callback_url", ctl["callback_url"], True),
                ("webhook_url", webhook, True),
                (
                    "controller_webhook_url",
                    f"{webhook.rstrip('/')}/{self._controller_id}"
                    if webhook
                    else self._controller_id,
                    True,
                ),
                ("agent_url", self._agent_url(), True),
                ("garm_agent_releases_url", ctl["garm_agent_releases_url"], False),
                ("enable_agent_tools_sync", ctl["enable_agent_tools_sync"], False),
                ("garm_agent_version", ctl["garm_agent_version"], False),
                ("allow_insecure_garm_agent", ctl["allow_insecure_garm_agent"], False),
                ("minimum_job_age_backoff", ctl["minimum_job_age_backoff"], True),
                ("version", self.version, True),
                ("ca_cert_bundle", base64.b64encode(ctl["ca_cert_bundle"]).decode(), True),
            ]
        )

    # ------------------------------------------------------------------ internals: HTTP

    def _handle(
        self,
        method: str,
        target: str,
        headers: Message,
        raw_body: bytes,
        process: str = FIRST_PROCESS,
    ) -> _Response | None:
        """Serve one request on the port of GARM process ``process``; None means: close
        the connection without answering."""
        split = urlsplit(target)
        full_path = unquote(split.path)
        in_api = full_path.startswith(API_PREFIX + "/")
        path = full_path[len(API_PREFIX) :] if in_api else full_path
        query = {k: v[0] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        text = raw_body.decode("utf-8", errors="replace")
        record = Recorded(method, path, query, _body_for_record(text), process=process)
        with self._lock:
            self.requests.append(record)
            fault = self._take_fault(method, path)
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.drop:
            return None
        if fault is not None and fault.status is not None:
            response = _error_response(fault.status, fault.error, fault.details)
        else:
            with self._lock:
                self._serving = process
                try:
                    response = self._route(method, full_path, path, in_api, query, headers, text)
                finally:
                    self._serving = FIRST_PROCESS
        record.status = response.status
        if fault is not None and fault.drop_after:
            return None
        return response

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if fault.matches(method, path):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _route(
        self,
        method: str,
        full_path: str,
        path: str,
        in_api: bool,
        query: dict[str, str],
        headers: Message,
        text: str,
    ) -> _Response:
        if not in_api and full_path in ("/metrics", "/metrics/") and self.metrics_enabled:
            return self._metrics(method, headers)
        early = _outside_routes(full_path, in_api)
        if early is not None:
            self.unexpected.append(f"{method} {path}")
            return early
        trimmed = path[:-1] if path.endswith("/") else path
        for route in _ROUTES:
            found = route.pattern.fullmatch(trimmed)
            if found and method in route.handlers:
                gate = self._gate(route.group, headers)
                if gate is not None:
                    return gate
                handler = getattr(self, route.handlers[method])
                try:
                    return handler(_Request(found.groups(), query, text))
                except _ApiError as exc:
                    return _error_response(exc.status, exc.error, exc.details)
        self.unexpected.append(f"{method} {path}")
        return self._no_route(method, headers)

    def _no_route(self, method: str, headers: Message) -> _Response:
        """GARM's last route: a catch-all under the full API middleware chain for GET, POST,
        PUT and DELETE; other methods end in gorilla's 405 (OPTIONS in the CORS 400)."""
        if method == "OPTIONS":
            return _Response(400, b"", ())
        if method not in _GO_VERBS:
            return _Response(405, b"", ())
        gate = self._gate("api", headers)
        if gate is not None:
            return gate
        return _error_response(404, "Not found", "Resource not found")

    def _gate(self, group: str, headers: Message) -> _Response | None:
        """GARM's middlewares in order: init-required, urls-required, JWT. The metadata
        router has only the instance middleware, which wants a runner's token: none is
        ever issued here, so it refuses every request (``_AUTH_FAILED``, as GARM's)."""
        if group == "none":
            return None
        if group == "instance":
            return _error_response(401, *_AUTH_FAILED)
        if self._admin is None:
            return _error_response(409, *_INIT_REQUIRED)
        if group == "login":
            return None
        if group == "api" and not self._urls_ok():
            return _error_response(409, *_URLS_REQUIRED)
        if _token_of(headers) not in self._tokens:
            return _error_response(401, "Authentication failed", "")
        return None

    # ------------------------------------------------------------------ handlers: auth

    def _no_instance(self, req: _Request) -> _Response:
        raise AssertionError("the instance gate lets no request through")  # pragma: no cover

    def _first_run(self, req: _Request) -> _Response:
        if self._admin is not None:
            raise _ApiError(409, "Conflict", "already initialized")
        body = _decode(req.text, _USER_FIELDS)
        email, username = body.get("email", ""), body.get("username", "")
        password = body.get("password", "")
        if not email or not username:
            raise _bad_request("missing username or email")
        if len(email.encode()) > 254 or not _EMAIL_RE.fullmatch(email):
            raise _bad_request("invalid email address")
        if len(username.encode()) > 64 or not all(
            unicodedata.category(ch)[0] in "LN" for ch in username
        ):
            raise _bad_request("invalid username")
        if not _strong(password):
            raise _bad_request("password is too weak")
        if len(password.encode()) > 72:  # bcrypt refuses it: a plain error
            raise _server_error()
        user = self._new_user(username, email, body.get("full_name", ""), password)
        self._admin = user
        self.username, self.password = username, password
        created = go_time(user.created_at)
        return _json_response(
            _obj(
                [
                    ("id", user.id, True),
                    ("created_at", created, False),
                    ("updated_at", created, False),
                    ("email", user.email, True),
                    ("username", user.username, True),
                    ("full_name", user.full_name, True),
                    ("enabled", True, True),
                    ("is_admin", True, True),
                ]
            )
        )

    def _login(self, req: _Request) -> _Response:
        body = _decode(req.text, _LOGIN_FIELDS)
        login, password = body.get("username", ""), body.get("password", "")
        admin = self._admin
        assert admin is not None  # the init-required gate ran first
        known = admin.email if _EMAIL_RE.fullmatch(login) else admin.username
        if not login or not password or login != known or password != admin.password:
            raise _ApiError(401, "Not Authorized", "")
        # auth/auth.go GetJWTToken: a JWT of the admin, expiring ``time_to_live`` from
        # now, in the claims' order of the metrics token's. Still valid only while the
        # double holds it (``expire_tokens``), whatever its ``exp`` says.
        claims = {
            "user": admin.id,
            "token_id": "".join(secrets.choice(_BASE62) for _ in range(16)),
            "full_name": admin.full_name,
            "is_admin": True,
            "read_metrics": False,
            "generation": 0,
            "iss": "garm",
            "exp": int((self._now() + self.jwt_ttl).timestamp()),
        }
        token = _jwt_sign(claims, self.jwt_secret)
        self._tokens.add(token)
        return _json_response({"token": token})

    # ------------------------------------------------------------------ handlers: metrics

    def _metrics_token(self, req: _Request) -> _Response:
        """apiserver/controllers MetricsTokenHandler, auth/auth.go GetJWTMetricsToken: a
        JWT of no user, ``read_metrics`` true, expiring ``time_to_live`` from now."""
        expires = self._now() + self.jwt_ttl
        claims = {
            "user": "",
            "token_id": "".join(secrets.choice(_BASE62) for _ in range(16)),
            "full_name": "",
            "is_admin": False,
            "read_metrics": True,
            "generation": 0,
            "iss": "garm",
            # jwt.NumericDate: whole seconds (TimePrecision), truncated.
            "exp": int(expires.timestamp()),
        }
        token = _jwt_sign(claims, self.jwt_secret)
        self.metrics_tokens.append(token)
        return _json_response({"token": token})

    def _metrics(self, method: str, headers: Message) -> _Response:
        """The metrics router (apiserver/routers WithMetricsRouter): gorilla answers a
        method other than GET and OPTIONS with 405 before any middleware; then
        auth/metrics.go's middleware, then promhttp's text."""
        if method not in ("GET", "OPTIONS"):
            return _Response(405, b"", ())
        header = headers.get("Authorization") or ""
        parts = header.split(" ")
        claims = _jwt_verify(parts[1], self.jwt_secret) if len(parts) == 2 else None
        if claims is None or claims.get("read_metrics") is not True:
            return _error_response(401, *_AUTH_FAILED)
        # golang-jwt v5: an exp must be a number, and the token is good while now < exp.
        exp = claims.get("exp", float("inf"))
        if isinstance(exp, bool) or not isinstance(exp, int | float):
            return _error_response(401, *_AUTH_FAILED)
        if not self._now().timestamp() < exp:
            return _error_response(401, *_AUTH_FAILED)
        return _Response(
            200,
            self._metrics_text().encode(),
            (("Content-Type", "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"),),
        )

    def _metrics_text(self) -> str:
        """A few of GARM's metrics (metrics/health.go, metrics/scaleset.go), labels in
        the sorted order promhttp writes them."""
        ctl = self._controller_json(with_hostname=False)
        health = {
            "callback_url": ctl.get("callback_url", ""),
            "controller_id": self._controller_id,
            "controller_webhook_url": ctl.get("controller_webhook_url", ""),
            "metadata_url": ctl.get("metadata_url", ""),
            "webhook_url": ctl.get("webhook_url", ""),
        }
        lines = [
            "# HELP garm_health Health of the garm",
            "# TYPE garm_health gauge",
            f"garm_health{{{_prom_labels(health)}}} 1",
        ]
        if self._scalesets:
            lines += [
                "# HELP garm_scaleset_status Status of the scale set",
                "# TYPE garm_scaleset_status gauge",
            ]
        for scaleset in self._scalesets.values():
            labels = {
                "enabled": "true" if scaleset.enabled else "false",
                "id": str(scaleset.id),
                "state": scaleset.state,
            }
            lines.append(f"garm_scaleset_status{{{_prom_labels(labels)}}} {int(scaleset.enabled)}")
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ handlers: controller

    def _controller_get(self, req: _Request) -> _Response:
        return _json_response(self._controller_json(with_hostname=True))

    def _controller_put(self, req: _Request) -> _Response:
        """Validate like GARM, then change only the keys that were sent. (GARM also fetches
        a new garm_agent_releases_url to check it; the double takes it as is.)"""
        body = _decode(req.text, _CONTROLLER_FIELDS)
        _validate_controller(body)
        ctl = self._controller
        for key in _CONTROLLER_FIELDS:
            if key in body and key not in ("ca_cert_bundle", "clear_ca_cert_bundle"):
                ctl[key] = body[key]
        if body.get("garm_agent_releases_url") == "":
            ctl["garm_agent_releases_url"] = _DEFAULT_RELEASES_URL
        if "garm_agent_version" in body:
            version = body["garm_agent_version"].strip()
            ctl["garm_agent_version"] = "" if version == "latest" else version
        if body.get("clear_ca_cert_bundle"):
            ctl["ca_cert_bundle"] = b""
        elif body.get("ca_cert_bundle"):
            ctl["ca_cert_bundle"] = _sanitized_bundle(body["ca_cert_bundle"])
        return _json_response(self._controller_json(with_hostname=False))

    # ------------------------------------------------------------------ handlers: scale sets

    def _scaleset_or_404(self, scaleset_id: int) -> _ScaleSet:
        scaleset = self._scalesets.get(scaleset_id)
        if scaleset is None:
            raise _not_found("error fetching scale set: error fetching scale set by ID: not found")
        return scaleset

    def _list_scalesets(self, req: _Request) -> _Response:
        return _json_response([self._scaleset_json(s, "list") for s in self._scalesets.values()])

    def _get_scaleset(self, req: _Request) -> _Response:
        scaleset = self._scaleset_or_404(_parse_uint32(req.args[0]))
        return _json_response(self._scaleset_json(scaleset, "detail"))

    def _entity(self, kind: str, raw_id: str, wrap: str) -> _Entity:
        """Look up an org/repo the way GARM does: 400 for a malformed UUID, 404 if unknown."""
        short = "org" if kind == "organizations" else "repo"
        canonical = _parse_uuid(raw_id)
        if canonical is None:
            reason = "invalid request" if short == "org" else _uuid_error(raw_id)
            raise _bad_request(f"{wrap}error fetching {short}: error parsing id: {reason}")
        entity = self._entities.get(canonical)
        if entity is None or entity.kind != _ENTITY_KINDS[kind]:
            raise _not_found(f"{wrap}error fetching {short}: not found")
        return entity

    def _entity_scalesets(self, req: _Request) -> _Response:
        entity = self._entity(req.args[0], req.args[1], "error fetching scale sets: ")
        return _json_response(
            [
                self._scaleset_json(s, "entity")
                for s in self._scalesets.values()
                if s.entity is entity
            ]
        )

    def _create_scaleset(self, req: _Request) -> _Response:
        body = _decode(req.text, _CREATE_FIELDS)
        entity = self._entity(
            req.args[0], req.args[1], "error getting entity: error failed to get entity from db: "
        )
        os_type = body.get("os_type", "")
        template_id = self._find_template(os_type, body.get("template_id")).id
        name = body.get("name", "")
        group = body.get("github-runner-group", "") or "Default"
        if not self._runner_group_known(group):
            raise _not_found(
                f"failed to get github runner group for entity {entity.id}: getting runner "
                f"group ID: runner group {group} not found"
            )
        if self._name_taken(entity, name, group, None):
            raise _bad_request(
                "error creating runner scale set: failed to create runner scale set: "
                f"bad request while calling {_GITHUB_ACTIONS_URL}: {_duplicate(name)}"
            )
        max_runners = body.get("max_runners", 0)
        min_idle = body.get("min_idle_runners", 0)
        required = ("provider_name", "flavor", "image", "name")
        if min_idle > max_runners or not max_runners or not all(body.get(k) for k in required):
            raise _server_error()
        if body.get("proxy_id"):
            raise _bad_request(
                f"error checking scale set proxy: proxy with ID {body['proxy_id']} does not exist"
            )
        if self.create_takes:  # GitHub's side of the create, before GARM stores the row
            self._clock.advance(self.create_takes)  # type: ignore[attr-defined]
        now = self._now()
        scaleset = _ScaleSet(
            id=self._next_scaleset_id,
            scale_set_id=self._take_github_id() if self.register_on_create else 0,
            name=name,
            entity=entity,
            created_at=now,
            updated_at=now,
            runner_prefix=body.get("runner_prefix", "") or "garm",
            provider_name=body["provider_name"],
            image=body["image"],
            flavor=body["flavor"],
            os_type=os_type,
            os_arch=body.get("os_arch", ""),
            max_runners=max_runners,
            min_idle_runners=min_idle,
            enabled=body.get("enabled", False),
            disable_update=body.get("disable_update", False),
            enable_shell=body.get("enable_shell", False),
            runner_bootstrap_timeout=body.get("runner_bootstrap_timeout", 0) or 20,
            runner_group=group,
            template_id=template_id,
            extra_specs=body.get("extra_specs") or None,
            tags=self._tags_for(body.get("labels", [])),
        )
        self._next_scaleset_id += 1
        self._scalesets[scaleset.id] = scaleset
        if not scaleset.enabled:
            self.disabled_since[scaleset.id] = now
        serving = self._serving_proc()  # only its controller hears of the new scale set
        if serving.running:
            self._start_worker(serving, scaleset, now, LISTENER_DELAY)
        return _json_response(self._scaleset_json(scaleset, "detail"))

    def _runner_group_known(self, group: str) -> bool:
        """Whether GitHub has the runner group (``runner_groups``; None: any it is asked)."""
        known = self.runner_groups
        return known is None or group.lower() in {"default", *(g.lower() for g in known)}

    def _name_taken(
        self, entity: _Entity, name: str, group: str, itself: _ScaleSet | None
    ) -> bool:
        """GitHub keeps scale set names unique (case-insensitively) per owner and runner
        group; a clash is GitHub's 400, which GARM passes on."""
        return any(
            other is not itself
            and other.entity is entity
            and other.name.lower() == name.lower()
            and other.runner_group.lower() == group.lower()
            for other in self._scalesets.values()
        )

    def _tags_for(self, labels: list[str]) -> list[_Tag]:
        """Link labels through the global, case-insensitive tag table (first spelling wins)."""
        tags: list[_Tag] = []
        for label in labels:
            tag = self._tags.get(label.lower())
            if tag is None:
                tag = self._tags[label.lower()] = _Tag(str(uuid.uuid4()), label)
            if tag not in tags:
                tags.append(tag)
        return tags

    def _update_scaleset(self, req: _Request) -> _Response:
        scaleset_id = _parse_uint32(req.args[0])
        body = _decode(req.text, _UPDATE_FIELDS)
        scaleset = self._scaleset_or_404(scaleset_id)
        if body.get("runner_bootstrap_timeout") == 0:
            raise _bad_request("runner_bootstrap_timeout cannot be 0")
        max_runners = body.get("max_runners", scaleset.max_runners)
        min_idle = body.get("min_idle_runners", scaleset.min_idle_runners)
        if min_idle > max_runners:
            raise _bad_request("min_idle_runners cannot be larger than max_runners")
        if "template_id" in body:
            self._find_template(body.get("os_type") or scaleset.os_type, body["template_id"])
        if body.get("proxy_id"):
            raise _bad_request(
                "error updating pool: error updating scale set: error checking scale set proxy: "
                f"proxy with ID {body['proxy_id']} does not exist"
            )
        changes, bump = _scaleset_changes(scaleset, body)
        group = changes.get("runner_group")
        if group is not None and not self._runner_group_known(group):
            # GARM asks GitHub inside the update's transaction: nothing of it is written.
            raise _not_found(
                "error updating pool: error executing update callback: error fetching runner "
                f"group from github: runner group {group} does not exist"
            )
        new_name = changes.get("name")
        if new_name is not None and self._name_taken(
            scaleset.entity, new_name, scaleset.runner_group, scaleset
        ):
            raise _bad_request(
                "error updating pool: error executing update callback: failed to update "
                f"scaleset in github: bad request while calling {_GITHUB_ACTIONS_URL}/"
                f"{scaleset.scale_set_id}: {_duplicate(new_name)}"
            )
        if changes:
            self._apply(scaleset, changes, bump)
        return _json_response(self._scaleset_json(scaleset, "detail"))

    def _apply(self, scaleset: _ScaleSet, changes: dict[str, Any], bump: bool) -> None:
        """Write a PUT's changes: one gorm Updates call, so updated_at is re-stamped.
        Disabling stops the GitHub listener; enabling starts a new one, which opens
        ``LISTENER_DELAY`` later (once the scale set has its GitHub id).

        Only the process whose port took the PUT hears the update (its watcher): its
        worker takes the new row, or, having none for the scale set, it starts one
        (workers/scaleset/controller_watcher.go handleScaleSetUpdateOperation). Another
        process's worker keeps its old copy: still enabled, the old counts."""
        now = self._now()
        self._settle(scaleset.id, now)
        serving = self._serving_proc()
        if changes.get("enabled") is False:
            self.disabled_since[scaleset.id] = now
            serving.listener_from.pop(scaleset.id, None)
        elif changes.get("enabled"):
            self.disabled_since.pop(scaleset.id, None)
            if scaleset.scale_set_id and scaleset.id in serving.views:
                serving.listener_from[scaleset.id] = now + LISTENER_DELAY
        for key, value in changes.items():
            setattr(scaleset, key, value)
        scaleset.updated_at = now
        scaleset.generation += bump
        if serving.running and scaleset.id not in serving.views:
            self._start_worker(serving, scaleset, now, LISTENER_DELAY)
        elif serving.running:
            serving.views[scaleset.id] = _View.of(scaleset)

    def _delete_scaleset(self, req: _Request) -> _Response:
        scaleset = self._scalesets.get(_parse_uint32(req.args[0]))
        if scaleset is None:
            return _Response(200)
        if any(i.scaleset_id == scaleset.id for i in self._instances.values()):
            raise _bad_request("scale set has runners")
        if scaleset.enabled:
            raise _bad_request("scale set is enabled; disable it first")
        if not self.delete_keeps_record:
            self._settle(scaleset.id, self._now())
            del self._scalesets[scaleset.id]
            self.disabled_since.pop(scaleset.id, None)
            self._queued_jobs.pop(scaleset.id, None)
            self.deletions.append((scaleset.id, scaleset.name, self._now()))
            # Only the serving process's controller stops its worker; another process's
            # worker runs on, its listener failing on the deleted GitHub scale set.
            serving = self._serving_proc()
            serving.views.pop(scaleset.id, None)
            serving.listener_from.pop(scaleset.id, None)
        return _Response(200)

    def _scaleset_instances(self, req: _Request) -> _Response:
        """Runners of a scale set (``[]`` for an unknown id: GARM does not check it).

        GARM never copies the scale set's generation into its runners (they stay at 0), so
        ``outdatedOnly`` lists every runner once the scale set's generation is above 0."""
        scaleset_id = _parse_uint32(req.args[0])
        rows = [i for i in self._instances.values() if i.scaleset_id == scaleset_id]
        if _parse_bool(req.query.get("outdatedOnly", "")):
            scaleset = self._scalesets.get(scaleset_id)
            generation = scaleset.generation if scaleset is not None else 0
            rows = [i for i in rows if generation > 0]
        return _json_response([self._instance_json(i) for i in rows])

    # ------------------------------------------------------------------ handlers: templates

    def _find_template(self, os_type: str, template_id: int | None) -> _Template:
        """runner.findTemplate for a GitHub entity: an explicit id must exist (404) and fit
        the scale set's OS type and forge (400); without one, the first ``system``-owned
        template of that OS type and forge github is picked (400 when there is none)."""
        wrap = "failed to find suitable template: "
        if template_id is None:
            template = next(
                (
                    t
                    for t in self._templates.values()
                    if t.os_type == os_type
                    and t.forge_type == "github"
                    and self._template_owner(t) == _SYSTEM_OWNER
                ),
                None,
            )
            if template is None:
                raise _bad_request(
                    f"{wrap}no template ID supplied and no default template can be found"
                )
        else:
            found = self._templates.get(template_id)
            if found is None:
                raise _not_found(
                    wrap + "failed to get template: failed to get template: not found"
                )
            template = found
        if template.os_type != os_type:
            raise _bad_request(
                wrap + f"selected template OS type ({template.os_type}) and pool OS type "
                f"({os_type}) do not match"
            )
        if template.forge_type != "github":
            raise _bad_request(
                wrap + f"selected template forge type ({template.forge_type}) and pool forge "
                "type (github) do not match"
            )
        return template

    def _list_templates(self, req: _Request) -> _Response:
        """ListTemplates: ``osType`` and ``forgeType`` match exactly, ``partialName`` is a
        case-insensitive SQL ``LIKE '%...%'`` on the name; ``data`` is not loaded."""
        os_type = req.query.get("osType", "")
        forge_type = req.query.get("forgeType", "")
        partial = req.query.get("partialName", "")
        rows = [
            self._template_json(t, with_data=False)
            for t in self._templates.values()
            if os_type in ("", t.os_type)
            and forge_type in ("", t.forge_type)
            and (not partial or _like_contains(t.name, partial))
        ]
        return _json_response(rows)

    def _get_template(self, req: _Request) -> _Response:
        template = self._templates.get(_parse_template_id(req.args[0]))
        if template is None:
            raise _not_found("failed to get template: failed to get template: not found")
        return _json_response(self._template_json(template, with_data=True))

    def _create_template(self, req: _Request) -> _Response:
        """runner.CreateTemplate: validate the params, then parse the template, then insert
        it for the logged-in user (409 when that user already has the name)."""
        body = _decode(req.text, _TEMPLATE_CREATE_FIELDS)
        name, data = body.get("name", ""), body.get("data", b"")
        os_type, forge_type = body.get("os_type", ""), body.get("forge_type", "")
        problem = _template_params_problem(name, data, os_type, forge_type)
        if problem is not None:
            raise _bad_request(f"invalid create params {_go_quote(problem)}")
        _validate_template(data)
        admin = self._admin
        assert admin is not None  # the init-required gate ran first
        if any(t.name == name and t.user_id == admin.id for t in self._templates.values()):
            raise _ApiError(
                409,
                "Conflict",
                "failed to create template: a template name already exists with the "
                "specified name",
            )
        template = self._new_template(
            name, body.get("description", ""), os_type, forge_type, data, admin.id
        )
        return _json_response(self._template_json(template, with_data=True))

    def _update_template(self, req: _Request) -> _Response:
        """runner.UpdateTemplate and the DB update: os/forge type cannot change. Every key
        sent (``name``, ``description``, or non-empty ``data``) counts as a change, even
        with the stored value, and the gorm Save re-stamps updated_at; a body with none of
        them writes nothing."""
        template_id = _parse_template_id(req.args[0])
        body = _decode(req.text, _TEMPLATE_UPDATE_FIELDS)
        if body.get("name") == "":
            raise _bad_request('invalid update params: "name cannot be empty"')
        data = body.get("data", b"")
        if data:
            _validate_template(data)
        template = self._templates.get(template_id)
        if template is None:
            raise _not_found(
                "failed to update template: failed to update template: "
                "failed to get template: not found"
            )
        self._write_template(template, body.get("name"), body.get("description"), data)
        return _json_response(self._template_json(template, with_data=True))

    def _write_template(
        self, template: _Template, name: str | None, description: str | None, data: bytes
    ) -> None:
        """The store's UpdateTemplate write. A rename onto another of the same user's
        templates breaks the unique index inside the Save: a plain error, so 500 (system
        templates, NULL in the index, never clash)."""
        owned = template.user_id is not None
        if (
            owned
            and name is not None
            and any(
                t is not template and t.name == name and t.user_id == template.user_id
                for t in self._templates.values()
            )
        ):
            raise _server_error()
        if name is None and description is None and not data:
            return
        if description is not None:
            template.description = description
        if name is not None:
            template.name = name
        if data:
            template.data = data
        template.updated_at = self._now()

    def _delete_template(self, req: _Request) -> _Response:
        """runner.DeleteTemplate: 200 with an empty body, also for an unknown id (the
        not-found is swallowed); 400 while a scale set (or pool) uses it. The double's
        users are all admins, who may delete system templates too."""
        template = self._templates.get(_parse_template_id(req.args[0]))
        if template is None:
            return _Response(200)
        if any(s.template_id == template.id for s in self._scalesets.values()):
            raise _bad_request(
                "failed to delete template: failed to delete template: "
                "cannot delete template while in use by pools or scale sets"
            )
        del self._templates[template.id]
        return _Response(200)

    def _restore_templates(self, req: _Request) -> _Response:
        """runner.RestoreTemplate: for each (os, forge) asked for (``restore_all``: linux
        then windows, gitea before github; else the body's ``os_type`` and ``forge``), put
        the built-in content back into the first system-owned template of that pair,
        renaming it back to ``<forge>_<os>`` if it was renamed (its description stays),
        or, if there is none, create one with restore's own description. 200, empty body;
        404 for a pair GARM has no built-in template for."""
        body = _decode(req.text, _TEMPLATE_RESTORE_FIELDS)
        if body.get("restore_all"):
            pairs = [(o, f) for o in ("linux", "windows") for f in ("gitea", "github")]
        else:
            pairs = [(body.get("os_type", ""), body.get("forge", ""))]
        for os_type, forge_type in pairs:
            data = _builtin_template(os_type, forge_type)
            name = f"{forge_type}_{os_type}"
            system = next(
                (
                    t
                    for t in self._templates.values()
                    if t.os_type == os_type
                    and t.forge_type == forge_type
                    and self._template_owner(t) in (_SYSTEM_OWNER, "")
                ),
                None,
            )
            if system is not None:
                self._write_template(system, name if system.name != name else None, None, data)
            else:
                description = f"Default template for {forge_type} runners on {os_type}"
                self._new_template(name, description, os_type, forge_type, data, None)
        return _Response(200)

    # ------------------------------------------------------------------ handlers: others

    def _list_entities(self, req: _Request) -> _Response:
        kind = _ENTITY_KINDS[req.args[0]]
        filters = {k: req.query.get(k, "") for k in ("owner", "name", "endpoint")}
        if kind == "organization":
            filters["owner"] = ""
        rows = [
            self._entity_json(e)
            for e in self._entities.values()
            if e.kind == kind
            and filters["name"] in ("", e.name)
            and filters["owner"] in ("", e.owner)
            and filters["endpoint"] in ("", e.endpoint)
        ]
        return _json_response(rows)

    def _list_instances(self, req: _Request) -> _Response:
        return _json_response([self._instance_json(i) for i in self._instances.values()])

    def _instance_or_404(self, name_or_id: str) -> _Instance:
        canonical = _parse_uuid(name_or_id)
        for instance in self._instances.values():
            if (canonical is not None and instance.id == canonical) or (
                canonical is None and instance.name == name_or_id
            ):
                return instance
        raise _not_found("error fetching instance: error fetching instance by name: not found")

    def _get_instance(self, req: _Request) -> _Response:
        return _json_response(self._instance_json(self._instance_or_404(req.args[0])))

    def _delete_instance(self, req: _Request) -> _Response:
        """runner.DeleteRunner: only from the statuses it lists; then GARM removes the
        runner from GitHub (forced or not), which GitHub refuses while the runner's job
        still runs (400, ``JobStillRunningException`` in the details) unless
        ``bypassGHUnauthorized`` is true (GARM then ignores every GitHub error but
        not-found). A runner whose job ended is already gone from GitHub: GARM ignores
        that not-found. A non-forced delete of a runner already pending_force_delete is a
        silent success (the transition GARM's DB refuses is swallowed because the runner
        is already on the deletion lane)."""
        instance = self._instance_or_404(req.args[0])
        if instance.status not in _DELETABLE:
            raise _bad_request(
                'runner must be in one of the following states: "' + ", ".join(_DELETABLE) + '"'
            )
        bypass = _parse_bool(req.query.get("bypassGHUnauthorized", ""))
        job_runs = (
            instance.runner_status == "active"
            and instance.name not in self._finished_unseen
            and instance.name not in self._vm_gone  # its job died with its VM
        )
        if job_runs and not bypass:
            url = (
                f"{_ACTIONS_SERVICE}/_apis/distributedtask/pools/0/agents/"
                f"{instance.agent_id}?api-version=6.0-preview"
            )
            raise _bad_request(
                f"error removing runner from github: request failed for {url}: "
                f"bad request while calling {url}: {_go_quote(_JOB_STILL_RUNNING)}"
            )
        force = _parse_bool(req.query.get("forceRemove", ""))
        now = self._now()
        if force or instance.status != "pending_force_delete":
            instance.status = "pending_force_delete" if force else "pending_delete"
            instance.updated_at = now
            self._adopt(self._serving_proc(), instance)  # its provider worker reaps it
        self.removals.append((instance.name, instance.scaleset_id, now, force))
        return _Response(200)

    def _list_providers(self, req: _Request) -> _Response:
        return _json_response([{"name": name, "type": "external"} for name in self._providers])

    # ------------------------------------------------------------------ handlers: orgs, repos

    def _create_entity(self, req: _Request) -> _Response:
        """runner.CreateOrganization / CreateRepository: validate, resolve the credential
        by name (400 if unknown), refuse a duplicate on the same endpoint (409)."""
        kind = _ENTITY_KINDS[req.args[0]]
        is_org = kind == "organization"
        body = _decode(req.text, _ORG_CREATE_FIELDS if is_org else _REPO_CREATE_FIELDS)
        _validate_entity(body, is_org)
        name, owner = body.get("name", ""), body.get("owner", "")
        credentials_name = body["credentials_name"]
        credential = None
        if body.get("forge_type", "") != "gitea":  # the double has no Gitea credentials
            credential = self._credential_named(credentials_name)
        if credential is None:
            raise _bad_request(f"credentials {credentials_name} not defined")
        if self._entity_named(kind, owner if not is_org else name, name, credential.endpoint):
            what = f"organization {name}" if is_org else f"repository {owner}/{name}"
            raise _ApiError(409, "Conflict", f"{what} already exists")
        now = self._now()
        entity = _Entity(
            kind=kind,
            id=str(uuid.uuid4()),
            owner=name if is_org else owner,
            name=name,
            created_at=now,
            updated_at=now,
            endpoint=credential.endpoint,
            credentials_id=credential.id,
            webhook_secret=body["webhook_secret"],
            pool_balancer_type=body.get("pool_balancer_type", ""),
            agent_mode=body.get("agent_mode", False),
        )
        self._entities[entity.id] = entity
        return _json_response(self._entity_json(entity, "created"))

    def _entity_named(self, kind: str, owner: str, name: str, endpoint: str) -> _Entity | None:
        """GARM's getOrg / getRepo: LOWER() on name (and owner) and endpoint name."""
        for entity in self._entities.values():
            if (
                entity.kind == kind
                and entity.name.lower() == name.lower()
                and entity.owner.lower() == owner.lower()
                and entity.endpoint.lower() == endpoint.lower()
            ):
                return entity
        return None

    def _get_entity(self, req: _Request) -> _Response:
        wrap = f"error fetching {_ENTITY_KINDS[req.args[0]]}: "
        return _json_response(self._entity_json(self._entity(req.args[0], req.args[1], wrap)))

    def _update_entity(self, req: _Request) -> _Response:
        """runner.UpdateOrganization / UpdateRepository and the DB update: only sent,
        non-empty and different values change (one write re-stamps updated_at)."""
        body = _decode(req.text, _ENTITY_UPDATE_FIELDS)
        balancer = body.get("pool_balancer_type", "")
        if balancer not in _BALANCER_TYPES:
            raise _bad_request(f"invalid pool balancer type: {balancer}")
        short = "org" if req.args[0] == "organizations" else "repo"
        wrap = f"error updating {short}: error saving {short}: "
        entity = self._entity(req.args[0], req.args[1], wrap)
        changes = self._rebind(entity, body.get("credentials_name", ""), wrap)
        secret = body.get("webhook_secret", "")
        if secret and secret != entity.webhook_secret:
            changes["webhook_secret"] = secret
        if balancer and balancer != entity.pool_balancer_type:
            changes["pool_balancer_type"] = balancer
        if "agent_mode" in body and body["agent_mode"] != entity.agent_mode:
            changes["agent_mode"] = body["agent_mode"]
        if changes:
            for key, value in changes.items():
                setattr(entity, key, value)
            entity.updated_at = self._now()
        return _json_response(self._entity_json(entity))

    def _rebind(self, entity: _Entity, credentials_name: str, wrap: str) -> dict[str, Any]:
        """updateEntityCredentials: the change of credential a PUT asks for, if any."""
        if not credentials_name:
            return {}
        credential = self._credential_named(credentials_name)
        if credential is None:
            raise _not_found(
                f"{wrap}error fetching credentials: github credentials not found: not found"
            )
        if credential.endpoint != entity.endpoint:
            raise _bad_request(f"{wrap}endpoint mismatch")
        if credential.id == entity.credentials_id:
            return {}
        return {"credentials_id": credential.id}

    def _delete_entity(self, req: _Request) -> _Response:
        """runner.DeleteOrganization / DeleteRepository: 404 if unknown (not idempotent),
        400 while any scale set belongs to it; 200 with an empty body."""
        short = "org" if req.args[0] == "organizations" else "repo"
        entity = self._entity(req.args[0], req.args[1], f"error fetching {short}: ")
        if any(s.entity is entity for s in self._scalesets.values()):
            owner = "organization" if short == "org" else "repo"
            raise _bad_request(f"{owner} has scale sets defined; delete them first")
        del self._entities[entity.id]
        return _Response(200)

    # ------------------------------------------------------------------ handlers: GitHub

    def _list_endpoints(self, req: _Request) -> _Response:
        """A nil slice when there are none: ``null``, not ``[]``."""
        rows = [self._endpoint_json(e) for e in self._endpoints.values()]
        return _json_response(rows or None)

    def _get_endpoint(self, req: _Request) -> _Response:
        endpoint = self._endpoint_named(req.args[0])
        if endpoint is None:
            raise _not_found("failed to get github endpoint: github endpoint not found: not found")
        return _json_response(self._endpoint_json(endpoint))

    def _delete_endpoint(self, req: _Request) -> _Response:
        """204 (no body, no Content-Type) even when unknown; 400 while credentials,
        organizations or repositories use it."""
        endpoint = self._endpoint_named(req.args[0])
        if endpoint is None:
            return _Response(204, b"", ())
        if any(c.endpoint == endpoint.name for c in self._credentials.values()) or any(
            e.endpoint == endpoint.name for e in self._entities.values()
        ):
            raise _bad_request(
                "failed to delete github endpoint: error deleting github endpoint: "
                "cannot delete endpoint with associated entities: invalid request"
            )
        del self._endpoints[endpoint.name]
        return _Response(204, b"", ())

    def _list_credentials(self, req: _Request) -> _Response:
        """A nil slice when there are none: ``null``, not ``[]``."""
        rows = [self._credential_json(c) for c in self._credentials.values()]
        return _json_response(rows or None)

    def _get_credential(self, req: _Request) -> _Response:
        credential = self._credentials.get(_parse_uint64(req.args[0]))
        if credential is None:
            raise _not_found(
                "failed to get github credentials: github credentials not found: not found"
            )
        return _json_response(self._credential_json(credential, detailed=True))

    def _create_credential(self, req: _Request) -> _Response:
        """runner.CreateGithubCredentials: validate (an App key that is not PKCS#1 is a
        plain error, so 500), then the endpoint must exist (404) and the name be free
        (409, case-insensitive)."""
        body = _decode(req.text, _CREDENTIALS_CREATE_FIELDS)
        wrap = "failed to validate github credentials params: "
        if not body.get("name"):
            raise _bad_request(wrap + "missing name")
        if not body.get("endpoint"):
            raise _bad_request(wrap + "missing endpoint")
        auth_type = body.get("auth_type", "")
        if auth_type not in ("pat", "app"):
            raise _bad_request(wrap + "invalid auth_type")
        pat, app = body.get("pat", {}), body.get("app", {})
        if auth_type == "pat" and not pat.get("oauth2_token"):
            raise _bad_request(wrap + "missing oauth2_token")
        if auth_type == "app":
            _validate_app(app)
        wrap = "failed to create github credentials: error creating github credentials: "
        endpoint = self._endpoint_named(body["endpoint"])
        if endpoint is None:
            raise _not_found(wrap + "github endpoint not found: not found")
        if self._credential_named(body["name"]) is not None:
            raise _ApiError(409, "Conflict", wrap + "github credentials already exists: duplicate")
        secret = _secrets(auth_type, pat if auth_type == "pat" else app)
        credential = self._new_credential(
            body["name"], body.get("description", ""), endpoint.name, auth_type, secret
        )
        return _json_response(self._credential_json(credential))

    def _update_credential(self, req: _Request) -> _Response:
        """runner.UpdateGithubCredentials: validate, find (404), refuse the wrong kind of
        secret for the stored auth type (400); a rename onto another credential's name
        breaks the unique index (500). A new secret always counts as a change."""
        credential_id = _parse_uint64(req.args[0])
        body = _decode(req.text, _CREDENTIALS_UPDATE_FIELDS)
        _validate_credentials_update(body)
        wrap = "failed to update github credentials: error updating github credentials: "
        credential = self._credentials.get(credential_id)
        if credential is None:
            raise _not_found(wrap + "github credentials not found: not found")
        changes: dict[str, Any] = {}
        for key in ("name", "description"):
            if key in body and body[key] != getattr(credential, key):
                changes[key] = body[key]
        wrong = "app" if credential.auth_type == "pat" else "pat"
        if wrong in body:
            kinds = ("app", "PAT") if wrong == "app" else ("PAT", "app")
            raise _bad_request(
                wrap + f"cannot update {kinds[0]} credentials for {kinds[1]}: invalid request"
            )
        if credential.auth_type in body:  # a new secret: always written (freshly sealed)
            changes.update(_secrets(credential.auth_type, body[credential.auth_type]))
        taken = self._credential_named(changes.get("name", credential.name))
        if "name" in changes and taken is not None and taken is not credential:
            raise _server_error()
        if changes:
            for key, value in changes.items():
                setattr(credential, key, value)
            credential.updated_at = self._now()
        return _json_response(self._credential_json(credential))

    def _delete_credential(self, req: _Request) -> _Response:
        """204 (no body, no Content-Type) even when unknown; 400 while a repository or
        organization uses it."""
        credential = self._credentials.get(_parse_uint64(req.args[0]))
        if credential is None:
            return _Response(204, b"", ())
        users = {e.kind for e in self._entities.values() if e.credentials_id == credential.id}
        for kind, plural in (("repository", "repositories"), ("organization", "organizations")):
            if kind in users:
                raise _bad_request(
                    "failed to delete github credentials: error deleting github credentials: "
                    f"cannot delete credentials with {plural}: invalid request"
                )
        del self._credentials[credential.id]
        return _Response(204, b"", ())


# --------------------------------------------------------------------------- processes


class GarmProcess:
    """A handle on one GARM process playing on the double's database.

    Why: two GARMs on one database (two units of the charm, each with its own GARM) do not
    share their memory, and each works from its own (see the module docstring). A test
    starts and stops the process, points a client (or a charm unit's ``api-port``) at its
    ``url``, and reads what it holds: the runners it knows, its copy of each scale set, its
    GitHub session and the registration-token calls its listener cost. ``GarmDouble.tick``
    runs every running process's workers; ``consolidate`` runs this one's check now."""

    def __init__(self, double: GarmDouble, name: str):
        self._double = double
        self.name = name

    def __repr__(self) -> str:
        return f"GarmProcess({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, GarmProcess)
            and other._double is self._double
            and other.name == self.name
        )

    def __hash__(self) -> int:
        return hash((id(self._double), self.name))

    def _proc(self) -> _Proc:
        proc = self._double._procs.get(self.name)
        if proc is None:
            raise KeyError(f"GARM process {self.name!r} was forgotten (the double was reset)")
        return proc

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (``https`` in TLS mode): its API is under
        ``url + API_PREFIX``."""
        with self._double._lock:
            self._proc()
            return self._double._http[self.name].url

    @property
    def port(self) -> int:
        with self._double._lock:
            self._proc()
            return self._double._http[self.name].port

    @property
    def running(self) -> bool:
        with self._double._lock:
            return self._proc().running

    def start(self) -> GarmProcess:
        """Start the process (a no-op if it runs): it loads every scale set and runner from
        the database, so it knows all of them, opens its port, tries its GitHub sessions
        ``STARTUP_LISTENER_DELAY`` later and consolidates ``CONSOLIDATION_INTERVAL`` later.
        Returns self."""
        with self._double._lock:
            self._proc()
        self._double._start_process(self.name)
        return self

    def stop(self) -> None:
        """Stop the process cleanly: its sessions are released, its memory and its port
        gone. Its VMs, and every row, stay."""
        with self._double._lock:
            self._proc()
        self._double._stop_process(self.name)

    def restart(self) -> GarmProcess:
        """``stop`` then ``start``: the process forgets, then reloads the database."""
        self.stop()
        return self.start()

    def runners(self) -> list[str]:
        """The names in its runner cache, a name another process reaped included until its
        next consolidation (empty while stopped)."""
        with self._double._lock:
            return list(self._proc().runners)

    def scalesets(self) -> list[int]:
        """The ids of the scale sets it runs a worker for (empty while stopped)."""
        with self._double._lock:
            return list(self._proc().views)

    def scaleset_view(self, scaleset_id: int) -> dict[str, Any] | None:
        """Its worker's copy of the scale set (``enabled``, ``scale_set_id``,
        ``min_idle_runners``, ``max_runners``, ``desired_runner_count``), None without a
        worker for it. Another process's writes never change it."""
        with self._double._lock:
            view = self._proc().views.get(scaleset_id)
            return None if view is None else dict(vars(view))

    def listening(self, scaleset_id: int) -> bool:
        """Whether this process holds the scale set's GitHub message session now."""
        with self._double._lock:
            self._proc()
            holder = self._double._holder(self._double._scalesets.get(scaleset_id))
            return holder is not None and holder.name == self.name

    def registration_token_calls(self, scaleset_id: int | None = None) -> int:
        """GitHub registration-token calls its listeners made so far, one per session it
        tried to open, the refused ones included (for one scale set, or all). Counted
        across restarts, until the double is reset. Calls for scale-ups and
        consolidations are not counted."""
        with self._double._lock:
            proc = self._proc()
            self._double._settle_all(self._double._now())
            if scaleset_id is None:
                return sum(proc.token_calls.values())
            return proc.token_calls.get(scaleset_id, 0)

    def consolidate(self) -> None:
        """Run its consolidation now (``GarmDouble._consolidate``), not waiting for its
        ``CONSOLIDATION_INTERVAL``; the next one is due that long after this. A no-op
        while it is stopped."""
        with self._double._lock:
            proc = self._proc()
            if proc.running:
                self._double._consolidate(proc, self._double._now())


# --------------------------------------------------------------------------- helpers


# PUT /scalesets/{id} keys in updateScaleSet's order: (key, bumps generation, rule).
# "any": a present value counts; "nonempty": GARM ignores an empty string or 0.
_UPDATABLE: tuple[tuple[str, bool, str], ...] = (
    ("enabled", False, "any"),
    ("state", False, "any"),
    ("extended_state", False, "any"),
    ("template_id", False, "any"),
    ("enable_shell", True, "any"),
    ("name", False, "nonempty"),
    ("disable_update", False, "any"),
    ("runner_group", True, "nonempty"),
    ("flavor", True, "nonempty"),
    ("image", True, "nonempty"),
    ("runner_prefix", False, "nonempty"),
    ("max_runners", False, "any"),
    ("min_idle_runners", False, "any"),
    ("os_arch", True, "nonempty"),
    ("os_type", True, "nonempty"),
    ("extra_specs", True, "any"),
    ("runner_bootstrap_timeout", False, "nonempty"),
)


def _scaleset_changes(scaleset: _ScaleSet, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """database/sql updateScaleSet: the columns a PUT changes (present and different) and
    whether the generation goes up. ``extra_specs`` compares raw bytes; unset reads as ""."""
    changes: dict[str, Any] = {}
    bump = False
    for key, bumps, rule in _UPDATABLE:
        if key not in body or (rule == "nonempty" and not body[key]):
            continue
        current = getattr(scaleset, key)
        if key == "extra_specs":
            current = current or ""
        if body[key] != current:
            changes[key] = body[key]
            bump = bump or bumps
    return changes, bump


def _parse_template_id(text: str) -> int:
    """getValueFromVarsAsUint: ``strconv.ParseUint(id, 10, 64)``, 400 naming the value."""
    if not re.fullmatch(r"[0-9]+", text) or int(text) >= 2**64:
        raise _bad_request(f"invalid value for {_go_quote('templateID')}: {_go_quote(text)}")
    return int(text)


def _template_params_problem(name: str, data: bytes, os_type: str, forge_type: str) -> str | None:
    """CreateTemplateParams.Validate: the first thing wrong, in its order, or None."""
    if not name:
        return "name cannot be empty"
    if not data:
        return "template data is empty"
    if os_type not in ("linux", "windows"):
        return f"invalid OS type: {_go_quote(os_type)}"
    if forge_type not in ("github", "gitea"):
        return f"invalid forge type: {_go_quote(forge_type)}"
    return None


def _like_contains(name: str, partial: str) -> bool:
    """SQLite's ``LOWER(name) LIKE LOWER('%<partial>%')``: ``%`` and ``_`` in the partial
    name are wildcards too, and only ASCII letters fold."""
    pattern = "".join(
        ".*" if c == "%" else "." if c == "_" else re.escape(c) for c in _ascii_lower(partial)
    )
    return re.search(pattern, _ascii_lower(name), re.DOTALL) is not None


def _ascii_lower(text: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in text)


def _builtin_template(os_type: str, forge_type: str) -> bytes:
    """internal/templates GetTemplateContent, as restore reaches it (404 when unknown)."""
    wrap = f"failed to get template content for {forge_type}/{os_type}: "
    if forge_type not in ("github", "gitea"):
        raise _not_found(wrap + f"could not find template for forge type: {_go_quote(forge_type)}")
    if os_type not in ("linux", "windows"):
        raise _not_found(
            wrap
            + f"could not find template for forge {forge_type} and OS type: "
            + _go_quote(os_type)
        )
    return _SYSTEM_TEMPLATE_DATA[(os_type, forge_type)].encode()


def _validate_template(data: bytes) -> None:
    """templates.ValidateTemplate as runner.CreateTemplate / UpdateTemplate wrap it: 400
    ``failed to validate template: invalid template: line <n>: <parse error>``."""
    problem = _go_template_problem(data.decode("utf-8", errors="replace"))
    if problem is not None:
        raise _bad_request(f"failed to validate template: invalid template: {problem}")


def _validate_controller(body: dict[str, Any]) -> None:
    """UpdateControllerParams.Validate, checks in its order (400 on the first failure)."""
    if "metadata_url" in body and not _url_ok(body["metadata_url"]):
        raise _bad_request("invalid metadata_url")
    bundle = body.get("ca_cert_bundle", b"")
    if bundle and body.get("clear_ca_cert_bundle"):
        raise _bad_request("ca_cert_bundle and clear_ca_cert_bundle are mutually exclusive")
    if bundle and b"-----BEGIN CERTIFICATE-----" not in bundle:
        raise _bad_request('invalid ca_cert_bundle: "no valid certificates found"')
    if bundle:
        try:
            _sanitized_bundle(bundle)
        except ValueError:
            raise _bad_request(
                'invalid ca_cert_bundle: "invalid certificate in PEM bundle"'
            ) from None
    for key in ("callback_url", "webhook_url", "agent_url"):
        if key in body and not _url_ok(body[key]):
            raise _bad_request(f"invalid {key}")
    version = body.get("garm_agent_version", "").strip()
    canonical = version if version.startswith("v") else "v" + version
    if version not in ("", "latest") and not _SEMVER_RE.fullmatch(canonical):
        raise _bad_request(
            f'invalid garm_agent_version "{version}": '
            'must be "latest" or a semver version (e.g. v1.2.3)'
        )


def _validate_entity(body: dict[str, Any], is_org: bool) -> None:
    """CreateOrgParams.Validate / CreateRepoParams.Validate, checks in their order."""
    wrap = "error validating params: "
    if not is_org and not body.get("owner"):
        raise _bad_request(wrap + "missing owner")
    if not body.get("name"):
        raise _bad_request(wrap + ("missing org name" if is_org else "missing repo name"))
    if not body.get("credentials_name"):
        raise _bad_request(wrap + "missing credentials name")
    if not body.get("webhook_secret"):
        raise _bad_request(wrap + "missing secret")  # a MissingSecretError: also 400
    if body.get("forge_type", "") not in ("", "github", "gitea"):
        raise _bad_request(wrap + "invalid forge type")
    if body.get("pool_balancer_type", "") not in _BALANCER_TYPES:
        raise _bad_request(wrap + "invalid pool balancer type")


def _validate_app(app: dict[str, Any]) -> None:
    """GithubApp.Validate. The key must be a PEM block (400 otherwise) holding a PKCS#1
    key; x509.ParsePKCS1PrivateKey's failure is a plain error, so GARM answers 500.
    The double decides PKCS#1 by the PEM type alone (no DER parsing)."""
    wrap = "failed to validate github credentials params: invalid app: "
    if not app.get("app_id"):
        raise _bad_request(wrap + "missing app_id")
    if not app.get("installation_id"):
        raise _bad_request(wrap + "missing installation_id")
    key = app.get("private_key_bytes", b"")
    if not key:
        raise _bad_request(wrap + "missing private_key_bytes")
    pem_type = _pem_type(key)
    if pem_type is None:
        raise _bad_request(wrap + "invalid private_key_bytes")
    if pem_type != _PKCS1_PEM_TYPE:
        raise _server_error()


def _validate_credentials_update(body: dict[str, Any]) -> None:
    """UpdateGithubCredentialsParams.Validate (before the credential is looked up)."""
    wrap = "failed to validate github credentials params: "
    if "pat" in body and "app" in body:
        raise _bad_request(wrap + "cannot update both PAT and App")
    if "pat" in body and not body["pat"].get("oauth2_token"):
        raise _bad_request(wrap + "missing oauth2_token")
    if "app" in body:
        _validate_app(body["app"])


def _secrets(auth_type: str, body: dict[str, Any]) -> dict[str, Any]:
    """The _Credential secret fields a validated ``pat`` or ``app`` body sets; GARM seals
    only that one payload, so the other kind's fields are cleared."""
    if auth_type == "pat":
        return {
            "oauth2_token": body["oauth2_token"],
            "app_id": 0,
            "installation_id": 0,
            "private_key": b"",
        }
    app = body
    return {
        "oauth2_token": "",
        "app_id": app["app_id"],
        "installation_id": app["installation_id"],
        "private_key": app["private_key_bytes"],
    }


_GO_QUOTE_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _go_quote(text: str) -> str:
    """Go's ``%q`` (strconv.Quote): quotes and backslashes escaped, control characters as
    ``\\n``-style or ``\\x``/``\\u`` escapes, printable text kept as it is."""
    out: list[str] = []
    for char in text:
        code = ord(char)
        if char in _GO_QUOTE_ESCAPES:
            out.append(_GO_QUOTE_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _duplicate(name: str) -> str:
    """The quoted GitHub error body GARM wraps when a scale set name is taken."""
    return f'"A runner scale set with name {name} already exists"'


def _strong(password: str) -> bool:
    """Stand-in for zxcvbn score 4: long enough, with letters, digits and a symbol."""
    return (
        len(password) >= 12
        and any(c.isalpha() for c in password)
        and any(c.isdigit() for c in password)
        and any(not c.isalnum() for c in password)
    )


def _token_of(headers: Message) -> str | None:
    """The token GARM's JWT middleware reads: ``Authorization: <word> <token>`` split on
    single spaces into exactly two parts, else the ``garm_token`` cookie."""
    header = headers.get("Authorization") or ""
    if header:
        parts = header.split(" ")
        return parts[1] if len(parts) == 2 else None
    try:
        cookies = SimpleCookie(headers.get("Cookie") or "")
    except CookieError:
        return None
    morsel = cookies.get("garm_token")
    return morsel.value if morsel is not None else None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _jwt_sign(claims: dict[str, object], secret: str) -> str:
    """An HS256 JWT as golang-jwt v5 writes it: header keys sorted (a Go map), claims in
    the struct's field order, unpadded base64url segments."""
    header = _b64url(_encode({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(_encode(claims).encode())
    signing_input = f"{header}.{payload}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(signature)}"


def _jwt_verify(token: str, secret: str) -> dict[str, Any] | None:
    """The claims of a JWT signed with ``secret`` by an HMAC method, else None: what
    ``jwt.ParseWithClaims`` with GARM's key function accepts (expiry is checked by the
    caller, on the double's clock)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header = json.loads(_b64url_decode(parts[0]))
        claims = json.loads(_b64url_decode(parts[1]))
        signature = _b64url_decode(parts[2])
    except ValueError:
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    digest = _JWT_HMAC.get(str(header.get("alg")))
    if digest is None:
        return None
    expected = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), digest).digest()
    return claims if hmac.compare_digest(expected, signature) else None


def _prom_labels(labels: Mapping[str, object]) -> str:
    """Prometheus text-format labels, sorted by name, values escaped."""

    def escape(value: object) -> str:
        return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return ",".join(f'{name}="{escape(labels[name])}"' for name in sorted(labels))


def _body_for_record(text: str) -> object | None:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# --------------------------------------------------------------------------- Go templates

# GARM parses install templates with text/template and no FuncMap of its own
# (internal/templates parseTemplate), so only Go's built-in functions exist.
_GO_FUNCS = frozenset(
    {
        "and",
        "call",
        "html",
        "index",
        "slice",
        "js",
        "len",
        "not",
        "or",
        "print",
        "printf",
        "println",
        "urlquery",
        "eq",
        "ge",
        "gt",
        "le",
        "lt",
        "ne",
    }
)
_GO_KEYWORDS = frozenset(
    {"block", "break", "continue", "define", "else", "end", "if", "range", "template", "with"}
)
_GO_SPACE = frozenset(" \t\r\n")
_GO_TERMINATORS = _GO_SPACE | frozenset(".,|:)(")  # what may follow a name in an action
# Token kinds that can start an operand (parse.go pipeline and term).
_GO_OPERANDS = frozenset(
    {"word", "dot", "nil", "var", "field", "bool", "char", "number", "lparen", "string", "raw"}
)


@dataclass
class _GoToken:
    """One lexer item of an action; ``error`` items carry the lexer's message."""

    kind: str
    text: str
    line: int

    def describe(self) -> str:
        """parse.item's String: keywords, ``.`` and ``nil`` as ``<x>``, the rest quoted and
        cut after ten characters."""
        if self.kind in ("keyword", "dot", "nil"):
            return f"<{self.text}>"
        if len(self.text) > 10:
            return _go_quote(self.text[:10]) + "..."
        return _go_quote(self.text)


class _GoTemplateError(Exception):
    """A text/template parse error: the line it names and the message after it."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


class _GoLexError(Exception):
    """The lexer stops: an error item at ``pos`` replaces the item that starts there."""

    def __init__(self, pos: int, message: str):
        super().__init__(message)
        self.pos = pos
        self.message = message


def _go_template_problem(text: str) -> str | None:
    """None when Go's ``template.New("").Parse(text)`` would accept the text, else the
    error as GARM cleans it up: ``line <n>: <message>``.

    An approximation of text/template/parse, good for what an install template gets
    wrong: delimiters (an action or comment left open, stray characters such as a second
    ``{{`` inside an action, open quotes and parentheses), ``if``/``range``/``with``/
    ``define``/``block`` left without ``end`` or an ``end``/``else`` too many, empty
    actions and pipelines, ``break``/``continue`` outside ``range`` and calls of
    functions Go does not have. It does not check variable scopes, number syntax or
    what a pipeline stage may start with."""
    try:
        _GoTemplateCheck(text).run()
    except _GoTemplateError as exc:
        return f"line {exc.line}: {exc.message}"
    return None


class _GoTemplateCheck:
    """Lexes the text one action at a time and parses each action, keeping the open
    blocks on a stack, so errors come out in the order Go's parser meets them."""

    def __init__(self, text: str):
        self.text = text
        self.newlines = [i for i, char in enumerate(text) if char == "\n"]
        # Open blocks, innermost last: (context, in its else branch).
        self.stack: list[tuple[str, bool]] = []
        self.tokens: list[_GoToken] = []
        self.index = 0
        self.depth = 0  # open parentheses in the current action
        self.action_line = 0

    def line_at(self, pos: int) -> int:
        return bisect.bisect_left(self.newlines, pos) + 1

    def run(self) -> None:
        text, pos = self.text, 0
        while (start := text.find("{{", pos)) >= 0:
            inner = start + 2
            if text[inner : inner + 1] == "-" and text[inner + 1 : inner + 2] in _GO_SPACE:
                inner += 2  # a left trim marker
            if text.startswith("/*", inner):
                pos = self.skip_comment(start, inner)
                continue
            pos = self.lex_action(inner)
            self.parse_action(self.line_at(start))
        if self.stack:
            raise _GoTemplateError(self.line_at(len(text)), "unexpected EOF")

    # -------------------------------------------------------------- lexer

    def skip_comment(self, start: int, inner: int) -> int:
        """lexComment: ``/* ... */`` then the right delimiter, nothing in between."""
        close = self.text.find("*/", inner + 2)
        if close < 0:
            raise _GoTemplateError(self.line_at(start), "unclosed comment")
        end = self.right_delim(close + 2)
        if end is None:
            raise _GoTemplateError(self.line_at(start), "comment ends before closing delimiter")
        return end + 2

    def right_delim(self, pos: int) -> int | None:
        """Where ``}}`` starts if a right delimiter (maybe trim-marked) starts at pos."""
        if self.text.startswith("}}", pos):
            return pos
        if self.text[pos : pos + 1] in _GO_SPACE and self.text.startswith("-}}", pos + 1):
            return pos + 2
        return None

    def lex_action(self, pos: int) -> int:
        """Lex one action into ``self.tokens``, ending with an ``rdelim`` item or an
        ``error`` item (which stops the lexer); returns where the text goes on."""
        self.tokens, self.index, self.depth = [], 0, 0
        try:
            while (close := self.right_delim(pos)) is None:
                if pos >= len(self.text):
                    raise _GoLexError(pos, "unclosed action")
                pos = self.lex_item(pos)
            if self.depth:
                raise _GoLexError(pos, "unclosed left paren")
        except _GoLexError as exc:
            self.tokens.append(_GoToken("error", exc.message, self.line_at(exc.pos)))
            return len(self.text)
        self.tokens.append(_GoToken("rdelim", "}}", self.line_at(close)))
        return close + 2

    def lex_item(self, pos: int) -> int:
        """lexInsideAction: one item from ``pos``; returns where the next one starts."""
        char, after = self.text[pos], self.text[pos + 1 : pos + 2]
        if char in _GO_SPACE:
            kind, end = "space", pos + 1
            while self.text[end : end + 1] in _GO_SPACE and self.right_delim(end) is None:
                end += 1
        elif char in "\"'`":
            kind, end = self.lex_quoted(pos)
        elif char in "():|=":
            kind, end = self.lex_operator(pos)
        elif char == "$" or (char == "." and not after.isdigit()):
            kind, end = self.lex_name(pos)
        elif char in "+-." or "0" <= char <= "9":
            kind, end = self.lex_number(pos)
        elif _go_alnum(char):
            kind, end = self.lex_name(pos)
        elif char.isascii() and char.isprintable():
            kind, end = "punct", pos + 1
        else:
            raise _GoLexError(pos, f"unrecognized character in action: {_go_rune(char)}")
        self.tokens.append(_GoToken(kind, self.text[pos:end], self.line_at(pos)))
        return end

    def lex_number(self, pos: int) -> tuple[str, int]:
        """A number, loosely: a sign alone is bad syntax, the rest is not checked."""
        end = pos + 1
        while end < len(self.text) and (_go_alnum(self.text[end]) or self.text[end] in ".+-"):
            end += 1
        if end == pos + 1 and self.text[pos] in "+-":
            raise _GoLexError(pos, f"bad number syntax: {_go_quote(self.text[pos])}")
        return "number", end

    def lex_quoted(self, pos: int) -> tuple[str, int]:
        """A string, character constant or raw string; unterminated is an error."""
        quote = self.text[pos]
        if quote == "`":
            end = self.text.find("`", pos + 1)
            if end < 0:
                raise _GoLexError(pos, "unterminated raw quoted string")
            return "raw", end + 1
        end = pos + 1
        while end < len(self.text) and self.text[end] not in (quote, "\n"):
            end += 2 if self.text[end] == "\\" and self.text[end + 1 : end + 2] != "\n" else 1
        if self.text[end : end + 1] != quote:
            what = "quoted string" if quote == '"' else "character constant"
            raise _GoLexError(pos, f"unterminated {what}")
        return ("string" if quote == '"' else "char"), end + 1

    def lex_operator(self, pos: int) -> tuple[str, int]:
        char = self.text[pos]
        if char == "(":
            self.depth += 1
            return "lparen", pos + 1
        if char == ")":
            self.depth -= 1
            if self.depth < 0:
                raise _GoLexError(pos, "unexpected right paren")
            return "rparen", pos + 1
        if char == ":":
            if self.text[pos + 1 : pos + 2] != "=":
                raise _GoLexError(pos, "expected :=")
            return "declare", pos + 2
        return ("pipe" if char == "|" else "assign"), pos + 1

    def lex_name(self, pos: int) -> tuple[str, int]:
        """A variable, field, ``.``, keyword, bool, ``nil`` or identifier; it must be
        followed by a terminator (a space, ``.,|:()`` or the right delimiter)."""
        char = self.text[pos]
        end = pos + 1 if char in "$." else pos
        while end < len(self.text) and _go_alnum(self.text[end]):
            end += 1
        word = self.text[pos:end]
        follow = self.text[end : end + 1]
        if follow and follow not in _GO_TERMINATORS and self.right_delim(end) is None:
            raise _GoLexError(pos, f"bad character {_go_rune(follow)}")
        if char == "$":
            return "var", end
        if char == ".":
            return ("field" if end > pos + 1 else "dot"), end
        if word in _GO_KEYWORDS:
            return "keyword", end
        return ("bool" if word in ("true", "false") else "nil" if word == "nil" else "word"), end

    # -------------------------------------------------------------- parser

    def next(self) -> _GoToken:
        token = self.tokens[min(self.index, len(self.tokens) - 1)]
        self.index += 1
        return token

    def next_non_space(self) -> _GoToken:
        token = self.next()
        while token.kind == "space":
            token = self.next()
        return token

    def peek_non_space(self) -> _GoToken:
        index = self.index
        token = self.next_non_space()
        self.index = index
        return token

    def unexpected(self, token: _GoToken, context: str) -> _GoTemplateError:
        """Tree.unexpected: a lexer error names where its action began when that was on
        another line."""
        if token.kind != "error":
            return _GoTemplateError(token.line, f"unexpected {token.describe()} in {context}")
        extra = ""
        if self.action_line and self.action_line != token.line:
            extra = f" in action started at :{self.action_line}"
            if token.text.endswith(" action"):
                extra = extra[len(" in action") :]
        return _GoTemplateError(token.line, token.text + extra)

    def expect(self, kind: str, context: str) -> _GoToken:
        token = self.next_non_space()
        if token.kind != kind:
            raise self.unexpected(token, context)
        return token

    def parse_action(self, action_line: int) -> None:
        """One action, as parse(), itemList and action() see it."""
        first = self.peek_non_space()
        keyword = first.text if first.kind == "keyword" else ""
        if keyword == "define" and not self.stack:
            self.action_line = 0  # parse() takes a top-level define before textOrAction
            self.next_non_space()
            self.template_name("define clause")
            self.expect("rdelim", "define clause")
            self.stack.append(("define clause", False))
            return
        self.action_line = action_line
        if keyword in ("", "define"):  # elsewhere define is no control word: a bad command
            self.pipeline("command", "rdelim")
            return
        self.next_non_space()
        if keyword in ("if", "range", "with"):
            self.pipeline(keyword, "rdelim")
            self.stack.append((keyword, False))
        elif keyword in ("block", "template"):
            self.template_call(keyword)
        elif keyword in ("break", "continue"):
            token = self.expect("rdelim", "{{" + keyword + "}}")
            if not self.in_range():
                raise _GoTemplateError(token.line, f"{{{{{keyword}}}}} outside {{{{range}}}}")
        elif keyword == "end":
            token = self.expect("rdelim", "end")
            if not self.stack:
                raise _GoTemplateError(token.line, "unexpected {{end}}")
            self.stack.pop()
        else:
            self.else_branch()

    def template_name(self, context: str) -> None:
        token = self.next_non_space()
        if token.kind not in ("string", "raw"):
            raise self.unexpected(token, context)

    def template_call(self, keyword: str) -> None:
        """``{{block "name" pipeline}}`` opens a body; ``{{template "name" [pipeline]}}``
        does not."""
        context = f"{keyword} clause"
        self.template_name(context)
        if keyword == "block":
            self.pipeline(context, "rdelim")
            self.stack.append((context, False))
        elif self.peek_non_space().kind != "rdelim":
            self.pipeline(context, "rdelim")

    def in_range(self) -> bool:
        """Whether a ``range`` body (not its else branch) encloses this point of the
        current template (define and block bodies are templates of their own)."""
        for context, in_else in reversed(self.stack):
            if context in ("define clause", "block clause"):
                return False
            if context == "range" and not in_else:
                return True
        return False

    def else_branch(self) -> None:
        """elseControl and what parseControl makes of the else: ``else if`` in an if and
        ``else with`` in a with chain on; a second else, or one at top level or in a
        define or block body, is an error."""
        chained = self.peek_non_space()
        is_chain = chained.kind == "keyword" and chained.text in ("if", "with")
        token = chained if is_chain else self.expect("rdelim", "else")
        if not self.stack:
            raise _GoTemplateError(token.line, "unexpected {{else}}")
        context, in_else = self.stack[-1]
        if context in ("define clause", "block clause"):
            raise _GoTemplateError(token.line, f"unexpected {{{{else}}}} in {context}")
        if in_else:
            raise _GoTemplateError(token.line, "expected end; found {{else}}")
        if not is_chain:
            self.stack[-1] = (context, True)
            return
        if chained.text != context:
            raise self.unexpected(chained, "input")
        self.next_non_space()
        self.pipeline(context, "rdelim")

    def pipeline(self, context: str, end: str) -> None:
        """Tree.pipeline: optional declarations, then commands up to ``end``; none at
        all is ``missing value for <context>``."""
        self.declarations(context)
        commands = 0
        while True:
            token = self.next_non_space()
            if token.kind == end:
                if not commands:
                    raise _GoTemplateError(token.line, f"missing value for {context}")
                return
            if token.kind not in _GO_OPERANDS:
                raise self.unexpected(token, context)
            self.index -= 1
            self.command()
            commands += 1

    def declarations(self, context: str) -> None:
        """``$x :=`` (or ``=``), and ``$i, $e :=`` in a range."""
        if self.peek_non_space().kind != "var":
            return
        index = self.index
        self.next_non_space()
        after = self.peek_non_space()
        if after.kind in ("declare", "assign"):
            self.next_non_space()
        elif after.kind == "punct" and after.text == ",":
            self.next_non_space()
            if context != "range" or self.next_non_space().kind != "var":
                raise _GoTemplateError(after.line, f"too many declarations in {context}")
            token = self.next_non_space()
            if token.kind not in ("declare", "assign"):
                raise self.unexpected(token, context)
        else:
            self.index = index

    def command(self) -> None:
        """Tree.command: space-separated operands up to ``|``, ``)`` or ``}}``."""
        while True:
            self.operand()
            token = self.next()
            if token.kind == "space":
                continue
            if token.kind in ("rdelim", "rparen"):
                self.index -= 1
            elif token.kind != "pipe":
                raise self.unexpected(token, "operand")
            return

    def operand(self) -> None:
        """Tree.term plus the fields chained to it; nothing when no term comes next."""
        token = self.next_non_space()
        if token.kind == "word" and token.text not in _GO_FUNCS:
            raise _GoTemplateError(token.line, f"function {_go_quote(token.text)} not defined")
        if token.kind == "lparen":
            self.pipeline("parenthesized pipeline", "rparen")
        elif token.kind not in _GO_OPERANDS:
            self.index -= 1
            return
        while self.tokens[min(self.index, len(self.tokens) - 1)].kind == "field":
            self.index += 1


def _go_alnum(char: str) -> bool:
    """The lexer's isAlphaNumeric: underscore, letters and digits."""
    return char == "_" or char.isalpha() or char.isdigit()


def _go_rune(char: str) -> str:
    """Go's ``%#U``: ``U+007B '{'``, without the quoted character when not printable."""
    return f"U+{ord(char):04X}" + (f" '{char}'" if char.isprintable() else "")


# --------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    """The HTTP server; tracks open connections so ``stop`` can cut keep-alive clients."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], double: GarmDouble, process: str):
        super().__init__(address, _Handler)
        self.double = double
        self.process = process
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In TLS mode, the handshake first, in this connection's own thread (so a client
        that never finishes it holds up no other): one that fails is recorded and the
        connection closed, with nothing read from it."""
        context = self.double._tls
        if context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(_TLS_HANDSHAKE_TIMEOUT)
        try:
            wrapped = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            with self.double._lock:
                self.double.tls_failures.append(getattr(exc, "reason", None) or str(exc))
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            self.shutdown_request(wrapped)

    def track(self, connection: socket.socket, open_: bool) -> None:
        with self._connections_lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections, self._connections = self._connections, set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


_TLS_HANDSHAKE_TIMEOUT = 10.0


def _sanitized_bundle(bundle: bytes) -> bytes:
    """A CA bundle as GARM stores it (garm-provider-common ``SanitizeCABundle``, applied by
    ``Runner.UpdateController``): every PEM block parsed (ValueError for one that is not
    a certificate), duplicates by DER dropped, each re-encoded as Go's ``pem.Encode``
    writes it. So what a client sent is not always what it reads back."""
    seen: dict[bytes, bytes] = {}
    for cert in x509.load_pem_x509_certificates(bundle):
        seen.setdefault(cert.public_bytes(Encoding.DER), cert.public_bytes(Encoding.PEM))
    return b"".join(seen.values())


class _Http:
    """One GARM process's port: bound while the process runs, served while the double is.

    A stopped process closes it (a client meets a refused connection, as with a GARM that
    is down); starting again binds the same port."""

    def __init__(self, double: GarmDouble, process: str, port: int):
        self._double = double
        self._process = process
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.bind()

    @property
    def url(self) -> str:
        scheme = "http" if self._double._tls is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    def drop_connections(self) -> None:
        if self._server is not None:
            self._server.close_connections()

    def bind(self) -> None:
        if self._server is None:
            self._server = _Server(("127.0.0.1", self.port), self._double, self._process)
            self.port = self._server.server_address[1]

    def serve(self) -> None:
        self.bind()
        if self._thread is None and self._server is not None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.02},  # how long close() waits for the loop
                name=f"garm-double-{self._process}",
                daemon=True,
            )
            self._thread.start()

    def close(self) -> None:
        """Stop serving, drop open keep-alive connections and free the port."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        if thread is not None:
            server.shutdown()
            thread.join()
        server.close_connections()
        server.server_close()


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive (like Go's server); every method goes to the double."""

    protocol_version = "HTTP/1.1"
    timeout = 60  # GARM's idle timeout

    @property
    def _owner(self) -> _Server:
        return cast(_Server, self.server)

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without this, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._owner.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._owner.track(self.connection, False)

    def __getattr__(self, name: str) -> Callable[[], None]:
        if name.startswith("do_"):
            return lambda: self._serve(name[3:])
        raise AttributeError(name)

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output clean."""

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def _serve(self, method: str) -> None:
        body = self._read_body()
        owner = self._owner
        response = owner.double._handle(method, self.path, self.headers, body, owner.process)
        if response is None:
            self.close_connection = True
            return
        self.send_response_only(response.status)
        self.send_header("Date", self.date_time_string())
        for key, value in response.headers:
            self.send_header(key, value)
        if response.status != 204:  # Go's server sends no Content-Length (or body) on 204
            self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if method != "HEAD" and response.status != 204:
            self.wfile.write(response.body)


def main(argv: list[str] | None = None) -> None:
    """Run the double until Ctrl-C, for poking at a client by hand."""
    parser = argparse.ArgumentParser(description="GARM REST API test double on 127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument(
        "--tls", nargs=2, metavar=("CERTIFICATE", "KEY"), help="serve HTTPS with these files"
    )
    parser.add_argument(
        "--seed",
        action="store_true",
        help='add provider "openstack", GitHub App credential "example-app", and org '
        '"example-org" and repo "example/repo" using it',
    )
    args = parser.parse_args(argv)
    double = GarmDouble(port=args.port, tls=(args.tls[0], args.tls[1]) if args.tls else None)
    if args.seed:
        double.add_provider("openstack")
        print(f"credential example-app: {double.add_credential('example-app')}")
        print(f"org example-org: {double.add_org('example-org', credentials='example-app')}")
        repo = double.add_repo("example", "repo", credentials="example-app")
        print(f"repo example/repo: {repo}")
    double.start()
    print(f"GARM double at {double.url} (API under {double.url}{API_PREFIX})")
    print(f"username: {double.username}")
    print(f"password: {double.password}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        double.stop()


if __name__ == "__main__":
    main()

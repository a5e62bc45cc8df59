"""A thin client for the GARM REST API: one method per endpoint the charm uses.

Two kinds of error: ``GarmUnreachable`` (no answer: the pass stops) and ``GarmApiError``
(GARM said no: contained to one write). Neither ever carries a credential or token.
"""

from __future__ import annotations

import json
import re
import ssl
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from garm.models import ControllerInfo, Credential, Entity, Instance, ScaleSet, Template

API_PREFIX = "/api/v1"
_GITHUB_MESSAGE = re.compile(r'\\?"message\\?"\s*:\s*\\?"((?:[^"\\]|\\[^"])*)')
_URL = re.compile(r"\bhttps?://[^\s\"]*[^\s\":,.]")
_CAUSE_LENGTH = 120
_ENTITY_ROUTES = {"organization": "organizations", "repository": "repositories"}


class GarmError(Exception):
    """Base of every error this client raises."""


class GarmUnreachable(GarmError):  # noqa: N818 (the name says what happened)
    """GARM did not answer: connection refused or reset, or a timeout."""


class GarmApiError(GarmError):
    """GARM answered with an error status; ``error`` and ``details`` are its body."""

    def __init__(self, method: str, path: str, status: int, error: str, details: str):
        self.method = method
        self.path = path
        self.status = status
        self.error = error
        self.details = details
        text = f"{method} {path}: {status} {error}"
        super().__init__(f"{text}: {details}" if details else text)

    @property
    def cause(self) -> str:
        """The refusal in one short line, for a status message.

        GARM wraps GitHub's answer whole (call chain, URL, JSON: easily 600 characters):
        GitHub's ``message`` if there is one, else the innermost cause without URLs.
        """
        text = self.details or self.error or str(self.status)
        found = _GITHUB_MESSAGE.search(text)
        if found:
            text = found.group(1)
        text = " ".join(_URL.sub("", text.replace('\\"', '"')).split())
        # Go wraps errors outside in: the innermost, most specific cause comes last.
        parts = [p.strip(' "') for p in text.split(": ") if p.strip(' "')]
        if len(parts) > 1:
            text = parts[-1] if len(parts[-1]) >= 12 else ": ".join(parts[-2:])
        text = text.strip(' :"')
        return text if len(text) <= _CAUSE_LENGTH else text[: _CAUSE_LENGTH - 1] + "…"

    @property
    def name_taken(self) -> bool:
        """GitHub already holds a scale set of this name (GARM passes on its 400)."""
        return self.status == 400 and "already exists" in self.details


class GarmClient:
    """Talks to one GARM as its admin user.

    ``timeout`` (connect, read) bounds every request, so a hung GARM never hangs a hook.
    A 401 gets one fresh login and one retry (GARM also answers 401 for GitHub's 401/403,
    which no login fixes). ``token`` is a kept login token (``garm.admin_token``).
    ``ca_file`` is the CA GARM's certificate must chain to (``garm.tls``): to a server
    showing another nothing is sent, and the request fails as ``GarmUnreachable``.
    """

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        timeout: tuple[float, float] = (5.0, 30.0),
        session: requests.Session | None = None,
        token: str | None = None,
        ca_file: str | None = None,
    ):
        self._base = base_url.rstrip("/") + API_PREFIX
        self._username = username
        self._password = password
        self._timeout = timeout
        self._session = session or requests.Session()
        # GARM is on this machine: the hook's proxy settings would only stand in the way.
        self._session.trust_env = False
        if ca_file is not None:
            trust_only(self._session, ca_file)
        self._token = token or None
        # Whether GARM's last answer to ``_token`` was a 401 (a retry that failed too).
        self._refused = False

    def close(self) -> None:
        """Release the connection pool."""
        self._session.close()

    @property
    def token(self) -> str | None:
        """The login token to offer GARM again later; never one GARM last answered 401.

        Even for GitHub's refusal: that costs a later client one login, never a bad request.
        """
        return None if self._refused else self._token

    def login(self) -> None:
        """Log in and keep the token for later requests."""
        body = {"username": self._username, "password": self._password}
        data = self._send("POST", "/auth/login", body, authenticated=False)
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise GarmApiError("POST", "/auth/login", 200, "no token in login answer", "")
        self._token, self._refused = token, False

    def get_metrics_token(self) -> str:
        """A new ``read_metrics`` JWT for ``/metrics``: valid ``time_to_live``, not revocable."""
        data = self._send("GET", "/metrics-token")
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise GarmApiError("GET", "/metrics-token", 200, "no token in the answer", "")
        return token

    def list_scalesets(self) -> list[ScaleSet]:
        """Every scale set of every entity (``GET /scalesets``)."""
        return [ScaleSet.from_json(item) for item in self._list("/scalesets")]

    def list_instances(self) -> list[Instance]:
        """Every runner instance, pools and scale sets alike (``GET /instances``)."""
        return [Instance.from_json(item) for item in self._list("/instances")]

    def list_providers(self) -> list[str]:
        """Names of the providers GARM was configured with."""
        return [p["name"] for p in self._list("/providers") if isinstance(p.get("name"), str)]

    def list_organizations(self) -> list[Entity]:
        """Every organization registered in GARM."""
        return [Entity.from_json("organization", o) for o in self._list("/organizations")]

    def list_repositories(self) -> list[Entity]:
        """Every repository registered in GARM."""
        return [Entity.from_json("repository", r) for r in self._list("/repositories")]

    def list_templates(self) -> list[Template]:
        """Every runner install template, without bodies (GARM's list leaves them out)."""
        return [Template.from_json(t) for t in self._list("/templates")]

    def get_template(self, template_id: int) -> Template:
        """One runner install template with its body."""
        return Template.from_json(self._object("GET", f"/templates/{template_id}"))

    def get_controller(self) -> ControllerInfo:
        """The controller's URLs (reachable before they are set, unlike other routes)."""
        return ControllerInfo.from_json(self._object("GET", "/controller", empty_ok=True))

    def list_credentials(self) -> list[Credential]:
        """Every GitHub credential (GARM answers null, not [], when there is none)."""
        return [Credential.from_json(c) for c in self._list("/github/credentials")]

    def first_run(self, username: str, email: str, password: str) -> bool:
        """Create the admin user; False when GARM already has one (409 Conflict)."""
        body = {"username": username, "email": email, "password": password}
        try:
            self._send("POST", "/first-run", body, authenticated=False)
        except GarmApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def update_controller(self, changes: dict[str, Any]) -> ControllerInfo:
        """Set controller URLs (until then GARM answers 409 ``urls_required`` elsewhere)."""
        return ControllerInfo.from_json(self._object("PUT", "/controller", changes, empty_ok=True))

    def create_credential(self, body: dict[str, Any]) -> Credential:
        """Create a GitHub credential (``auth_type`` with an underscore on requests)."""
        return Credential.from_json(self._object("POST", "/github/credentials", body))

    def update_credential(self, credential_id: int, body: dict[str, Any]) -> Credential:
        """Change a GitHub credential's description or App settings."""
        return Credential.from_json(
            self._object("PUT", f"/github/credentials/{credential_id}", body)
        )

    def delete_credential(self, credential_id: int) -> None:
        """Delete a GitHub credential; GARM refuses while an org or repo uses it."""
        self._send("DELETE", f"/github/credentials/{credential_id}")

    def create_entity(self, kind: str, body: dict[str, Any]) -> Entity:
        """Register an organization or repository."""
        data = self._object("POST", f"/{self._entity_route(kind)}", body)
        return Entity.from_json("repository" if kind == "repository" else "organization", data)

    def update_entity(self, entity: Entity, body: dict[str, Any]) -> None:
        """Change an organization's or repository's credential (or webhook secret)."""
        self._send("PUT", f"/{self._entity_route(entity.kind)}/{entity.id}", body)

    def delete_entity(self, entity: Entity) -> None:
        """Remove an organization or repository; GARM refuses while it has scale sets."""
        self._send("DELETE", f"/{self._entity_route(entity.kind)}/{entity.id}")

    @staticmethod
    def _entity_route(kind: str) -> str:
        route = _ENTITY_ROUTES.get(kind)
        if route is None:
            raise ValueError(f"the charm does not manage {kind} entities")
        return route

    def create_scaleset(self, entity: Entity, body: dict[str, Any]) -> ScaleSet:
        """Create a scale set under an organization or repository."""
        route = self._entity_route(entity.kind)
        return ScaleSet.from_json(self._object("POST", f"/{route}/{entity.id}/scalesets", body))

    def update_scaleset(self, scaleset_id: int, changes: dict[str, Any]) -> ScaleSet:
        """Change the given fields of a scale set; every key is sent, zero values too."""
        return ScaleSet.from_json(self._object("PUT", f"/scalesets/{scaleset_id}", changes))

    def get_scaleset(self, scaleset_id: int) -> ScaleSet | None:
        """One scale set as GARM holds it now, or None when GARM has no such scale set."""
        try:
            return ScaleSet.from_json(self._object("GET", f"/scalesets/{scaleset_id}"))
        except GarmApiError as exc:
            if exc.status == 404:
                return None
            raise

    def delete_scaleset(self, scaleset_id: int) -> None:
        """Ask GARM to delete a scale set; 200 may keep it (docs/reference/garm-api.md §2.6)."""
        self._send("DELETE", f"/scalesets/{scaleset_id}")

    def delete_instance(self, name: str, *, force: bool = False) -> None:
        """Remove a runner instance; ``force`` removes it even if the provider fails."""
        params = {"forceRemove": "true"} if force else None
        self._send("DELETE", f"/instances/{name}", params=params)

    def create_template(self, body: dict[str, Any]) -> Template:
        """Create a runner install template (``data`` base64 in ``body``)."""
        return Template.from_json(self._object("POST", "/templates", body))

    def update_template(self, template_id: int, changes: dict[str, Any]) -> Template:
        """Change a template's name, description or body in place."""
        return Template.from_json(self._object("PUT", f"/templates/{template_id}", changes))

    def delete_template(self, template_id: int) -> None:
        """Delete a template; GARM refuses while a pool or scale set uses it (400)."""
        self._send("DELETE", f"/templates/{template_id}")

    def _object(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        empty_ok: bool = False,
    ) -> dict[str, Any]:
        """An answer that must be one JSON object (empty only where ``empty_ok``), or refused."""
        data = self._send(method, path, body)
        if data is None and empty_ok:
            return {}
        if not isinstance(data, dict):
            raise GarmApiError(method, path, 200, "expected an object", type(data).__name__)
        return data

    def _list(self, path: str) -> list[dict[str, Any]]:
        data = self._send("GET", path)
        # GitHub credentials and endpoints answer null for "none"; treat every list so.
        if data is None:
            return []
        if not isinstance(data, list):
            raise GarmApiError("GET", path, 200, "expected a list", type(data).__name__)
        return [item for item in data if isinstance(item, dict)]

    def _send(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        params: dict[str, str] | None = None,
        authenticated: bool = True,
    ) -> Any:
        # Compact separators: GARM stores extra_specs as the bytes it was sent.
        data = None if body is None else json.dumps(body, separators=(",", ":"))

        def request() -> requests.Response:
            headers = {"Content-Type": "application/json"}
            if authenticated:
                headers["Authorization"] = f"Bearer {self._token}"
            try:
                return self._session.request(
                    method,
                    self._base + path,
                    data=data,
                    params=params,
                    headers=headers,
                    timeout=self._timeout,
                )
            except requests.RequestException as exc:
                # GARM's answer was not heard. The exception text can carry the request:
                # name only the route and the kind.
                raise GarmUnreachable(f"{method} {path}: {type(exc).__name__}") from None

        if authenticated and self._token is None:
            self.login()
        response = request()
        if response.status_code == 401 and authenticated:
            # Forgotten first, so that a login that fails leaves no token to keep.
            self._token = None
            self.login()
            response = request()
        if authenticated:
            self._refused = response.status_code == 401
        if response.status_code >= 400:
            raise _api_error(method, path, response)
        if not response.content.strip():
            return None
        try:
            return response.json()
        # RecursionError: JSON nested deeper than Python's parser goes.
        except (ValueError, RecursionError) as exc:
            raise GarmApiError(method, path, response.status_code, "invalid JSON", "") from exc


def trust_only(session: requests.Session, ca_file: str) -> None:
    """Have ``session`` accept only HTTPS servers whose certificate chains to ``ca_file``.

    That CA may be an intermediate: OpenSSL stops at it only with
    ``X509_V_FLAG_PARTIAL_CHAIN``, which curl sets (7.68 and after) and Python does not.
    Not the public CAs requests ships with.
    """
    context = ssl.create_default_context(cafile=ca_file)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    session.verify = ca_file
    session.mount("https://", _Anchored(context))


class _Anchored(HTTPAdapter):
    """Connections made with one SSL context (``trust_only``)."""

    def __init__(self, context: ssl.SSLContext):
        self._context = context
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        """The pool manager, its connections using the adapter's context."""
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)


def _api_error(method: str, path: str, response: requests.Response) -> GarmApiError:
    error, details = "", ""
    try:
        data = response.json()
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        error = str(data.get("error", ""))
        details = str(data.get("details", ""))
    elif response.text.strip():
        error = response.text.strip()[:200]
    return GarmApiError(method, path, response.status_code, error, details)

"""The ``garm_configurator_v0`` relation: what each side publishes.

**Configurator to garm.** Everything a configurator unit asks for travels in its *unit*
databag as plain strings (not JSON values): counts are decimal strings, ``labels`` is
comma-separated, ``pre_install_scripts`` is a JSON object text, and an unset optional key
is absent. Two publication phases exist: Phase A (the scaleset and runner options, every
unit) and Phase B (OpenStack and GitHub App settings plus ``image_id``, leader only, once
the image is known).

``ConfiguratorUnitData.from_databag`` parses a databag and treats every value as hostile:
it raises ``DatabagError`` naming the key and the rule broken. Runner options are checked
too (LIBPATCH 2): a mirror, proxy or OTel endpoint must be an http(s) URL with a host,
made of RFC 3986 characters without quotes, spaces or braces (the proxy without
credentials); redirect ports are ``N`` or ascending ``N-M`` in 1-65535; exclusions are
IPv4 addresses or CIDRs. These values end up in scripts on every runner. ``to_databag`` renders the
same model, so a configurator can publish with it. ``pre_install_scripts`` nested too
deep to parse is refused like any other bad value (LIBPATCH 4), never raised.

``org`` and ``repo`` name what the scaleset serves, one of them. garm-configurator
allows only one of its ``org`` and ``repo`` options but never removes a key from its
databag, so a unit switched from one to the other publishes both, one of them left
behind. The databag alone cannot say which: a reader that knows (from what the unit
published before) says so with ``from_databag(data, use="org")`` or ``use="repo"``, and
the other key is ignored (LIBPATCH 5); without ``use``, both is an error.

**Garm to configurator** (LIBPATCH 3, an optional addition: a configurator that reads
nothing from garm, as every one before it, is unaffected). The garm leader publishes,
in garm's *application* databag on each garm-configurator relation, what became of each
configurator unit's scaleset. ``GarmAppData`` is that databag, parsed and rendered:

- ``version``: the format's revision, a decimal string, ``"1"`` today. A revision only
  ever *adds* keys or fields; a change a reader of ``"1"`` could misread would use a new
  key instead, so a reader parses ``scalesets`` whatever the version says and ignores
  what it does not know.
- ``scalesets``: a JSON object, configurator unit name (``garm-configurator/0``) to that
  unit's ``ScalesetState``, an object whose values are all strings (as everything on this
  relation is, so a reader can show any of them as it is):

  - ``phase`` (always): ``creating`` (garm has no live generation for it yet),
    ``serving`` (its current generation is live and nothing else is left),
    ``replacing`` (a changeover: older generations still serve, drain or await deletion),
    ``waiting`` (garm does not act on it yet, for a reason that passes by itself: its
    image or provider is not there yet), ``held`` (garm does not act on it until an
    operator fixes something: invalid data, a duplicate name; its live scaleset, if any,
    is left as it is) and ``removing`` (reserved: garm retires a scaleset of a unit that
    is still related; this revision never publishes it, since a renamed scaleset's old
    generation belongs to no unit any more). A reader shows an unknown phase as it is.
  - ``name``: the scaleset name garm read from the unit. A reader compares it with what it
    publishes now: a differing ``name`` means garm has not seen the new one yet.
  - ``scaleset``: the GARM name of the unit's current generation (``lg-x64-3f2a1c``),
    present when it exists (``creating`` may already name it, before GitHub lists it).
  - ``replaced`` (``replacing`` only): the GARM name of the older generation being
    replaced (the least advanced one, when there are several).
  - ``draining`` (``replacing`` only): how many runners the older generations still hold.
  - ``message``: one short line: why it is held or waiting, or the step of a replacement
    (``handing over``, ``draining 3 runners``, ``stuck: <cause and what to do>``); with
    ``serving``, ``refreshing 2 idle runners`` (``1 idle runner``) while idle runners
    made before the scaleset's last change to what new runners get (image, flavor,
    architecture, runner group or setup) are left, to be replaced one at a time
    (LIBPATCH 6 documents it; garm publishes it since its refresh of idle runners).

  Example: ``{"garm-configurator/0": {"draining": "3", "message": "draining 3 runners",
  "name": "lg-x64", "phase": "replacing", "replaced": "lg-x64-9b8c7d", "scaleset":
  "lg-x64-3f2a1c"}}``. A future configurator can show it as its status, e.g. ``active
  "Serving as lg-x64-3f2a1c"``, ``maintenance "Replacing lg-x64-9b8c7d: draining 3
  runners"``, ``blocked`` with the message for ``held``, ``waiting`` for ``waiting``.

Why there: only the garm leader runs GARM and reconciles, and only a leader may write its
application's databag, which every configurator unit can read; a unit databag would move
with leadership and leave readers to find the leader. One JSON key rather than one key
per unit, so that every write replaces the whole picture at once: a departed unit drops
out in the same write, and no stale key is left to clean up. Each relation's databag
lists only the units of *that* relation's application: nothing about another
configurator application (perhaps another model's) crosses to it. No value is a secret:
messages are garm's own wording and names the unit itself published, and refusals here
never repeat a URL's value (it may carry credentials).

A reader must tolerate garm publishing nothing (an older garm), an older or a newer
format, and garbage: ``GarmAppData.from_databag`` never raises; it keeps what it can
read and drops what it cannot. The state is what garm's last pass that reached GARM
saw; while GARM cannot be reached it is left as it was.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal
from urllib.parse import urlsplit

LIBID = "5c0a8f4e3b8d4f1e9a7c2d6b1e4f8a90"
LIBAPI = 0
LIBPATCH = 6

MAX_RUNNERS_LIMIT = 1000
MAX_LABELS = 32
MAX_SCRIPT_BYTES = 64 * 1024

# A logical scaleset name is also a GitHub label (`runs-on: <name>`), so it follows the
# label rules; `/` and `,` are excluded because GARM's OpenStack provider builds VM tags
# from scaleset names.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}$")
_ORG = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
_REPO = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_OS_ARCHES = ("amd64", "arm64", "i386", "arm")
# What a URL may hold (RFC 3986's characters, without quotes or braces), so that a URL
# placed in a runner script or install template stays one word of data.
_URL_CHARS = re.compile(r"^[A-Za-z0-9._~:/?#@!$&()*+,;=%\[\]-]+$")
_URL_KEYS = ("dockerhub_mirror", "runner_http_proxy", "otel_collector_endpoint")
# Keys whose presence says the unit has published a scaleset definition at all.
_SCALESET_KEYS = ("name", "provider_name", "flavor", "os_arch", "max_runner")


class DatabagError(ValueError):
    """One unit's data broke a rule of the contract; ``key`` names the offending key."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


def _text(data: Mapping[str, str], key: str, *, limit: int = 255) -> str | None:
    """An optional single-line value, trimmed; absent and blank are the same."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DatabagError(key, "must be a string")
    value = value.strip()
    if not value:
        return None
    if len(value) > limit:
        raise DatabagError(key, f"longer than {limit} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise DatabagError(key, "contains a newline or control character")
    return value


def _required(data: Mapping[str, str], key: str, *, limit: int = 255) -> str:
    value = _text(data, key, limit=limit)
    if value is None:
        raise DatabagError(key, "missing")
    return value


def _count(data: Mapping[str, str], key: str, default: int | None) -> int:
    raw = _text(data, key, limit=16)
    if raw is None:
        if default is None:
            raise DatabagError(key, "missing")
        return default
    if not raw.isascii() or not raw.isdigit():
        raise DatabagError(key, f"must be a whole number, got {raw!r}")
    value = int(raw)
    if value > MAX_RUNNERS_LIMIT:
        raise DatabagError(key, f"must be at most {MAX_RUNNERS_LIMIT}, got {value}")
    return value


def _matching(data: Mapping[str, str], key: str, pattern: re.Pattern[str], rule: str) -> str:
    value = _required(data, key)
    if not pattern.match(value):
        raise DatabagError(key, f"{value!r} is not {rule}")
    return value


def _labels(data: Mapping[str, str]) -> tuple[str, ...]:
    raw = _text(data, "labels", limit=MAX_LABELS * 65)
    if raw is None:
        return ()
    labels = tuple(part.strip() for part in raw.split(",") if part.strip())
    if len(labels) > MAX_LABELS:
        raise DatabagError("labels", f"more than {MAX_LABELS} labels")
    for label in labels:
        if not _LABEL.match(label):
            raise DatabagError(
                "labels",
                f"{label!r} is not a label (letters, digits and . _ : + -, at most 64)",
            )
    return labels


def _script(data: Mapping[str, str], key: str) -> str | None:
    """A multi-line script value, trimmed and bounded."""
    value = (data.get(key) or "").strip()
    if len(value.encode()) > MAX_SCRIPT_BYTES:
        raise DatabagError(key, f"larger than {MAX_SCRIPT_BYTES} bytes")
    return value or None


def _scripts(data: Mapping[str, str]) -> dict[str, str]:
    """``pre_install_scripts``: a JSON object of script name to script text.

    Unlike the anchor implementation, text that is not such an object is refused rather
    than silently dropped: a runner set up without its scripts fails far from the cause.
    """
    raw = data.get("pre_install_scripts")
    if raw is None or not raw.strip():
        return {}
    if len(raw.encode()) > MAX_SCRIPT_BYTES:
        raise DatabagError("pre_install_scripts", f"larger than {MAX_SCRIPT_BYTES} bytes")
    try:
        scripts = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatabagError("pre_install_scripts", f"not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError):  # too long a number, nested too deep
        raise DatabagError("pre_install_scripts", "not JSON this library can read") from None
    if not isinstance(scripts, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in scripts.items()
    ):
        raise DatabagError("pre_install_scripts", "must be a JSON object of name to script")
    for name in scripts:
        if not _NAME.match(name):
            raise DatabagError("pre_install_scripts", f"{name!r} is not a valid script name")
    return scripts


def _url(key: str, value: str | None) -> None:
    """A runner option that must be an http(s) URL with a host and a valid port.

    No message repeats the value: a proxy URL may carry a password, and a refusal is
    shown in ``juju status`` and logged.
    """
    if value is None:
        return
    if not _URL_CHARS.match(value):
        raise DatabagError(key, "is not a URL (spaces, quotes or braces are not allowed)")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise DatabagError(key, "is not a URL (its host or port cannot be read)") from None
    # Every runner and every job could read credentials put in one of these URLs.
    if "@" in parts.netloc or (not parts.netloc and "@" in value):
        raise DatabagError(key, "credentials in the URL are not supported")
    if parts.scheme not in ("http", "https"):
        raise DatabagError(key, "is not an http(s) URL (http:// or https:// first)")
    if not parts.hostname:
        raise DatabagError(key, "is not an http(s) URL with a host")
    if port == 0:
        raise DatabagError(key, "port 0 is not a port")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise DatabagError(key, "a query or fragment is not supported")
    # Docker refuses a registry mirror with a path, and would not start with it.
    if key == "dockerhub_mirror" and parts.path not in ("", "/"):
        raise DatabagError(key, "a registry mirror URL has no path")


def parse_ports(raw: str) -> list[str]:
    """``aproxy_redirect_ports``: ports and ``N-M`` ranges, 1 to 65535, comma-separated.

    Raises ``DatabagError`` on the first token that is neither.
    """
    ports = []
    for token in (part.strip() for part in raw.split(",")):
        if not token:
            continue
        low, dash, high = token.partition("-")
        bounds = [low.strip(), high.strip()] if dash else [low]
        if not all(b.isascii() and b.isdigit() and 1 <= int(b) <= 65535 for b in bounds):
            raise DatabagError("aproxy_redirect_ports", f"{token!r} is not a port (1-65535)")
        if dash and int(bounds[0]) > int(bounds[1]):
            raise DatabagError("aproxy_redirect_ports", f"{token!r} is not an ascending range")
        ports.append("-".join(bounds))
    return ports


def _ipv4_list(raw: str | None) -> None:
    """``aproxy_exclude_addresses``: IPv4 addresses and CIDRs, comma-separated."""
    for token in (part.strip() for part in (raw or "").split(",")):
        if not token:
            continue
        try:
            ipaddress.IPv4Network(token, strict=False)
        except ValueError:
            raise DatabagError(
                "aproxy_exclude_addresses", f"{token!r} is not an IPv4 address or CIDR"
            ) from None


@dataclass(frozen=True)
class ConfiguratorUnitData:
    """One configurator unit's databag, parsed.

    ``image_id`` is absent until the image builder answers; such a unit is *not ready*
    (still publishing), which is not the same as gone. The OpenStack and GitHub keys are
    kept as published; the garm side resolves the secret URIs itself.
    """

    name: str
    provider_name: str
    flavor: str
    os_arch: str
    max_runner: int
    min_idle_runner: int = 0
    labels: tuple[str, ...] = ()
    runner_group: str = "Default"
    org: str | None = None
    repo: str | None = None
    image_id: str | None = None
    pre_install_scripts: dict[str, str] | None = None
    dockerhub_mirror: str | None = None
    runner_http_proxy: str | None = None
    aproxy_exclude_addresses: str | None = None
    aproxy_redirect_ports: str | None = None
    otel_collector_endpoint: str | None = None
    pre_job_script: str | None = None
    openstack_auth_url: str | None = None
    openstack_username: str | None = None
    openstack_password: str | None = None
    openstack_password_secret_uri: str | None = None
    openstack_project_name: str | None = None
    openstack_user_domain_name: str | None = None
    openstack_project_domain_name: str | None = None
    openstack_region_name: str | None = None
    openstack_network: str | None = None
    github_app_id: str | None = None
    github_installation_id: str | None = None
    github_private_key_secret_uri: str | None = None

    @staticmethod
    def has_scaleset(data: Mapping[str, str]) -> bool:
        """Whether the unit has published any of its scaleset definition yet."""
        return any(key in data for key in _SCALESET_KEYS)

    @staticmethod
    def check_name(name: str) -> str:
        """A logical scaleset name, or ``DatabagError`` saying why it is not one."""
        return _matching({"name": name}, "name", _NAME, "a scaleset name (letters, digits, . _ -)")

    @classmethod
    def from_databag(
        cls, data: Mapping[str, str], use: Literal["org", "repo"] | None = None
    ) -> ConfiguratorUnitData:
        """Parse and validate; raises ``DatabagError`` on the first broken rule.

        ``use`` names the one of ``org`` and ``repo`` to read when both are published.
        """
        name = cls.check_name(data.get("name", ""))
        org, repo = _text(data, "org"), _text(data, "repo")
        if org and repo and use is not None:
            org, repo = (org, None) if use == "org" else (None, repo)
        if org and repo:
            raise DatabagError("org", "org and repo are mutually exclusive")
        if not org and not repo:
            raise DatabagError("org", "one of org or repo is required")
        if org and not _ORG.match(org):
            raise DatabagError("org", f"{org!r} is not a GitHub organisation name")
        if repo and not _REPO.match(repo):
            raise DatabagError("repo", f"{repo!r} is not owner/name")
        os_arch = _required(data, "os_arch")
        if os_arch not in _OS_ARCHES:
            raise DatabagError("os_arch", f"{os_arch!r} is not one of {', '.join(_OS_ARCHES)}")
        max_runner = _count(data, "max_runner", None)
        min_idle = _count(data, "min_idle_runner", 0)
        if max_runner < 1:
            raise DatabagError("max_runner", "must be at least 1")
        if min_idle > max_runner:
            raise DatabagError("min_idle_runner", f"{min_idle} is above max_runner {max_runner}")
        optional = {
            f.name: _text(data, f.name, limit=2048)
            for f in fields(cls)
            if f.name.startswith(("openstack_", "github_", "dockerhub", "aproxy", "otel"))
            or f.name == "runner_http_proxy"
        }
        for key in _URL_KEYS:
            _url(key, optional[key])
        _ipv4_list(optional["aproxy_exclude_addresses"])
        parse_ports(optional["aproxy_redirect_ports"] or "")
        return cls(
            name=name,
            provider_name=_matching(data, "provider_name", _NAME, "a provider name"),
            flavor=_required(data, "flavor"),
            os_arch=os_arch,
            max_runner=max_runner,
            min_idle_runner=min_idle,
            labels=_labels(data),
            runner_group=_text(data, "runner_group", limit=128) or "Default",
            org=org,
            repo=repo,
            image_id=_text(data, "image_id"),
            pre_install_scripts=_scripts(data) or None,
            pre_job_script=_script(data, "pre_job_script"),
            **optional,
        )

    def to_databag(self) -> dict[str, str]:
        """Render as the configurator writes it: strings only, unset keys absent."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            if f.name == "labels":
                out[f.name] = ",".join(value)
            elif f.name == "pre_install_scripts":
                out[f.name] = json.dumps(value)
            else:
                out[f.name] = str(value)
        return out


# --- Garm to configurator: garm's application databag (LIBPATCH 3) -------------------

GARM_FORMAT_VERSION = 1
VERSION_KEY = "version"
SCALESETS_KEY = "scalesets"

CREATING = "creating"
SERVING = "serving"
REPLACING = "replacing"
REMOVING = "removing"
WAITING = "waiting"
HELD = "held"
PHASES = (CREATING, SERVING, REPLACING, REMOVING, WAITING, HELD)

MAX_MESSAGE = 200
_MAX_PHASE = 32
_MAX_NAME = 128
_MAX_DRAINING_DIGITS = 9
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# A Juju unit name: application name (lower-case letters, digits, hyphens), then number.
_UNIT = re.compile(r"[a-z][a-z0-9-]{0,62}/[0-9]{1,9}")


def _shown(value: object, limit: int) -> str | None:
    """A value fit to show on one line, or None.

    A non-empty string, its control characters and runs of spaces made one space, cut to
    ``limit`` characters (the cut marked ``…``); None for anything else.
    """
    if not isinstance(value, str):
        return None
    value = " ".join(_CONTROL.sub(" ", value).split())
    if not value:
        return None
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _runners(value: object) -> int | None:
    """A runner count: a decimal string (as written) or a JSON number; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str):
        value = value.strip()
        if value.isascii() and value.isdigit() and len(value) <= _MAX_DRAINING_DIGITS:
            return int(value)
    return None


@dataclass(frozen=True)
class ScalesetState:
    """What garm reports about one configurator unit's scaleset (see the module docs).

    ``phase`` is one of ``PHASES`` when garm writes it; a reader may meet one it does not
    know (``known`` is then False) and should show it as it is.
    """

    phase: str
    name: str | None = None
    scaleset: str | None = None
    draining: int | None = None
    message: str | None = None
    replaced: str | None = None

    @property
    def known(self) -> bool:
        """Whether this library knows the phase."""
        return self.phase in PHASES

    def to_dict(self) -> dict[str, str]:
        """The JSON object garm publishes: strings only, unset fields absent."""
        out = {"phase": self.phase}
        for key, value, limit in (
            ("name", self.name, _MAX_NAME),
            ("scaleset", self.scaleset, _MAX_NAME),
            ("replaced", self.replaced, _MAX_NAME),
            ("message", self.message, MAX_MESSAGE),
        ):
            shown = _shown(value, limit)
            if shown is not None:
                out[key] = shown
        if self.draining is not None:
            out["draining"] = str(self.draining)
        return out

    @classmethod
    def from_dict(cls, value: object) -> ScalesetState | None:
        """Read one entry; None when it has no readable phase. Never raises.

        Unknown fields are ignored; a field of the wrong type or shape is dropped.
        """
        if not isinstance(value, Mapping):
            return None
        phase = _shown(value.get("phase"), _MAX_PHASE)
        if phase is None:
            return None
        return cls(
            phase=phase,
            name=_shown(value.get("name"), _MAX_NAME),
            scaleset=_shown(value.get("scaleset"), _MAX_NAME),
            draining=_runners(value.get("draining")),
            message=_shown(value.get("message"), MAX_MESSAGE),
            replaced=_shown(value.get("replaced"), _MAX_NAME),
        )


@dataclass(frozen=True)
class GarmAppData:
    """Garm's application databag on one garm-configurator relation.

    ``scalesets`` maps a configurator unit name to its ``ScalesetState``; ``version`` is
    None when garm published none (an older garm) or an unreadable one.
    """

    version: int | None = None
    scalesets: Mapping[str, ScalesetState] = field(default_factory=dict)

    def for_unit(self, unit: str) -> ScalesetState | None:
        """What garm says about one unit's scaleset (``unit`` as ``app/N``), if anything.

        Across models garm knows a unit by the offer's (or alias's) name, not the
        application's, but by the same number; the databag is one application's, so the
        number alone finds it then.
        """
        if unit in self.scalesets:
            return self.scalesets[unit]
        number = unit.rpartition("/")[2]
        found = [s for name, s in self.scalesets.items() if name.rpartition("/")[2] == number]
        return found[0] if len(found) == 1 else None

    def to_databag(self) -> dict[str, str]:
        """The keys garm sets, in a stable rendering so an unchanged state writes nothing."""
        entries = {unit: self.scalesets[unit].to_dict() for unit in sorted(self.scalesets)}
        return {
            VERSION_KEY: str(GARM_FORMAT_VERSION if self.version is None else self.version),
            SCALESETS_KEY: json.dumps(entries, sort_keys=True, separators=(",", ":")),
        }

    @classmethod
    def from_databag(cls, data: Mapping[str, str]) -> GarmAppData:
        """Read garm's application databag; never raises, whatever it holds.

        Absent or unreadable keys read as nothing published; entries that cannot be read,
        or are filed under something that is not a unit name, are left out; other keys
        (Juju's own, a later revision's) and fields are ignored.
        """
        raw_version = data.get(VERSION_KEY)
        version = _runners(raw_version) if isinstance(raw_version, str) else None
        raw = data.get(SCALESETS_KEY)
        try:
            entries = json.loads(raw) if isinstance(raw, str) else None
        except (ValueError, RecursionError):  # not JSON, too long a number, too deep
            entries = None
        if not isinstance(entries, dict):
            return cls(version, {})
        scalesets = {}
        for unit, value in entries.items():
            state = ScalesetState.from_dict(value)
            if state is not None and _UNIT.fullmatch(unit):
                scalesets[unit] = state
        return cls(version, scalesets)

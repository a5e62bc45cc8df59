"""GARM's configuration files and systemd unit, rendered from typed inputs.

Pure functions: values in, file texts out. Every value may come from relation data, so
each one is escaped for the format it lands in and none can add keys, tables or lines.
Key names and rules follow GARM's ``config/config.go`` and ``config/external.go`` and
garm-provider-openstack's ``config/config.go``.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from garm import tls as serving
from garm.tls import ServingTls

# The relation library's provider-name rule, repeated here because the name also becomes
# a file name under providers/: nothing else may reach the file system through it.
_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Paths and user names go into systemd units unquoted, so they must hold nothing systemd
# would read as a separator, quote, specifier (%) or variable ($). Used with fullmatch:
# "$" would also match before a final newline.
_UNIT_WORD = re.compile(r"[A-Za-z0-9/._+-]+")
# Where GARM logs (a systemd LogsDirectory= name, and the file in it).
LOG_DIRECTORY = "garm"
LOG_FILE = f"/var/log/{LOG_DIRECTORY}/garm.log"
_LOG_LEVELS = ("debug", "info", "warn", "error")
# systemd restarts a GARM that failed RESTART_SECONDS later, and gives up once it has
# started it START_LIMIT_BURST times within START_LIMIT_SECONDS (``render_unit``).
RESTART_SECONDS = 5
START_LIMIT_BURST = 5
START_LIMIT_SECONDS = 300
# GARM's JWT lifetime (logins and metrics tokens): the shortest it allows.
_HOUR = timedelta(hours=1)
JWT_LIFETIME = 24 * _HOUR
_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")

# TOML basic strings must escape the quote, the backslash and every control character
# except tab; escaping tab as well keeps the rule to one character class.
_TOML_UNSAFE = re.compile(r'[\x00-\x1f\x7f"\\]')
# json.dumps(ensure_ascii=False) leaves these raw, but YAML reads U+0085/U+2028/U+2029 as
# line breaks (folded away inside a quoted scalar) and refuses the others as
# non-printable, so they are escaped too. Astral characters stay raw: YAML has no
# surrogate-pair escapes, which is why ensure_ascii=True will not do.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


@dataclass(frozen=True)
class SqliteDatabase:
    """GARM's own sqlite3 file; GARM requires an absolute path and creates the file."""

    path: str

    def __post_init__(self) -> None:
        _require_absolute("sqlite path", self.path)


@dataclass(frozen=True)
class PostgresqlDatabase:
    """A PostgreSQL database GARM connects to; GARM has a single-host form only."""

    hostname: str
    port: int
    username: str
    password: str = field(repr=False)
    database: str
    sslmode: str = "prefer"

    def __post_init__(self) -> None:
        _require_port(self.port)
        if self.sslmode not in _SSL_MODES:
            raise ValueError(f"sslmode must be one of {', '.join(_SSL_MODES)}: {self.sslmode!r}")


Database = SqliteDatabase | PostgresqlDatabase


@dataclass(frozen=True)
class OpenstackProvider:
    """One external OpenStack provider, published by one garm-configurator unit.

    ``name`` is both GARM's provider name (which scalesets refer to) and the stem of the
    provider's files, hence the file-name-safe rule.
    """

    name: str
    auth_url: str
    username: str
    password: str = field(repr=False)
    project_name: str
    user_domain_name: str
    project_domain_name: str
    region_name: str
    network: str

    def __post_init__(self) -> None:
        if not _PROVIDER_NAME.match(self.name):
            raise ValueError(f"provider name must be letters, digits, . _ -: {self.name!r}")


# clouds.yaml's auth keys: the provider's fields of those names, in their order.
_AUTH = tuple(
    f.name
    for f in dataclasses.fields(OpenstackProvider)
    if f.name not in ("name", "region_name", "network")
)


@dataclass(frozen=True)
class Proxy:
    """The model's HTTP proxy settings; empty means unset."""

    http_proxy: str = ""
    https_proxy: str = ""
    no_proxy: str = ""

    def __post_init__(self) -> None:
        # GARM exports these into its environment, which cannot hold NUL.
        if "\x00" in self.http_proxy + self.https_proxy + self.no_proxy:
            raise ValueError("proxy settings cannot contain NUL")


@dataclass(frozen=True)
class GarmConfig:
    """Everything GARM's config.toml and its provider files are made from.

    ``db_passphrase`` encrypts GARM's stored secrets: it must never change once used.
    """

    port: int
    jwt_secret: str = field(repr=False)
    db_passphrase: str = field(repr=False)
    database: Database
    providers: tuple[OpenstackProvider, ...]
    proxy: Proxy
    provider_executable: str
    config_dir: str
    log_level: str = "info"
    # The certificate GARM serves its API with; None: plain HTTP.
    tls: ServingTls | None = None

    def __post_init__(self) -> None:
        # GARM refuses to start on each of these; failing here names the cause instead.
        _require_port(self.port)
        _require_absolute("provider executable", self.provider_executable)
        _require_absolute("config dir", self.config_dir)
        if self.log_level not in _LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(_LOG_LEVELS)}")
        # Go's len() counts bytes: GARM wants an AES-256 key of exactly 32 bytes.
        if len(self.db_passphrase.encode()) != 32:
            raise ValueError("database passphrase must be exactly 32 bytes")
        names = [provider.name for provider in self.providers]
        if len(set(names)) != len(names):
            raise ValueError("provider names must be unique")


def render_files(config: GarmConfig) -> dict[str, str]:
    """Every file GARM reads, by path relative to ``config.config_dir``.

    Each provider gets its garm-provider-openstack config and a clouds.yaml of its own,
    so one configurator's credentials never sit in another's file. With a certificate,
    GARM's TLS files sit under ``tls/``, beside the CA the charm's client checks GARM by.
    """
    files = {"config.toml": _render_config(config)}
    if config.tls is not None:
        files[serving.CERTIFICATE_FILE] = config.tls.certificate_file()
        files[serving.KEY_FILE] = config.tls.private_key.strip() + "\n"
        files[serving.CA_FILE] = config.tls.runner_bundle().decode()
    for provider in config.providers:
        clouds = posixpath.join(config.config_dir, _clouds_file(provider.name))
        files[_provider_file(provider.name)] = _render_provider(provider, clouds)
        files[_clouds_file(provider.name)] = _render_clouds(provider)
    return files


def render_unit(
    binary: str,
    config_file: str,
    data_dir: str,
    user: str,
    *,
    privileged_port: bool = False,
    lease_check: str | None = None,
) -> str:
    """The systemd unit that runs GARM as ``user``, able to write only to ``data_dir``.

    GARM writes only its database and its log (``LogsDirectory``). No proxy in
    ``Environment=``, which every local user reads through ``systemctl show``: GARM takes
    it from its 0600 config. No capability, but CAP_NET_BIND_SERVICE (ambient, which
    ``NoNewPrivileges`` leaves alone) when ``privileged_port`` is below 1024.
    ``lease_check`` (``garm.lease``), run as root before every start, keeps a GARM whose
    lease lapsed from starting again. ``Restart=`` is bounded: systemd's default limit
    (5 starts in 10 s) is never reached 5 s apart; ``START_LIMIT_BURST`` starts in
    ``START_LIMIT_SECONDS`` is, while each failed run lasts under 55 s, and the pass then
    says why and starts it again (``workload.restart_due``).
    """
    checks = [] if lease_check is None else [lease_check]
    check_unit_paths(binary, config_file, data_dir, *checks)
    if not _UNIT_WORD.fullmatch(user):
        raise ValueError(f"not usable in a systemd unit: {user!r}")
    # The flag is cobra's --config (cmd/garm/cmd/root.go); pflag would read a single-dash
    # -config as the shorthands -c -o -n ... and refuse it.
    lines = [
        "[Unit]",
        "Description=GitHub Actions Runner Manager (GARM)",
        "Wants=network-online.target",
        "After=network-online.target",
        f"StartLimitIntervalSec={START_LIMIT_SECONDS}",
        f"StartLimitBurst={START_LIMIT_BURST}",
        "",
        "[Service]",
        "Type=simple",
        *(f"ExecStartPre=+{check} check" for check in checks),
        f"ExecStart={binary} --config {config_file}",
        f"User={user}",
        f"Group={user}",
        "Restart=on-failure",
        f"RestartSec={RESTART_SECONDS}",
        # Bounded, so that a lease's stop is over well within the fence's margin.
        "TimeoutStopSec=15s",
        "NoNewPrivileges=true",
        "ProtectSystem=strict",
        f"ReadWritePaths={data_dir}",
        # /var/log/garm, made for and writable by the service's user under ProtectSystem.
        f"LogsDirectory={LOG_DIRECTORY}",
        "ProtectHome=true",
        "PrivateTmp=true",
        "ProtectKernelTunables=true",
        "ProtectKernelModules=true",
        "ProtectControlGroups=true",
        "RestrictSUIDSGID=true",
        "LockPersonality=true",
        "CapabilityBoundingSet=" + ("CAP_NET_BIND_SERVICE" if privileged_port else ""),
        *(["AmbientCapabilities=CAP_NET_BIND_SERVICE"] if privileged_port else []),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def _provider_file(name: str) -> str:
    return f"providers/{name}.toml"


def _clouds_file(name: str) -> str:
    return f"providers/{name}-clouds.yaml"


def _render_config(config: GarmConfig) -> str:
    proxy = dataclasses.asdict(config.proxy)
    sections = [
        # Scale sets long-poll GitHub, so GARM never needs to manage webhooks.
        _table("default", {"enable_webhook_management": False}),
        # A file under /var/log, not the journal: the COS collectors on the machine read
        # /var/log/**/*log and nothing of the journal (opentelemetry-collector); GARM
        # rotates it itself (lumberjack: 500 MB, 3 backups, 28 days).
        _table("logging", {"log_level": config.log_level, "log_file": LOG_FILE}),
        *_apiserver_tables(config),
        # time_to_live is required; GARM clamps anything under 24h up to 24h. The least,
        # for no JWT can be revoked: a metrics token in the collector's databag, or the
        # admin's, opens GARM no longer than a day after it is replaced or leaks.
        _table(
            "jwt_auth", {"secret": config.jwt_secret, "time_to_live": f"{JWT_LIFETIME // _HOUR}h"}
        ),
        _table("metrics", {"enable": True, "disable_auth": False}),
        *_database_tables(config.database, config.db_passphrase),
        *(_provider_tables(config, provider) for provider in config.providers),
        # GARM exports these into its own environment, and always passes proxy variables
        # on to providers, so [provider.external] environment_variables needs no entry.
        *([_table("proxy", proxy)] if any(proxy.values()) else []),
    ]
    return "\n".join(sections)


def _apiserver_tables(config: GarmConfig) -> tuple[str, ...]:
    # Runners on other machines call back to GARM, so it listens on every address.
    settings = {"bind": "0.0.0.0", "port": config.port, "use_tls": config.tls is not None}  # noqa: S104
    if config.tls is None:
        return (_table("apiserver", settings),)
    files = {"certificate": serving.CERTIFICATE_FILE, "key": serving.KEY_FILE}
    paths = {key: posixpath.join(config.config_dir, file) for key, file in files.items()}
    return (_table("apiserver", settings), _table("apiserver.tls", paths))


def _database_tables(database: Database, passphrase: str) -> tuple[str, ...]:
    if isinstance(database, SqliteDatabase):
        return (
            _table("database", {"backend": "sqlite3", "passphrase": passphrase}),
            _table("database.sqlite3", {"db_file": database.path}),
        )
    return (
        _table("database", {"backend": "postgresql", "passphrase": passphrase}),
        _table("database.postgresql", dataclasses.asdict(database)),
    )


def _provider_tables(config: GarmConfig, provider: OpenstackProvider) -> str:
    header = _table("provider", {"name": provider.name, "provider_type": "external"}, array=True)
    external = _table(
        "provider.external",
        {
            "provider_executable": config.provider_executable,
            "config_file": posixpath.join(config.config_dir, _provider_file(provider.name)),
        },
    )
    return f"{header}\n{external}"


def _render_provider(provider: OpenstackProvider, clouds_path: str) -> str:
    settings = {
        "cloud": provider.name,
        # garm-provider-openstack resolves a name as well as a UUID here.
        "network_id": provider.network,
        # CVE-2024-6174: without a config drive, cloud-init on the runner may fall back to
        # an untrusted network metadata source.
        "use_config_drive": True,
    }
    return "\n".join((_pairs(settings), _table("credentials", {"clouds": clouds_path})))


def read_database(config_toml: str) -> Database | None:
    """The database a rendered ``config.toml`` names, or None when it cannot be read."""
    try:
        database = tomllib.loads(config_toml)["database"]
        if database["backend"] == "sqlite3":
            return SqliteDatabase(database["sqlite3"]["db_file"])
        settings = database["postgresql"]
        fields = dataclasses.fields(PostgresqlDatabase)
        return PostgresqlDatabase(**{f.name: settings[f.name] for f in fields})
    except (KeyError, TypeError, ValueError, RecursionError):
        return None


def serves_tls(config_toml: str) -> bool:
    """Whether a rendered ``config.toml`` has GARM serve HTTPS; False when unreadable."""
    try:
        return tomllib.loads(config_toml)["apiserver"]["use_tls"] is True
    except (KeyError, TypeError, ValueError, RecursionError):
        return False


def written_providers(files: Mapping[str, str]) -> dict[str, OpenstackProvider | None]:
    """The providers ``render_files`` wrote into ``files``, by name; None where one is unread."""
    names = sorted(m[1] for path in files if (m := re.fullmatch(r"providers/(.+)\.toml", path)))
    return {name: read_provider(name, files) for name in names}


def read_provider(name: str, files: Mapping[str, str]) -> OpenstackProvider | None:
    """A provider back from the files ``render_files`` wrote for it, or None.

    A provider a live scaleset still uses stays configured from these when no unit
    publishes it any more (``garm.providers``).
    """
    try:
        settings = tomllib.loads(files[_provider_file(name)])
        cloud = json.loads(files[_clouds_file(name)])["clouds"][name]
        auth = {key: cloud["auth"][key] for key in _AUTH}
        return OpenstackProvider(
            name=name, region_name=cloud["region_name"], network=settings["network_id"], **auth
        )
    except (KeyError, TypeError, ValueError, RecursionError):
        return None


def _render_clouds(provider: OpenstackProvider) -> str:
    auth = {key: getattr(provider, key) for key in _AUTH}
    clouds = {"clouds": {provider.name: {"auth": auth, "region_name": provider.region_name}}}
    # JSON is YAML: json.dumps gets the quoting right, and _YAML_UNSAFE covers the few
    # characters YAML treats differently from JSON.
    text = json.dumps(clouds, indent=2, ensure_ascii=False)
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def _table(name: str, values: Mapping[str, str | int | bool], *, array: bool = False) -> str:
    header = f"[[{name}]]" if array else f"[{name}]"
    return f"{header}\n{_pairs(values)}"


def _pairs(values: Mapping[str, str | int | bool]) -> str:
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in values.items())


def _toml_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + _TOML_UNSAFE.sub(_toml_escape, value) + '"'


def _toml_escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\\" + char if char in '"\\' else f"\\u{ord(char):04X}"


def check_unit_paths(*paths: str) -> None:
    """ValueError unless systemd takes each of ``paths`` unchanged as an absolute path.

    For every unit the charm writes (GARM's, its timers', the metrics server's): checked
    rather than escaped, as systemd splits, unquotes and expands what it reads.
    """
    for path in paths:
        if not (path.startswith("/") and _UNIT_WORD.fullmatch(path)):
            raise ValueError(f"not usable as an absolute path in a systemd unit: {path!r}")


def _require_absolute(what: str, path: str) -> None:
    if not posixpath.isabs(path):
        raise ValueError(f"{what} must be an absolute path: {path!r}")


def _require_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be 1-65535: {port}")

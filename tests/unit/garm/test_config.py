"""GARM's config files and unit, read back the way GARM, the provider and systemd read them."""

from __future__ import annotations

import dataclasses
import fnmatch
import ipaddress
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from garm.config import (
    LOG_FILE,
    GarmConfig,
    OpenstackProvider,
    PostgresqlDatabase,
    Proxy,
    SqliteDatabase,
    read_provider,
    render_files,
    render_unit,
)

# Python 3.11+ reads TOML; the charm itself writes it without a library.
tomllib = pytest.importorskip("tomllib")

CONFIG_DIR = "/etc/garm"
EXECUTABLE = "/usr/local/bin/garm-provider-openstack"
PASSPHRASE = "Fw8#kq2L!vT9zR4x@pM6sD1&hJ3nB7cY"
HOSTILE = 'a"b\\c\nd]]\n[[provider]]\nname = "evil"\r\t\x00\x7f\u2028é😀 \'#'
# Exactly 32 bytes, as GARM insists, with every character that could break out.
HOSTILE_PASSPHRASE = "q\"\\\n]]\n[x]'#=é\tZ" + "k" * 15


def provider(name: str = "garm-configurator-0", **changes: str) -> OpenstackProvider:
    base = OpenstackProvider(
        name=name,
        auth_url="https://keystone.internal:5000/v3",
        username="ci-runners",
        password="s3cret",
        project_name="ci",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        network="ci-runners-net",
    )
    return dataclasses.replace(base, **changes)


def config(**changes: Any) -> GarmConfig:
    base = GarmConfig(
        port=9997,
        jwt_secret="jwt-Secret-0f8d2c!x",
        db_passphrase=PASSPHRASE,
        database=SqliteDatabase("/var/lib/garm/garm.db"),
        providers=(),
        proxy=Proxy(),
        provider_executable=EXECUTABLE,
        config_dir=CONFIG_DIR,
    )
    return dataclasses.replace(base, **changes)


def garm_toml(garm_config: GarmConfig) -> dict[str, Any]:
    return tomllib.loads(render_files(garm_config)["config.toml"])


def test_sqlite_config_has_what_garm_validates() -> None:
    parsed = garm_toml(config(log_level="debug"))

    assert parsed["logging"] == {"log_level": "debug", "log_file": "/var/log/garm/garm.log"}
    apiserver = parsed["apiserver"]
    assert ipaddress.ip_address(apiserver.pop("bind")).is_unspecified  # an IP literal
    assert apiserver == {"port": 9997, "use_tls": False}
    assert parsed["jwt_auth"] == {"secret": "jwt-Secret-0f8d2c!x", "time_to_live": "24h"}
    assert parsed["metrics"] == {"enable": True, "disable_auth": False}
    assert parsed["database"] == {
        "backend": "sqlite3",
        "passphrase": PASSPHRASE,
        "sqlite3": {"db_file": "/var/lib/garm/garm.db"},
    }
    assert "default" in parsed


def test_postgresql_config() -> None:
    database = PostgresqlDatabase("db.internal", 5433, "garm", "pg-pass", "garmdb", "require")

    parsed = garm_toml(config(database=database))

    assert parsed["database"] == {
        "backend": "postgresql",
        "passphrase": PASSPHRASE,
        "postgresql": {
            "hostname": "db.internal",
            "port": 5433,
            "username": "garm",
            "password": "pg-pass",
            "database": "garmdb",
            "sslmode": "require",
        },
    }


def test_no_provider_renders_no_provider_entry_and_no_provider_file() -> None:
    files = render_files(config())

    assert list(files) == ["config.toml"]
    assert "provider" not in tomllib.loads(files["config.toml"])


def test_one_external_provider_entry_per_provider_pointing_at_its_file() -> None:
    providers = (provider("garm-configurator-0"), provider("other-app-3"))

    files = render_files(config(providers=providers))
    entries = tomllib.loads(files["config.toml"])["provider"]

    assert [entry["name"] for entry in entries] == ["garm-configurator-0", "other-app-3"]
    for entry in entries:
        assert entry["provider_type"] == "external"
        assert entry["external"]["provider_executable"] == EXECUTABLE
        config_file = Path(entry["external"]["config_file"])
        assert config_file.is_absolute()
        assert str(config_file.relative_to(CONFIG_DIR)) in files
    assert sorted(files) == [
        "config.toml",
        "providers/garm-configurator-0-clouds.yaml",
        "providers/garm-configurator-0.toml",
        "providers/other-app-3-clouds.yaml",
        "providers/other-app-3.toml",
    ]


def test_provider_config_names_its_cloud_network_and_config_drive() -> None:
    files = render_files(config(providers=(provider(network="net-uuid"),)))

    settings = tomllib.loads(files["providers/garm-configurator-0.toml"])
    clouds_file = Path(settings["credentials"]["clouds"])
    clouds = json.loads(files[str(clouds_file.relative_to(CONFIG_DIR))])

    assert settings["use_config_drive"] is True
    assert settings["network_id"] == "net-uuid"
    assert settings["cloud"] in clouds["clouds"]


def test_clouds_yaml_holds_the_credentials() -> None:
    files = render_files(config(providers=(provider(password="pw"),)))

    cloud = json.loads(files["providers/garm-configurator-0-clouds.yaml"])["clouds"][
        "garm-configurator-0"
    ]

    assert cloud == {
        "auth": {
            "auth_url": "https://keystone.internal:5000/v3",
            "username": "ci-runners",
            "password": "pw",
            "project_name": "ci",
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        },
        "region_name": "RegionOne",
    }


def test_proxy_section_only_when_set() -> None:
    proxy = Proxy("http://squid:3128", "http://squid:3129", "localhost,10.0.0.0/8")

    assert "proxy" not in garm_toml(config())
    assert garm_toml(config(proxy=proxy))["proxy"] == {
        "http_proxy": "http://squid:3128",
        "https_proxy": "http://squid:3129",
        "no_proxy": "localhost,10.0.0.0/8",
    }
    assert garm_toml(config(proxy=Proxy(no_proxy="x")))["proxy"]["no_proxy"] == "x"


def test_hostile_values_round_trip_exactly() -> None:
    garm_config = config(
        jwt_secret=HOSTILE,
        db_passphrase=HOSTILE_PASSPHRASE,
        database=PostgresqlDatabase(HOSTILE, 5432, HOSTILE, HOSTILE, HOSTILE),
        providers=(provider(**dict.fromkeys(_STRING_FIELDS, HOSTILE)),),
        proxy=Proxy(HOSTILE.replace("\x00", ""), HOSTILE.replace("\x00", ""), "]]"),
    )

    files = render_files(garm_config)
    parsed = tomllib.loads(files["config.toml"])
    settings = tomllib.loads(files["providers/garm-configurator-0.toml"])
    clouds = yaml.safe_load(files["providers/garm-configurator-0-clouds.yaml"])["clouds"]

    assert [entry["name"] for entry in parsed["provider"]] == ["garm-configurator-0"]
    assert parsed["jwt_auth"]["secret"] == HOSTILE
    assert parsed["database"]["passphrase"] == HOSTILE_PASSPHRASE
    assert parsed["database"]["postgresql"]["password"] == HOSTILE
    assert parsed["proxy"]["http_proxy"] == HOSTILE.replace("\x00", "")
    assert settings["network_id"] == HOSTILE
    assert set(settings) == {"cloud", "network_id", "use_config_drive", "credentials"}
    assert clouds["garm-configurator-0"]["auth"]["password"] == HOSTILE
    assert clouds["garm-configurator-0"]["region_name"] == HOSTILE


_STRING_FIELDS = (
    "auth_url",
    "username",
    "password",
    "project_name",
    "user_domain_name",
    "project_domain_name",
    "region_name",
    "network",
)


@given(value=st.text())
def test_any_text_round_trips_through_toml_and_yaml(value: str) -> None:
    files = render_files(
        config(jwt_secret=value, providers=(provider(password=value, network=value),))
    )

    assert tomllib.loads(files["config.toml"])["jwt_auth"]["secret"] == value
    assert tomllib.loads(files["providers/garm-configurator-0.toml"])["network_id"] == value
    clouds_yaml = files["providers/garm-configurator-0-clouds.yaml"]
    for loaded in (json.loads(clouds_yaml), yaml.safe_load(clouds_yaml)):
        assert loaded["clouds"]["garm-configurator-0"]["auth"]["password"] == value


@pytest.mark.parametrize("name", ["", "../etc", "a/b", ".hidden", "a b", "x" * 65, "é"])
def test_provider_name_that_is_not_a_plain_file_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="provider name"):
        provider(name)


@pytest.mark.parametrize(
    "changes",
    [
        {"db_passphrase": "k" * 31},
        {"db_passphrase": "é" * 32},  # 64 bytes: GARM counts bytes
        {"port": 0},
        {"port": 65536},
        {"log_level": "trace"},
        {"config_dir": "etc/garm"},
        {"provider_executable": "garm-provider-openstack"},
        {"providers": (provider("p-0"), provider("p-0"))},
    ],
)
def test_config_garm_would_refuse_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        config(**changes)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SqliteDatabase("garm.db"),
        lambda: PostgresqlDatabase("h", 5432, "u", "p", "d", sslmode="on"),
        lambda: Proxy(http_proxy="http://a\x00b"),
    ],
)
def test_inputs_garm_or_systemd_would_refuse_are_refused(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


def unit_entries(text: str) -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("["):
            current = line
            sections[current] = []
        elif line:
            key, _, value = line.partition("=")
            sections[current].append((key, value))
    return sections


def render_test_unit(*, privileged_port: bool = False) -> str:
    return render_unit(
        "/usr/local/bin/garm",
        "/etc/garm/config.toml",
        "/var/lib/garm",
        "garm",
        privileged_port=privileged_port,
    )


def test_unit_runs_garm_as_its_user_with_the_config_flag() -> None:
    service = dict(unit_entries(render_test_unit())["[Service]"])

    assert service["Type"] == "simple"
    assert service["ExecStart"] == "/usr/local/bin/garm --config /etc/garm/config.toml"
    assert service["User"] == service["Group"] == "garm"
    assert service["Restart"] == "on-failure"
    assert service["RestartSec"] == "5"
    assert unit_entries(render_test_unit())["[Install]"] == [("WantedBy", "multi-user.target")]


def test_unit_is_hardened_and_writes_only_to_the_data_dir() -> None:
    service = dict(unit_entries(render_test_unit())["[Service]"])

    assert {
        key: service[key]
        for key in (
            "NoNewPrivileges",
            "ProtectSystem",
            "ReadWritePaths",
            "ProtectHome",
            "PrivateTmp",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectControlGroups",
            "RestrictSUIDSGID",
            "LockPersonality",
        )
    } == {
        "NoNewPrivileges": "true",
        "ProtectSystem": "strict",
        "ReadWritePaths": "/var/lib/garm",
        "ProtectHome": "true",
        "PrivateTmp": "true",
        "ProtectKernelTunables": "true",
        "ProtectKernelModules": "true",
        "ProtectControlGroups": "true",
        "RestrictSUIDSGID": "true",
        "LockPersonality": "true",
    }


def test_unit_carries_no_environment_so_proxy_credentials_stay_in_the_0600_config() -> None:
    service = unit_entries(render_test_unit())["[Service]"]

    assert [key for key, _ in service if key == "Environment"] == []


def test_unit_gives_garm_no_capability_for_an_unprivileged_port() -> None:
    service = unit_entries(render_test_unit())["[Service]"]

    assert [entry for entry in service if entry[0].endswith("Capabilities")] == []
    assert dict(service)["CapabilityBoundingSet"] == ""


def test_unit_lets_garm_bind_a_privileged_port_and_nothing_more() -> None:
    plain = unit_entries(render_test_unit())["[Service]"]
    privileged = unit_entries(render_test_unit(privileged_port=True))["[Service]"]

    assert [entry for entry in privileged if entry not in plain] == [
        ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE"),
        ("AmbientCapabilities", "CAP_NET_BIND_SERVICE"),
    ]
    assert [entry for entry in plain if entry not in privileged] == [("CapabilityBoundingSet", "")]
    # Still no privilege gained through exec: ambient capabilities are set before it.
    assert dict(privileged)["NoNewPrivileges"] == "true"


@pytest.mark.parametrize(
    "word", ["/usr/bin/ga rm", "/x/%n", "/x/$HOME", '/x/"', "/a\nb", "-/usr/bin/garm", "garm"]
)
def test_unit_refuses_words_systemd_would_split_or_expand(word: str) -> None:
    with pytest.raises(ValueError):
        render_unit(word, "/etc/garm/config.toml", "/var/lib/garm", "garm")


def systemd_seconds(value: str) -> float:
    """A time span as systemd reads one without a unit, or in seconds or minutes."""
    for suffix, scale in (("min", 60.0), ("s", 1.0)):
        if value.endswith(suffix):
            return float(value.removesuffix(suffix)) * scale
    return float(value)


@pytest.mark.parametrize("lease_check", [None, "/var/lib/garm-charm/garm-lease"])
def test_systemd_gives_up_on_a_garm_that_cannot_start(lease_check: str | None) -> None:
    # systemd's start limit: the (burst + 1)th start within the interval from the first
    # is refused, and Restart= stops there (systemd.unit(5), StartLimitIntervalSec=).
    # Its defaults (10 s, 5) are never reached 5 s apart: GARM would restart for ever.
    text = render_unit(
        "/usr/local/bin/garm",
        "/etc/garm/config.toml",
        "/var/lib/garm",
        "garm",
        lease_check=lease_check,
    )
    unit, service = (dict(unit_entries(text)[name]) for name in ("[Unit]", "[Service]"))
    interval = systemd_seconds(unit.get("StartLimitIntervalSec", "10"))
    burst = int(unit.get("StartLimitBurst", "5"))
    restart = systemd_seconds(service["RestartSec"])
    assert service["Restart"] == "on-failure"
    assert 0 < burst <= 10 and restart >= 1

    # A GARM refused at once is started every RestartSec: the start past the burst comes
    # burst x RestartSec after the first, within the window, so systemd gives up after
    # `burst` tries, and so it does for a GARM that fails 50 s into each run.
    assert burst * restart < interval
    assert burst * (restart + 50) <= interval


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("privileged_port", [False, True])
def test_systemd_accepts_every_line_of_the_unit(tmp_path: Path, privileged_port: bool) -> None:
    unit = tmp_path / "garm.service"
    text = render_test_unit(privileged_port=privileged_port)
    unit.write_text(text.replace("/usr/local/bin/garm", "/bin/true"))

    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
    )
    # verify skips a capability name it does not know without a word; this one does not.
    names = [
        name
        for key, value in unit_entries(text)["[Service]"]
        if key in ("CapabilityBoundingSet", "AmbientCapabilities")
        for name in value.split()
    ]
    known = subprocess.run(
        ["systemd-analyze", "capability", *names], capture_output=True, text=True, check=False
    )

    assert (result.returncode, result.stderr) == (0, "")
    if "Unknown command" in known.stderr:  # before systemd 251
        pytest.skip("this systemd-analyze has no 'capability' verb to check names with")
    assert (known.returncode, known.stderr) == (0, "")


def test_a_provider_reads_back_from_its_files() -> None:
    hostile = provider("garm-configurator-1", password='p"a\\ss\nword: {x}', network="net #1")
    config_ = config(providers=(provider(), hostile))
    files = render_files(config_)
    for each in config_.providers:
        assert read_provider(each.name, files) == each
    assert read_provider("not-there", files) is None


def test_garm_logs_where_the_cos_collectors_read_and_may_write_there():
    # The collectors read /var/log/**/*log (nothing of the journal, for the
    # opentelemetry-collector); ProtectSystem=strict leaves /var/log read-only unless the
    # unit names the directory.
    assert fnmatch.fnmatch(LOG_FILE, "/var/log/**/*log")
    unit = render_unit("/usr/local/bin/garm", "/etc/garm/config.toml", "/var/lib/garm", "garm")
    assert f"LogsDirectory={LOG_FILE.split('/')[3]}" in unit.splitlines()

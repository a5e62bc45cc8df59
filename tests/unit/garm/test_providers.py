"""Which providers GARM keeps: the related units', and earlier ones a scaleset still uses."""

from __future__ import annotations

from garm.config import GarmConfig, OpenstackProvider, Proxy, SqliteDatabase, render_files
from garm.providers import KeptProviders, earlier_providers, kept_providers


def provider(name: str, word: str = "pw") -> OpenstackProvider:
    return OpenstackProvider(
        name=name,
        auth_url="https://keystone.internal:5000/v3",
        username="ci",
        password=word,
        project_name="ci",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        network="ci-net",
    )


def written(*providers: OpenstackProvider) -> dict[str, str]:
    """The provider files as the charm wrote them for ``providers`` before."""
    garm = GarmConfig(
        port=9997,
        jwt_secret="jwt-Secret-0f8d2c!x",
        db_passphrase="p" * 32,
        database=SqliteDatabase("/var/lib/garm/garm.db"),
        providers=providers,
        proxy=Proxy(),
        provider_executable="/usr/local/bin/garm-provider-openstack",
        config_dir="/etc/garm",
    )
    files = render_files(garm)
    return {name: text for name, text in files.items() if name.startswith("providers/")}


def test_the_related_units_providers_are_kept_as_they_are_now():
    files = written(provider("cfg-0", "old"))
    now = provider("cfg-0", "new")
    assert kept_providers([now], files, lambda: set()) == KeptProviders((now,))


def test_a_departed_units_provider_stays_while_a_scaleset_uses_it():
    gone = provider("cfg-1")
    assert kept_providers([], written(gone), lambda: {"cfg-1"}) == KeptProviders((gone,))


def test_a_provider_no_scaleset_uses_is_dropped():
    kept = kept_providers([provider("cfg-0")], written(provider("cfg-1")), lambda: {"cfg-0"})
    assert kept == KeptProviders((provider("cfg-0"),), ("cfg-1",))


def test_when_garm_cannot_tell_every_earlier_provider_stays():
    gone = provider("cfg-1")
    assert kept_providers([], written(gone), lambda: None) == KeptProviders((gone,))


def test_a_provider_whose_files_do_not_read_is_dropped():
    files = written(provider("cfg-1"))
    files["providers/cfg-1-clouds.yaml"] = "not json"
    assert kept_providers([], files, lambda: None) == KeptProviders((), ("cfg-1",))


def test_earlier_providers_are_those_no_related_unit_defines():
    files = written(provider("cfg-0"), provider("cfg-1"))
    assert earlier_providers(files, [provider("cfg-0")]) == {"cfg-1"}
    assert earlier_providers({}, [provider("cfg-0")]) == set()


def test_garm_is_asked_only_when_an_earlier_provider_is_written():
    def never() -> set[str]:
        raise AssertionError("GARM asked with no earlier provider")

    assert kept_providers([provider("cfg-0")], written(provider("cfg-0")), never).dropped == ()

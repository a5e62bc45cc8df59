"""Desired scaleset specs and GARM's inputs from the configurator units' databags.

Pure. One unit's bad data is held against that unit and never stops the others.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from charms.garm_machine.v0.garm_configurator import ConfiguratorUnitData, DatabagError

from garm.config import OpenstackProvider
from garm.setup import AppCredential, EntitySpec
from juju import entities
from juju.lifecycle import WHOLE, View
from runners.options import NO_CONTEXT, RunnerContext, runner_options
from runners.proxy import PRE_INSTALL_NAME, aproxy_script
from runners.scripts import TemplateError, install_blocks
from scalesets.spec import Desired, HeldSpec, ScalesetSpec, application_of

logger = logging.getLogger(__name__)

_NO_IMAGE = "image_id not published yet"


@dataclass(frozen=True)
class RelationState:
    """What the garm-configurator relations ask for.

    ``silent``: units with no scaleset yet. ``units``: every unit whose data parsed.
    ``unseen``: what an incomplete view waits for. ``chosen``: for ``entities``' memory.
    """

    related: bool
    desired: Desired
    silent: tuple[str, ...] = ()
    units: tuple[tuple[str, ConfiguratorUnitData], ...] = ()
    unseen: str = ""
    chosen: entities.Memory = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class UnitProblem:
    """Something wrong with one unit's GARM settings; ``blocking`` if the operator must act."""

    unit: str
    reason: str
    blocking: bool


@dataclass(frozen=True)
class GarmInputs:
    """What GARM itself must hold for the related units: providers, credentials, orgs.

    ``published``: every (kind, lower-cased name) some unit names, kept even unbound.
    """

    providers: tuple[OpenstackProvider, ...] = ()
    credentials: tuple[AppCredential, ...] = ()
    entities: tuple[EntitySpec, ...] = ()
    published: frozenset[tuple[str, str]] = frozenset()
    problems: tuple[UnitProblem, ...] = ()


def relation_state(
    related: bool,
    units: Iterable[tuple[str, Mapping[str, str]]],
    view: View = WHOLE,
    runner: RunnerContext = NO_CONTEXT,
    remembered: entities.Memory | None = None,
    *,
    app: str,
) -> RelationState:
    """Each configurator unit's databag as a spec, a held spec, or nothing yet.

    Held, so that its live scaleset is left serving: blocking, a unit whose data breaks
    the contract, names another unit's provider, publishes both ``org`` and ``repo`` with
    no known choice (``entities``), or names an org or repo another application names
    with another GitHub App (``credential_conflicts``); waiting, one with no image yet.
    ``app``: this application's name as deployed, for the hints.
    """
    specs: list[ScalesetSpec] = []
    held: list[HeldSpec] = []
    not_ready: dict[tuple[str, str], HeldSpec] = {}
    silent: list[str] = []
    parsed_units: list[tuple[str, ConfiguratorUnitData]] = []
    units = list(units)
    unsettled = {_raw_name(d).lower() for u, d in units if application_of(u) in view.partial}
    others = {own_provider(unit) for unit, _ in units}
    choices = entities.choose(
        units, remembered or {}, view.complete, view.partial | view.cross_model, app=app
    )
    for unit, data in units:
        if not ConfiguratorUnitData.has_scaleset(data):
            silent.append(unit)
            continue
        try:
            if unit in choices.unknown:
                if (refused := refused_either_way(data)) is not None:
                    raise refused  # only checked values are quoted
                logger.error("garm-configurator unit %s publishes both org and repo", unit)
                seen = choices.unknown[unit]
                why = (
                    f"publishes both org {seen.org!r} and repo {seen.repo!r} and which is "
                    f"current is not known: juju run {app}/leader choose-entity unit={unit} "
                    "use=org (or use=repo)"
                )
                held.append(HeldSpec(unit, _raw_name(data), why))
                continue
            parsed = _owned(
                unit,
                ConfiguratorUnitData.from_databag(data, choices.uses.get(unit)),
                others,
                application_of(unit) in view.cross_model,
            )
            _check_script_names(parsed)
        except DatabagError as exc:
            logger.error("garm-configurator unit %s published invalid data: %s", unit, exc)
            held.append(HeldSpec(unit, _raw_name(data), f"invalid {exc}"))
            continue
        parsed_units.append((unit, parsed))
    conflicts = credential_conflicts(parsed_units)
    for unit, parsed in parsed_units:
        conflict = conflicts.get(_key(parsed))
        if conflict is not None and application_of(unit) in conflict.applications:
            held.append(HeldSpec(unit, parsed.name, conflict.why_held))
            continue
        if parsed.image_id is None:
            group = (application_of(unit), parsed.name.lower())
            not_ready.setdefault(group, HeldSpec(unit, parsed.name, _NO_IMAGE, False))
            continue
        try:
            specs.append(spec_from_unit(unit, parsed, runner))
        except TemplateError as exc:
            # Values are checked before this, so only a value that slipped through lands
            # here; it is refused, never allowed to break the hook.
            logger.error("garm-configurator unit %s: runner options refused: %s", unit, exc)
            held.append(HeldSpec(unit, parsed.name, f"runner options refused: {exc}"))
    # Units of one application publishing one name are one scaleset: while one of them
    # can define it, the others still waiting for their image are no news.
    defined = {(application_of(s.source), s.name.lower()) for s in specs}
    held += [h for group, h in not_ready.items() if group not in defined]
    return RelationState(
        related,
        Desired(
            tuple(specs),
            tuple(held),
            view.complete,
            frozenset(unsettled - {""}),
            runner.debug_ssh_problem,
        ),
        tuple(silent),
        tuple(parsed_units),
        view.missing,
        choices.memory,
    )


def failover_address(
    units: int, external_url: str, postgresql_related: bool
) -> tuple[UnitProblem, ...]:
    """With 2+ units on PostgreSQL, runners need an ``external-url`` that follows the leader.

    GARM stamps its callback and metadata URLs on each runner it creates: a runner made
    on one unit's address cannot finish, nor report, once another unit leads. On sqlite
    no other unit may lead (``juju.lifecycle.sqlite_tenancy``).
    """
    if external_url or units < 2 or not postgresql_related:
        return ()
    reason = (
        f"with {units} garm units, set it to an address that follows the leader "
        "(a virtual IP or DNS name), or runners lose GARM at a failover"
    )
    return (UnitProblem("external-url", reason, True),)


def refused_either_way(data: Mapping[str, str]) -> DatabagError | None:
    """Why ``org`` or ``repo`` read alone breaks the contract, or None: before either is quoted."""
    try:
        for kind in entities.KINDS:
            ConfiguratorUnitData.from_databag(data, kind)
    except DatabagError as exc:
        return exc
    return None


def own_provider(unit: str) -> str:
    """The provider a configurator unit defines: its unit name with ``-`` for ``/``."""
    return unit.replace("/", "-")


def _owned(
    unit: str, data: ConfiguratorUnitData, names: set[str], cross_model: bool
) -> ConfiguratorUnitData:
    """The unit's data with its provider named after the unit itself, or a refusal.

    So no unit's OpenStack settings replace another's (whose runners would boot in a
    foreign project). A cross-model unit's name may differ in the application part (its
    offer or alias), never in the number: it is renamed to the local one. ``names``: the
    providers the related units own.
    """
    own = own_provider(unit)
    published = data.provider_name
    if published == own:
        return data
    number = unit.rpartition("/")[2]
    if not cross_model or published in names or not published.endswith(f"-{number}"):
        raise DatabagError(
            "provider_name",
            f"{published!r} is not this unit's own provider ({own!r}); "
            "a unit may only define its own",
        )
    return dataclasses.replace(data, provider_name=own)


def _check_script_names(data: ConfiguratorUnitData) -> None:
    """Refuse a script that would run before the charm's proxy script (name order)."""
    if not data.runner_http_proxy:
        return
    for name in sorted(data.pre_install_scripts or {}):
        if name <= PRE_INSTALL_NAME:
            raise DatabagError(
                "pre_install_scripts",
                f"{name!r} would run before the charm's proxy script {PRE_INSTALL_NAME}: "
                "give it a name that sorts after it",
            )


@dataclass(frozen=True)
class CredentialConflict:
    """An org or repo that several applications name with different GitHub Apps.

    GARM binds it to one credential, with which every runner under it registers: one
    application's runners would act as another's App.
    """

    option: str
    name: str
    applications: tuple[str, ...]

    @property
    def why_held(self) -> str:
        """Why its applications' units naming it are held, and the way out."""
        *first, last = self.applications
        return (
            f"{self.option} {self.name!r} is named by {', '.join(first)} and {last} "
            "with different GitHub Apps: give them one App, or point all but one elsewhere"
        )


def credential_conflicts(
    units: Iterable[tuple[str, ConfiguratorUnitData]],
) -> dict[tuple[str, str], CredentialConflict]:
    """The orgs and repos, by ``_key``, named with different GitHub Apps.

    An application's App is the ids of its first unit naming it (a former configurator
    leader keeps what it published), so it never conflicts with itself. The ids are in
    the databag (not the key, which may be mid-rotation): seen before any secret is.
    """
    apps: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
    spelt: dict[tuple[str, str], str] = {}
    for unit, data in units:
        key, ids = _key(data), _app_ids(data)
        if not key[1] or ids is None:
            continue
        spelt.setdefault(key, _entity(data)[1])
        apps.setdefault(key, {}).setdefault(application_of(unit), ids)
    return {
        key: CredentialConflict(
            "org" if key[0] == "organization" else "repo", spelt[key], tuple(sorted(named))
        )
        for key, named in apps.items()
        if len(set(named.values())) > 1
    }


def _entity(data: ConfiguratorUnitData) -> tuple[str, str]:
    """The kind of GARM entity a unit's scaleset serves, and its name ("" if none)."""
    if data.org:
        return "organization", data.org
    return "repository", data.repo or ""


def _key(data: ConfiguratorUnitData) -> tuple[str, str]:
    """The unit's entity as (kind, lower-cased name): how GARM tells entities apart."""
    kind, name = _entity(data)
    return kind, name.lower()


def _raw_name(data: Mapping[str, str]) -> str:
    """The name an invalid unit published; "" when unusable (then nothing is an orphan)."""
    name = (data.get("name") or "").strip()
    try:
        ConfiguratorUnitData.check_name(name)
    except DatabagError:
        return ""
    return name


def spec_from_unit(
    unit: str, data: ConfiguratorUnitData, runner: RunnerContext = NO_CONTEXT
) -> ScalesetSpec:
    """The scaleset a valid, complete unit asks for.

    Pre-install scripts go as ``extra_specs.pre_install_scripts`` (name to base64, run
    as root in name order: docs/reference/garm-api.md §2.5). A proxy adds the charm's
    aproxy script, named to run first, and turns off the boot-time OS update, which would
    run before it. The template blocks are rendered here so the planner can tell from the
    spec alone whether GARM's template is current.
    """
    options = runner_options(data)
    scripts = dict(data.pre_install_scripts or {})
    extra_specs: dict[str, object] = {}
    if options.proxy is not None:
        scripts[PRE_INSTALL_NAME] = aproxy_script(options.proxy, runner.garm_host)
        extra_specs["disable_updates"] = True
    if scripts:
        extra_specs["pre_install_scripts"] = {
            name: base64.b64encode(script.encode()).decode()
            for name, script in sorted(scripts.items())
        }
    kind, entity = _entity(data)
    return ScalesetSpec(
        source=unit,
        name=data.name,
        entity_kind=kind,  # type: ignore[arg-type]
        entity_name=entity,
        provider_name=data.provider_name,
        image=data.image_id or "",
        flavor=data.flavor,
        os_arch=data.os_arch,
        max_runners=data.max_runner,
        min_idle_runners=data.min_idle_runner,
        labels=data.labels,
        runner_group=data.runner_group,
        extra_specs=extra_specs,
        template_blocks=install_blocks(options, runner.debug_ssh),
    )


# The provider's settings a unit must publish, each an ``OpenstackProvider`` field.
_OPENSTACK_KEYS = tuple(
    f"openstack_{f.name}"
    for f in dataclasses.fields(OpenstackProvider)
    if f.name not in ("name", "auth_url", "password")
)
PKCS1_HEADER = "-----BEGIN RSA PRIVATE KEY-----"


def garm_inputs(
    units: Iterable[tuple[str, ConfiguratorUnitData]],
    read_secret: Callable[[str], str | None],
) -> GarmInputs:
    """Providers, GitHub App credentials and entities from the units' Phase B data.

    One credential per App; an entity is bound to its first unit's, and to none while in
    conflict: GARM keeps its binding.
    """
    units = list(units)
    conflicts = credential_conflicts(units)
    providers: list[OpenstackProvider] = []
    credentials: dict[str, AppCredential] = {}
    entities: dict[tuple[str, str], EntitySpec] = {}
    published: set[tuple[str, str]] = set()
    problems: list[UnitProblem] = []
    for unit, data in units:
        kind, name = _entity(data)
        if name:
            published.add(_key(data))
        if data.openstack_auth_url is not None:
            provider = _provider(unit, data, read_secret, problems)
            if provider is not None:
                providers.append(provider)
        credential = _credential(unit, data, read_secret, problems)
        if credential is None:
            continue
        credentials.setdefault(credential.name, credential)
        if name and _key(data) not in conflicts:
            entities.setdefault(_key(data), EntitySpec(kind, name, credential.name, unit))
    return GarmInputs(
        tuple(providers),
        tuple(credentials.values()),
        tuple(entities.values()),
        frozenset(published),
        tuple(problems),
    )


def _provider(
    unit: str,
    data: ConfiguratorUnitData,
    read_secret: Callable[[str], str | None],
    problems: list[UnitProblem],
) -> OpenstackProvider | None:
    missing = [key for key in _OPENSTACK_KEYS if getattr(data, key) is None]
    if missing:
        problems.append(UnitProblem(unit, f"OpenStack settings incomplete: {missing[0]}", True))
        return None
    password = data.openstack_password
    if password is None and data.openstack_password_secret_uri:
        password = read_secret(data.openstack_password_secret_uri)
    if password is None:
        problems.append(UnitProblem(unit, "OpenStack password secret not readable yet", False))
        return None
    settings = {k.removeprefix("openstack_"): getattr(data, k) or "" for k in _OPENSTACK_KEYS}
    return OpenstackProvider(
        data.provider_name, data.openstack_auth_url or "", password=password, **settings
    )


def _credential(
    unit: str,
    data: ConfiguratorUnitData,
    read_secret: Callable[[str], str | None],
    problems: list[UnitProblem],
) -> AppCredential | None:
    uri = data.github_private_key_secret_uri
    if data.github_app_id is None or data.github_installation_id is None or uri is None:
        return None
    ids = _app_ids(data)
    if ids is None:
        problems.append(UnitProblem(unit, "GitHub app and installation ids must be numbers", True))
        return None
    key = read_secret(uri)
    if key is None:
        problems.append(UnitProblem(unit, "GitHub App key secret not readable yet", False))
        return None
    if PKCS1_HEADER not in key:
        problems.append(
            UnitProblem(
                unit,
                "GitHub App key must be PKCS#1 (BEGIN RSA PRIVATE KEY); convert it with "
                "openssl rsa -in key.pem -out key-rsa.pem -traditional",
                True,
            )
        )
        return None
    return AppCredential(*ids, key, unit)


def _app_ids(data: ConfiguratorUnitData) -> tuple[int, int] | None:
    """The GitHub App (app id, installation id) a unit publishes; None if none, or not numbers."""
    app_id, installation_id = data.github_app_id, data.github_installation_id
    if app_id is None or installation_id is None or data.github_private_key_secret_uri is None:
        return None
    if not all(i.isascii() and i.isdigit() for i in (app_id, installation_id)):
        return None
    return int(app_id), int(installation_id)

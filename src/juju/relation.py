"""Typed charm state: desired scaleset specs and GARM's inputs from relation data.

Pure: the charm hands in plain databags; nothing here talks to Juju (config options are
read in ``config``). One unit's bad data is recorded against that unit and never
stops the others.
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

    ``silent`` lists units related but with no scaleset published yet: nothing of theirs
    can exist in GARM, so they hold nothing back, but the operator may want to know.
    ``units`` keeps every unit whose data parsed, for what GARM itself needs of them.
    ``unseen`` names what an incomplete view waits for (``desired.complete`` False).
    ``chosen`` is which of ``org`` and ``repo`` each unit means, to remember.
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

    ``published`` is every (kind, lower-cased name) some unit names, with or without
    credentials: GARM keeps those entities even when it cannot (re)bind them yet.
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
) -> RelationState:
    """Parse every configurator unit's databag into a spec, a held spec, or nothing yet.

    ``units`` is (unit name, databag) in a stable order. A unit whose data breaks the
    contract, or names another unit's provider, is held (blocking) so its live scaleset
    is left serving; one whose image is not known yet is held (waiting) for the same
    reason. ``view`` says whether this unit sees every related unit (``lifecycle``);
    ``runner`` is what every runner is set up with besides its unit's options;
    ``remembered`` which of ``org`` and ``repo`` each unit meant before (``entities``):
    a unit publishing both whose choice is not known is held (blocking). So is every
    unit of applications naming one org or repo with different GitHub Apps
    (``credential_conflicts``): whichever App it served under, the other application's
    runners would register with it.
    """
    specs: list[ScalesetSpec] = []
    held: list[HeldSpec] = []
    not_ready: dict[tuple[str, str], HeldSpec] = {}
    silent: list[str] = []
    parsed_units: list[tuple[str, ConfiguratorUnitData]] = []
    unsettled: set[str] = set()
    units = list(units)
    others = {own_provider(unit) for unit, _ in units}
    choices = entities.choose(
        units, remembered or {}, view.complete, view.partial | view.cross_model
    )
    for unit, data in units:
        if application_of(unit) in view.partial:
            unsettled.add(_raw_name(data).lower())
        if not ConfiguratorUnitData.has_scaleset(data):
            silent.append(unit)
            continue
        try:
            if unit in choices.unknown:
                check_either_reading(data)  # only checked values are quoted
                logger.error("garm-configurator unit %s publishes both org and repo", unit)
                held.append(HeldSpec(unit, _raw_name(data), _both(unit, choices.unknown[unit])))
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
    conflicted = _conflicted_units(parsed_units)
    for unit, parsed in parsed_units:
        if unit in conflicted:
            held.append(HeldSpec(unit, parsed.name, conflicted[unit].why_held))
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
    """With 2+ units, runners need an address that follows the leader: ``external-url``.

    GARM stamps its callback and metadata URLs on each runner when it creates it, so a
    runner made while GARM ran on one unit's address cannot finish installing, nor say
    it is done, once another unit leads. Only an address the operator moves with the
    leader (a virtual IP, a DNS name, a load balancer in front) survives a failover. On
    sqlite no other unit may lead (``juju.lifecycle.sqlite_tenancy``): no failover.
    """
    if external_url or units < 2 or not postgresql_related:
        return ()
    reason = (
        f"with {units} garm units, set it to an address that follows the leader "
        "(a virtual IP or DNS name), or runners lose GARM at a failover"
    )
    return (UnitProblem("external-url", reason, True),)


def check_either_reading(data: Mapping[str, str]) -> None:
    """Raise ``DatabagError`` unless the unit's data keeps the contract read either way.

    For a unit publishing both ``org`` and ``repo`` whose choice is not known: both values
    are checked before either is quoted (in a status, or an action's answer).
    """
    for kind in entities.KINDS:
        ConfiguratorUnitData.from_databag(data, kind)


def _both(unit: str, seen: entities.Seen) -> str:
    """Why a unit publishing both ``org`` and ``repo`` is held, and the way out."""
    return (
        f"publishes both org {seen.org!r} and repo {seen.repo!r} and which is current "
        f"is not known: juju run garm/leader choose-entity unit={unit} use=org (or use=repo)"
    )


def own_provider(unit: str) -> str:
    """The provider a configurator unit defines: its unit name with ``-`` for ``/``."""
    return unit.replace("/", "-")


def _owned(
    unit: str, data: ConfiguratorUnitData, names: set[str], cross_model: bool
) -> ConfiguratorUnitData:
    """The unit's data with its provider named after the unit itself, or a refusal.

    The configurator derives ``provider_name`` from its own unit name, so a provider can
    only ever be defined by the unit named after it: one unit's OpenStack settings can
    never replace another's, whose runners would then boot in a foreign project. A
    cross-model configurator is named here after its offer or alias, so its derived name
    may differ from the local one in the application part but never in the unit number;
    for such a unit only, that name is accepted and the provider named after the local
    unit. ``names`` are the providers the related units own.
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
    """Refuse a configurator script that would run before the charm's proxy script.

    GARM's provider runs pre-install scripts in byte order of their names; behind a
    proxy, one that ran first would find no way out (and the name itself is the
    charm's).
    """
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
    """An org or repo that several configurator applications name with different GitHub Apps.

    GARM binds an org or repo to one credential, and every scaleset under it registers
    its runners with that App: bound to either application's App, the other's runners
    would act as an App that is not theirs, and the binding would follow whichever unit
    came first as units come and go. ``option`` is the configurator option naming it
    (``org`` or ``repo``), ``name`` its value as the first unit spells it, and
    ``applications`` those applications, sorted.
    """

    option: str
    name: str
    applications: tuple[str, ...]

    @property
    def why_held(self) -> str:
        """Why every unit of these applications naming it is held, and the way out."""
        *first, last = self.applications
        return (
            f"{self.option} {self.name!r} is named by {', '.join(first)} and {last} "
            "with different GitHub Apps: give them one App, or point all but one elsewhere"
        )


def credential_conflicts(
    units: Iterable[tuple[str, ConfiguratorUnitData]],
) -> dict[tuple[str, str], CredentialConflict]:
    """The orgs and repos, as (kind, lower-cased name), named with different GitHub Apps.

    An application's App for an org or repo is the (app id, installation id) published by
    its first unit (in order) naming it: only a configurator's leader publishes one, and
    a unit that led before keeps what it published then, so the units of one application
    never conflict. Applications naming it with one App share its one credential in GARM
    (``app-<app id>-<installation id>``): no conflict either. The key takes no part:
    applications of one App may hold different keys while it is rotated. The ids are
    read from the databag alone, so a conflict is seen before any secret is readable.
    """
    apps: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
    spelt: dict[tuple[str, str], str] = {}
    for unit, data in units:
        kind, name = _entity(data)
        ids = _app_ids(data)
        if not name or ids is None:
            continue
        key = (kind, name.lower())
        spelt.setdefault(key, name)
        apps.setdefault(key, {}).setdefault(application_of(unit), ids)
    return {
        key: CredentialConflict(
            "org" if key[0] == "organization" else "repo", spelt[key], tuple(sorted(named))
        )
        for key, named in apps.items()
        if len(set(named.values())) > 1
    }


def _conflicted_units(
    units: list[tuple[str, ConfiguratorUnitData]],
) -> dict[str, CredentialConflict]:
    """Each unit of a conflict's applications naming its org or repo, and that conflict."""
    conflicts = credential_conflicts(units)
    held: dict[str, CredentialConflict] = {}
    for unit, data in units:
        kind, name = _entity(data)
        conflict = conflicts.get((kind, name.lower()))
        if conflict is not None and application_of(unit) in conflict.applications:
            held[unit] = conflict
    return held


def _entity(data: ConfiguratorUnitData) -> tuple[str, str]:
    """The kind of GARM entity a unit's scaleset serves, and its name ("" if none)."""
    if data.org:
        return "organization", data.org
    return "repository", data.repo or ""


def _raw_name(data: Mapping[str, str]) -> str:
    """The name an invalid unit published, to keep its scaleset untouched by name.

    Empty when the name itself is unusable: the planner then treats no scaleset as an
    orphan, since any of them might be this unit's.
    """
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

    Pre-install scripts reach GARM's providers as ``extra_specs.pre_install_scripts``,
    a JSON object of name to base64 script (docs/reference/garm-api.md §2.5), run as
    root in name order before anything else on the runner. A proxy adds the charm's
    aproxy script, named to run first, and turns off the OS update at boot
    (``disable_updates``), which would otherwise run before the proxy is set up. What
    the runner install template must add is rendered here too, so that the planner can
    tell from it alone whether the template GARM holds is current.
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


_OPENSTACK_KEYS = (
    "openstack_username",
    "openstack_project_name",
    "openstack_user_domain_name",
    "openstack_project_domain_name",
    "openstack_region_name",
    "openstack_network",
)
PKCS1_HEADER = "-----BEGIN RSA PRIVATE KEY-----"


def garm_inputs(
    units: Iterable[tuple[str, ConfiguratorUnitData]],
    read_secret: Callable[[str], str | None],
) -> GarmInputs:
    """Providers, GitHub App credentials and entities from the units' Phase B data.

    ``read_secret`` resolves a Juju secret URI to its ``value`` (None when unreadable).
    Credentials are de-duplicated per (app id, installation id); each entity is bound to
    the credential of the first unit (in order) that publishes it. One that applications
    name with different GitHub Apps (``credential_conflicts``) is asked for with none:
    GARM keeps it bound as it is, and ``published`` still names it, so it is not removed.
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
            published.add((kind, name.lower()))
        if data.openstack_auth_url is not None:
            provider = _provider(unit, data, read_secret, problems)
            if provider is not None:
                providers.append(provider)
        credential = _credential(unit, data, read_secret, problems)
        if credential is None:
            continue
        credentials.setdefault(credential.name, credential)
        if name and (kind, name.lower()) not in conflicts:
            entities.setdefault(
                (kind, name.lower()), EntitySpec(kind, name, credential.name, unit)
            )
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
    return OpenstackProvider(
        name=data.provider_name,
        auth_url=data.openstack_auth_url or "",
        username=data.openstack_username or "",
        password=password,
        project_name=data.openstack_project_name or "",
        user_domain_name=data.openstack_user_domain_name or "",
        project_domain_name=data.openstack_project_domain_name or "",
        region_name=data.openstack_region_name or "",
        network=data.openstack_network or "",
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
    """The GitHub App (app id, installation id) a unit publishes, if it publishes one.

    None as well when either id is not a number: no credential can be made of them.
    """
    app_id, installation_id = data.github_app_id, data.github_installation_id
    if app_id is None or installation_id is None or data.github_private_key_secret_uri is None:
        return None
    if not all(i.isascii() and i.isdigit() for i in (app_id, installation_id)):
        return None
    return int(app_id), int(installation_id)

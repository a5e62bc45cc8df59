"""Runner options through whole passes over real HTTP against the GARM double (#9).

The specs are built from configurator databags the way the charm builds them
(``juju.relation.spec_from_unit``), so what reaches GARM is what a user's options produce:
templates derived from GARM's own ``github_linux`` as the double serves it, the
charm's proxy script in ``extra_specs``, and changes made in place.
"""

from __future__ import annotations

import base64
import dataclasses
import re

from charms.garm_machine.v0.garm_configurator import ConfiguratorUnitData

from juju.relation import RelationState, spec_from_unit
from juju.status import summarise
from runners.options import DebugSsh, RunnerContext
from runners.proxy import PRE_INSTALL_NAME
from runners.scripts import ANCHOR, derive_template
from runners.templates import template_name
from scalesets.planner import LISTENER_STARTUP
from scalesets.spec import Desired, ScalesetSpec
from tests.databags import SECOND_UNIT
from tests.garm_double import GITHUB_LINUX_TEMPLATE, GarmDouble
from tests.passes import PROVIDER

UNIT = "garm-configurator/0"
OPTIONS = {
    "dockerhub_mirror": "https://registry-mirror.internal:5000",
    "otel_collector_endpoint": "http://otel.internal:4317",
    "pre_job_script": "echo starting",
}
TMATE = DebugSsh("tmate.internal", 10022, "SHA256:rsa", "SHA256:ed")


GARM_HOST = RunnerContext("10.1.2.9")


def spec(runner: RunnerContext = GARM_HOST, /, **changes: str | None) -> ScalesetSpec:
    data = {**SECOND_UNIT, "provider_name": PROVIDER, "org": "example-org", **changes}
    parsed = ConfiguratorUnitData.from_databag({k: v for k, v in data.items() if v is not None})
    return spec_from_unit(UNIT, parsed, runner)


def charm_templates(garm: GarmDouble) -> list[dict]:
    return [t for t in garm.templates() if t["name"].startswith("garm-charm-")]


def system_linux_id(garm: GarmDouble) -> int:
    return next(t["id"] for t in garm.templates() if t["name"] == "github_linux")


def test_options_reach_garm_as_a_derived_template_used_from_the_first_runner(passes, garm):
    wanted = spec(**OPTIONS)
    outcome = passes.run(wanted)
    assert outcome.ok
    [template] = charm_templates(garm)
    assert template["name"] == template_name("sm-x64")
    assert template["owner_id"] == garm.username
    # GARM's own template, the charm's blocks just before the runner is configured.
    assert template["data"] == derive_template(GITHUB_LINUX_TEMPLATE, wanted.template_blocks)
    before, _, _ = template["data"].partition(ANCHOR)
    assert "DOCKERHUB_MIRROR=https://registry-mirror.internal:5000" in before
    [scaleset] = garm.scalesets()
    assert scaleset["template_id"] == template["id"]
    # Created with it: no scaleset write other than the create.
    assert [w for w in passes.writes if "scalesets" in w[1]] == [
        ("POST", f"/organizations/{garm.entities()[0]['id']}/scalesets")
    ]


def test_a_settled_pass_reads_the_template_list_once_and_no_template_body(passes, garm):
    specs = [
        dataclasses.replace(spec(**OPTIONS), name=f"s{i}", source=f"garm-configurator/{i}")
        for i in range(25)
    ]
    passes.run(*specs)
    passes.run(*specs)
    assert passes.writes == []
    assert passes.reads == 6  # scalesets, instances, providers, orgs, repos, templates
    assert [r.path for r in passes.last if r.path.startswith("/templates")] == ["/templates"]


def test_a_changed_option_rewrites_the_template_in_place_and_replaces_nothing(passes, garm):
    passes.run(spec(**OPTIONS))
    [before] = garm.scalesets()
    passes.later()
    changed = spec(**{**OPTIONS, "pre_job_script": "echo another"})
    outcome = passes.run(changed)
    assert outcome.ok
    [template] = charm_templates(garm)
    assert passes.writes == [("PUT", f"/templates/{template['id']}")]
    assert template["data"] == derive_template(GITHUB_LINUX_TEMPLATE, changed.template_blocks)
    [after] = garm.scalesets()
    assert (after["id"], after["name"], after["template_id"]) == (
        before["id"],
        before["name"],
        template["id"],
    )


def test_a_proxy_is_a_pre_install_script_and_no_os_update_changed_in_place(passes, garm):
    passes.run(spec())
    [before] = garm.scalesets()
    proxied = spec(
        runner_http_proxy="http://squid.internal:3128",
        pre_install_scripts='{"pre_install.sh": "echo mine"}',
    )
    passes.later()
    passes.run(proxied)
    [after] = garm.scalesets()
    assert after["id"] == before["id"]
    scripts = after["extra_specs"]["pre_install_scripts"]
    assert list(scripts) == [PRE_INSTALL_NAME, "pre_install.sh"]
    aproxy = base64.b64decode(scripts[PRE_INSTALL_NAME]).decode()
    assert "squid.internal:3128" in aproxy
    assert "10.1.2.9" in aproxy  # GARM's own address is never sent through the proxy
    assert after["extra_specs"]["disable_updates"] is True
    # A proxy alone needs no template: aproxy is set up before anything is fetched.
    assert charm_templates(garm) == []
    assert after["template_id"] == system_linux_id(garm)


def test_options_removed_go_back_to_garms_template_and_the_charms_is_deleted(passes, garm):
    passes.run(spec(**OPTIONS))
    passes.later()
    outcome = passes.run(spec())
    assert outcome.ok
    [scaleset] = garm.scalesets()
    assert scaleset["template_id"] == system_linux_id(garm)
    assert charm_templates(garm) == []
    # Pointed away first, then deleted: GARM refuses to delete a template in use.
    kinds = [w for w in passes.writes if w[0] in ("PUT", "DELETE")]
    assert kinds[0][0] == "PUT" and kinds[0][1].startswith("/scalesets/")
    assert kinds[-1][0] == "DELETE" and kinds[-1][1].startswith("/templates/")


def test_a_label_change_keeps_the_template_for_both_generations_then_for_the_new(passes, garm):
    passes.run(spec(**OPTIONS))
    [old] = garm.scalesets()
    passes.later()
    relabelled = spec(**OPTIONS, labels="self-hosted,linux,arm64")
    passes.run(relabelled)
    [template] = charm_templates(garm)
    new = next(s for s in garm.scalesets() if s["id"] != old["id"])
    assert new["template_id"] == template["id"]
    passes.later(LISTENER_STARTUP)
    passes.run(relabelled)
    passes.later()
    passes.run(relabelled)
    assert [s["id"] for s in garm.scalesets()] == [new["id"]]
    assert [t["id"] for t in charm_templates(garm)] == [template["id"]]


def test_a_scaleset_nobody_asks_for_takes_its_template_with_it(passes, garm):
    other = dataclasses.replace(spec(), name="other", source="garm-configurator/1")
    passes.run(spec(**OPTIONS), other)
    passes.later()
    passes.run(other)  # retired, no runner: deleted in the same pass, then its template
    assert all("other" in {t["name"] for t in s["tags"]} for s in garm.scalesets())
    assert len(garm.scalesets()) == 1
    assert charm_templates(garm) == []


def test_the_base_template_is_read_once_a_pass_whatever_the_number_of_templates(passes, garm):
    specs = [
        dataclasses.replace(spec(**OPTIONS), name=f"s{i}", source=f"garm-configurator/{i}")
        for i in range(5)
    ]
    passes.run(*specs)
    assert len(charm_templates(garm)) == 5
    bodies = [r.path for r in passes.last if re.fullmatch(r"/templates/\d+/?", r.path)]
    assert bodies == [f"/templates/{system_linux_id(garm)}"]


def test_a_base_template_without_the_anchor_is_an_error_and_creates_nothing(passes, garm):
    base = system_linux_id(garm)
    passes.client.update_template(
        base, {"data": base64.b64encode(b"#!/bin/bash\necho changed\n").decode()}
    )
    wanted = spec(**OPTIONS)
    other = dataclasses.replace(wanted, name="other", source="garm-configurator/1")
    outcome = passes.run(wanted, other)
    assert not outcome.ok
    # Every template is refused alike: said once, not once per scaleset.
    [error] = outcome.errors
    assert ANCHOR in error.error
    assert garm.scalesets() == []
    assert charm_templates(garm) == []
    # Only the operator can fix GARM's template: blocked, saying how.
    summary = summarise(outcome, RelationState(True, Desired((wanted, other))), app="garm")
    assert summary.kind == "blocked"
    assert "garm-cli template restore" in summary.message


def test_a_restored_base_rewrites_the_charms_template_once(passes, garm):
    passes.run(spec(**OPTIONS))
    passes.later()
    passes.client._send("POST", "/templates/restore", {"restore_all": True})
    passes.run(spec(**OPTIONS))
    [template] = charm_templates(garm)
    assert passes.writes == [("PUT", f"/templates/{template['id']}")]
    passes.run(spec(**OPTIONS))
    assert passes.writes == []


def test_templates_of_others_are_never_touched(passes, garm):
    garm.add_template("garm-charm-sm-x64", "#!/bin/bash\necho theirs\n")
    garm.add_template("hand-made", "#!/bin/bash\necho mine\n")
    before = garm.templates()
    outcome = passes.run(spec(**OPTIONS))
    assert garm.scalesets() == []
    [skipped] = outcome.skipped
    assert skipped.blocking and "did not make" in skipped.reason
    passes.later()
    passes.run(spec())  # without options: GARM's template, theirs still untouched
    assert garm.templates() == before


def test_debug_ssh_reaches_every_scaleset_and_leaving_it_removes_it(passes, garm):
    with_tmate = RunnerContext("10.1.2.9", TMATE)
    passes.run(spec(with_tmate))
    [template] = charm_templates(garm)
    assert "TMATE_SERVER_HOST=tmate.internal" in template["data"]
    assert "TMATE_SERVER_PORT=10022" in template["data"]
    passes.later()
    passes.run(spec())
    assert charm_templates(garm) == []

"""The charm's Prometheus alert rules: read as cosl reads them, checked and tested by promtool.

The rules (``src/prometheus_alert_rules``) are static files that the charm hands to COS.
Here every rule is read through cosl as the charm's COS relation reads it, every alert
is held to the runbook it names in ``docs/reference/alerts.md``, and promtool (from
Debian's and Ubuntu's ``prometheus`` package) checks the files and runs the unit tests
in ``tests/unit/observe/alert_rules_tests``: a firing and a quiet case for every alert.
promtool is looked for on ``PATH``, then beside the tests' Python, where ``tox -e unit``
fetches it (``tests/promtool.py``); without it those tests skip and say why.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from cosl import JujuTopology
from cosl.rules import Rules

from tests import promtool

ROOT = Path(__file__).resolve().parents[3]
RULES_DIR = ROOT / "src" / "prometheus_alert_rules"
RULE_FILES = sorted(RULES_DIR.glob("*.rules"))
PROMTOOL_TESTS_DIR = Path(__file__).parent / "alert_rules_tests"
PROMTOOL_TESTS = sorted(PROMTOOL_TESTS_DIR.glob("*_test.yaml"))
RUNBOOKS = ROOT / "docs" / "reference" / "alerts.md"

# Issue #12: GARM down or not answering (GarmDown; GarmPassesFailing when GARM answers
# its scrape but not the charm's passes), a changeover past drain deadline plus hand-over
# timeout, a scaleset blocked for the operator, a delete kept by GARM, runners in error
# on any scaleset, no pass for three timer intervals.
ALERTS = {
    "GarmDown",
    "GarmPassesFailing",
    "GarmChangeoverOverdue",
    "GarmScalesetBlocked",
    "GarmDeleteKept",
    "GarmRunnersFailing",
    "GarmReconcileStalled",
}

PROMTOOL = promtool.find()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason=promtool.missing("the alert rules are neither checked nor unit-tested"),
)

TOPOLOGY = JujuTopology(
    model="ci",
    model_uuid="5a2d3e61-7b4c-4f8e-9a0b-1c2d3e4f5a6b",
    application="garm",
    unit="garm/0",
    charm_name="garm",
)


def _rules() -> list[dict[str, Any]]:
    """Every rule of every rules file, as written."""
    return [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def _runbook_sections() -> dict[str, str]:
    """The runbook page's ``## <alert>`` sections, by alert name."""
    parts = re.split(r"^## +(\S+) *$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_raise_the_alerts_issue_12_asks_for():
    names = [rule["alert"] for rule in _rules()]

    assert sorted(names) == sorted(ALERTS)


def test_cosl_reads_every_rule_and_labels_it_with_the_topology():
    rules = Rules("promql", TOPOLOGY)
    rules.add_path(RULES_DIR)

    read = [rule for group in rules.as_dict()["groups"] for rule in group["rules"]]
    assert sorted(rule["alert"] for rule in read) == sorted(ALERTS)
    for rule in read:
        assert rule["labels"]["juju_model"] == "ci"
        assert rule["labels"]["juju_model_uuid"] == TOPOLOGY.model_uuid
        assert rule["labels"]["juju_application"] == "garm"


@pytest.mark.parametrize("rule", _rules(), ids=lambda rule: rule["alert"])
def test_every_alert_has_a_severity_a_summary_and_its_runbook(rule: dict[str, Any]):
    annotations = rule["annotations"]

    assert rule["labels"]["severity"] in {"critical", "warning"}
    assert annotations["summary"].strip()
    assert annotations["description"].endswith(
        f"Runbook: docs/reference/alerts.md, {rule['alert']}."
    )
    section = _runbook_sections()[rule["alert"]]
    for heading in ("When it fires", "What it means", "What to do"):
        assert f"**{heading}**" in section, f"{rule['alert']}: no {heading!r} in its runbook"
    assert "    juju " in section, f"{rule['alert']}: its runbook gives no juju command"


def test_the_runbooks_cover_exactly_the_alerts_and_the_table_links_each():
    text = RUNBOOKS.read_text()

    assert set(_runbook_sections()) == ALERTS
    for alert in ALERTS:
        assert f"[`{alert}`](#{alert.lower()})" in text


def test_every_alert_is_unit_tested_firing_and_quiet():
    """Each alert has a promtool case expecting it and one expecting silence."""
    firing: set[str] = set()
    quiet: set[str] = set()
    tested_files: set[Path] = set()
    for path in PROMTOOL_TESTS:
        spec = yaml.safe_load(path.read_text())
        tested_files.update((path.parent / f).resolve() for f in spec["rule_files"])
        for case in (c for test in spec["tests"] for c in test.get("alert_rule_test", [])):
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])

    assert firing == ALERTS
    assert quiet == ALERTS
    assert tested_files == {path.resolve() for path in RULE_FILES}


@needs_promtool
@pytest.mark.parametrize("path", RULE_FILES, ids=lambda path: path.name)
def test_promtool_checks_the_rules_file(path: Path):
    checked = _promtool("check", "rules", path)

    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_promtool_checks_the_rules_as_cosl_hands_them_to_cos(tmp_path: Path):
    rules = Rules("promql", TOPOLOGY)
    rules.add_path(RULES_DIR)
    handed = tmp_path / "garm.rules"
    handed.write_text(yaml.safe_dump(rules.as_dict()))

    checked = _promtool("check", "rules", handed)

    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
@pytest.mark.parametrize("path", PROMTOOL_TESTS, ids=lambda path: path.name)
def test_promtool_unit_tests_pass(path: Path):
    tested = _promtool("test", "rules", path)

    assert tested.returncode == 0, tested.stdout + tested.stderr

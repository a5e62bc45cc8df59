"""The Grafana dashboards the charm ships (issue #12): valid, and asking only for what exists.

cos_agent reads every file under ``src/grafana_dashboards`` as JSON, sets its uid, compresses
it (``cosl.LZMABase64``) into the relation, and Grafana shows it with the datasource the
``prometheusds`` variable names and the Juju topology variables. A dashboard whose query
names a metric or label nobody exports draws an empty panel and nothing says so: these tests
read every query and check its names against the metrics the charm and GARM export.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cosl import DashboardPath40UID, LZMABase64

from tests.promtool import find as find_promtool
from tests.promtool import missing as promtool_missing

ROOT = Path(__file__).resolve().parents[3]
DASHBOARDS = ROOT / "src" / "grafana_dashboards"
CHARM_NAME = "garm"

# The charm's own metrics (src/observe/metrics.py, served on 127.0.0.1:9099/metrics, scrape
# job `garm-charm`): name -> labels. See docs/reference/metrics.md.
CHARM_METRICS: dict[str, frozenset[str]] = {
    "garm_charm_scalesets": frozenset({"phase"}),
    "garm_charm_changeover_oldest_seconds": frozenset(),
    "garm_charm_runners_draining": frozenset(),
    "garm_charm_deletes_kept": frozenset(),
    "garm_charm_force_removals_total": frozenset(),
    "garm_charm_runners_failing": frozenset({"scaleset"}),
    "garm_charm_runners": frozenset({"scaleset", "status"}),
    "garm_charm_last_pass_timestamp_seconds": frozenset(),
    "garm_charm_last_pass_duration_seconds": frozenset(),
    "garm_charm_last_pass_ok": frozenset(),
    "garm_charm_reconcile_interval_seconds": frozenset(),
    "garm_charm_drain_deadline_seconds": frozenset(),
    "garm_charm_handover_timeout_seconds": frozenset(),
    "garm_charm_info": frozenset({"version"}),
}

# GARM's own metrics (its /metrics, scrape job `garm`), as cloudbase/garm defines them in
# metrics/*.go (namespace "garm", subsystem, name; the label list) at tag v0.2.1, commit
# 154638445c3949c1958b01812f69d9a1e4d82684, unchanged at afda4e76f1808e8b41d72edd0c17f99a51d84758.
# GARM serves them with promhttp.Handler() (text format), so the names are as written there:
# counters without `_total` in their name (garm_webhook_received) get none added.
_GARM_RATE_LIMIT = frozenset({"credential_name", "credential_id", "endpoint"})
_GARM_ENTITY = frozenset({"name", "id"})
_GARM_POOL_MANAGER = frozenset({"name", "id", "running"})
GARM_METRICS: dict[str, frozenset[str]] = {
    # metrics/instance.go
    "garm_runner_status": frozenset(
        {
            "name",
            "status",
            "runner_status",
            "pool_owner",
            "pool_type",
            "pool_id",
            "scaleset_id",
            "provider",
        }
    ),
    "garm_runner_operations_total": frozenset({"operation", "provider"}),
    "garm_runner_errors_total": frozenset({"operation", "provider"}),
    # metrics/scaleset.go
    "garm_scaleset_info": frozenset(
        {
            "id",
            "scaleset_id",
            "name",
            "image",
            "flavor",
            "prefix",
            "os_type",
            "os_arch",
            "tags",
            "provider",
            "runner_group",
            "scaleset_owner",
            "scaleset_type",
        }
    ),
    "garm_scaleset_status": frozenset({"id", "enabled", "state"}),
    "garm_scaleset_max_runners": frozenset({"id"}),
    "garm_scaleset_min_idle_runners": frozenset({"id"}),
    "garm_scaleset_desired_runner_count": frozenset({"id"}),
    "garm_scaleset_bootstrap_timeout": frozenset({"id"}),
    # metrics/pool.go
    "garm_pool_info": frozenset(
        {
            "id",
            "image",
            "flavor",
            "prefix",
            "os_type",
            "os_arch",
            "tags",
            "provider",
            "pool_owner",
            "pool_type",
        }
    ),
    "garm_pool_status": frozenset({"id", "enabled"}),
    "garm_pool_max_runners": frozenset({"id"}),
    "garm_pool_min_idle_runners": frozenset({"id"}),
    "garm_pool_bootstrap_timeout": frozenset({"id"}),
    # metrics/github.go
    "garm_github_operations_total": frozenset({"operation", "scope"}),
    "garm_github_errors_total": frozenset({"operation", "scope"}),
    "garm_github_rate_limit_limit": _GARM_RATE_LIMIT,
    "garm_github_rate_limit_remaining": _GARM_RATE_LIMIT,
    "garm_github_rate_limit_used": _GARM_RATE_LIMIT,
    "garm_github_rate_limit_reset_timestamp": _GARM_RATE_LIMIT,
    # metrics/health.go
    "garm_health": frozenset(
        {"metadata_url", "callback_url", "webhook_url", "controller_webhook_url", "controller_id"}
    ),
    # metrics/organization.go, enterprise.go, repository.go, provider.go
    "garm_organization_info": _GARM_ENTITY,
    "garm_organization_pool_manager_status": _GARM_POOL_MANAGER,
    "garm_enterprise_info": _GARM_ENTITY,
    "garm_enterprise_pool_manager_status": _GARM_POOL_MANAGER,
    "garm_repository_info": _GARM_ENTITY,
    "garm_repository_pool_manager_status": _GARM_POOL_MANAGER,
    "garm_provider_info": frozenset({"name", "type", "description"}),
    # metrics/jobs.go
    "garm_job_status": frozenset(
        {
            "job_id",
            "workflow_job_id",
            "scaleset_job_id",
            "workflow_run_id",
            "name",
            "status",
            "conclusion",
            "runner_name",
            "owner",
            "repository",
            "requested_labels",
        }
    ),
    # metrics/webhooks.go
    "garm_webhook_received": frozenset({"valid", "reason"}),
}

# Prometheus's own series per scrape target.
PROMETHEUS_METRICS: dict[str, frozenset[str]] = {"up": frozenset()}

METRICS = {**CHARM_METRICS, **GARM_METRICS, **PROMETHEUS_METRICS}

TOPOLOGY = ("juju_model", "juju_model_uuid", "juju_application", "juju_unit")
# Labels every scraped series carries: the scrape's, and the topology cos_agent adds.
SCRAPE_LABELS = frozenset({"job", "instance", "juju_charm", *TOPOLOGY})

DATASOURCE_VARIABLE = "prometheusds"
DATASOURCE = {"type": "prometheus", "uid": "${prometheusds}"}
# Grafana's own variables, allowed in range selectors only.
GRAFANA_RANGES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

AGGREGATIONS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    }
)
FUNCTIONS = frozenset(
    {
        "abs",
        "absent",
        "absent_over_time",
        "ceil",
        "changes",
        "clamp",
        "clamp_max",
        "clamp_min",
        "delta",
        "deriv",
        "exp",
        "floor",
        "histogram_quantile",
        "idelta",
        "increase",
        "irate",
        "label_join",
        "label_replace",
        "ln",
        "log2",
        "log10",
        "predict_linear",
        "rate",
        "resets",
        "round",
        "scalar",
        "sgn",
        "sort",
        "sort_desc",
        "sqrt",
        "time",
        "timestamp",
        "vector",
        "avg_over_time",
        "min_over_time",
        "max_over_time",
        "sum_over_time",
        "count_over_time",
        "last_over_time",
        "present_over_time",
        "quantile_over_time",
        "stddev_over_time",
        "stdvar_over_time",
    }
)
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_PLACEHOLDER = re.compile(r"\x00(\d+)\x00")
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^{}]*)\}")
_MATCHER = re.compile(r"^\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*\x00(\d+)\x00\s*$")
_RANGE = re.compile(r"\[[^\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LABEL_REPLACE = re.compile(r"\blabel_(?:replace|join)\s*\([^\x00]*\x00(\d+)\x00")
_IDENTIFIER = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)(\s*\()?")
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|([A-Za-z_]\w*))")
_LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.DOTALL)


@dataclass
class Query:
    """What a PromQL expression asks for, as far as the checks here need."""

    selectors: list[tuple[str, dict[str, tuple[str, str]]]] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)
    grouping: set[str] = field(default_factory=set)
    made: set[str] = field(default_factory=set)
    code_variables: set[str] = field(default_factory=set)
    range_variables: set[str] = field(default_factory=set)
    string_variables: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def labels(self) -> frozenset[str]:
        """Every label the series this query reads may carry, or that it makes."""
        found = set(SCRAPE_LABELS) | self.made
        for metric in self.metrics:
            found |= METRICS.get(metric, frozenset())
        return frozenset(found)


def variables_in(text: str) -> set[str]:
    """Grafana variables (``$name``, ``${name}``) in ``text``."""
    return {a or b for a, b in _VARIABLE.findall(text)}


def parse(expr: str) -> Query:  # noqa: C901 - one pass over the expression, step by step
    """Metrics, matchers and label lists of a PromQL expression (Grafana variables allowed)."""
    query = Query()
    strings: list[str] = []

    def stash(match: re.Match[str]) -> str:
        strings.append(match.group(0)[1:-1])
        return f"\x00{len(strings) - 1}\x00"

    code = _STRING.sub(stash, expr)
    if '"' in code or "'" in code or "`" in code:
        query.problems.append(f"unbalanced or unsupported quotes in {expr!r}")

    regex_strings: set[int] = set()

    def selector(match: re.Match[str]) -> str:
        metric = match.group(1)
        matchers: dict[str, tuple[str, str]] = {}
        for part in filter(str.strip, match.group(2).split(",")):
            found = _MATCHER.match(part)
            if not found:
                query.problems.append(f"cannot read matcher {part.strip()!r} in {expr!r}")
                continue
            label, op, index = found.group(1), found.group(2), int(found.group(3))
            matchers[label] = (op, strings[index])
            if op in ("=~", "!~"):
                regex_strings.add(index)
        if not metric:
            query.problems.append(f"a selector without a metric name in {expr!r}")
            return " "
        query.selectors.append((metric, matchers))
        return f" {metric} "

    code = _SELECTOR.sub(selector, code)
    for index in map(int, _LABEL_REPLACE.findall(code)):
        query.made.add(strings[index])
    for labels in _LABEL_LIST.findall(code):
        query.grouping |= {label.strip() for label in labels.split(",") if label.strip()}
    ranges = "".join(_RANGE.findall(code))
    code = _LABEL_LIST.sub(" ", _RANGE.sub(" ", code))
    if "{" in code or "}" in code or "[" in code or "]" in code:
        query.problems.append(f"unbalanced brackets in {expr!r}")
    for name, call in _IDENTIFIER.findall(code):
        if call:
            if name not in AGGREGATIONS | FUNCTIONS:
                query.problems.append(f"unknown function {name}() in {expr!r}")
        elif name not in KEYWORDS:
            query.metrics.add(name)
    query.metrics |= {metric for metric, _ in query.selectors}
    query.code_variables = variables_in(_PLACEHOLDER.sub(" ", code)) | variables_in(ranges)
    query.range_variables = variables_in(ranges)
    for index, text in enumerate(strings):
        found = variables_in(text)
        if found and index not in regex_strings:
            query.problems.append(
                f"variables {sorted(found)} outside a regex matcher in {expr!r}: Grafana "
                "writes a multi-value variable as a regex"
            )
        query.string_variables |= found
    return query


def panels_of(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those folded into collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def template_variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The dashboard's template variables by name."""
    return {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}


def check_expression(
    where: str, expr: str, defined: set[str], *, topology: bool = True
) -> tuple[list[str], Query]:
    """Problems of one PromQL expression of the dashboard."""
    query = parse(expr)
    problems = [f"{where}: {p}" for p in query.problems]
    for metric in sorted(query.metrics - METRICS.keys()):
        problems.append(f"{where}: no such metric {metric!r} in {expr!r}")
    for metric, matchers in query.selectors:
        allowed = METRICS.get(metric, frozenset()) | SCRAPE_LABELS
        for label in sorted(matchers.keys() - allowed):
            problems.append(f"{where}: {metric} has no label {label!r}")
        if topology:
            for label in TOPOLOGY:
                if matchers.get(label) != ("=~", f"${label}"):
                    problems.append(
                        f'{where}: {metric} is not filtered by {label}=~"${label}" in {expr!r}'
                    )
    for label in sorted(query.grouping - query.labels()):
        problems.append(f"{where}: label {label!r} in a by/on list is on none of its series")
    return problems + check_variables(where, expr, query, defined), query


def check_variables(where: str, expr: str, query: Query, defined: set[str]) -> list[str]:
    """Grafana's range variables in ranges only, the dashboard's own in regex matchers."""
    problems: list[str] = []
    builtin = set(GRAFANA_RANGES)
    ranged = getattr(query, "range_variables", set())
    for name in sorted(query.code_variables - builtin):
        problems.append(f"{where}: variable ${name} outside a string or range in {expr!r}")
    for name in sorted((query.code_variables & builtin) - ranged):
        problems.append(f"{where}: ${name} outside a range selector in {expr!r}")
    for name in sorted(query.string_variables - defined):
        problems.append(f"{where}: variable ${name} is not defined by the dashboard")
    return problems


def check_datasource(where: str, datasource: Any) -> list[str]:
    """A panel's or target's datasource must be the ``prometheusds`` variable."""
    if datasource != DATASOURCE:
        return [f"{where}: datasource {datasource!r}, not {DATASOURCE!r}"]
    return []


def check_templating(dashboard: dict[str, Any]) -> list[str]:
    """Problems of the template variables: the datasource one and the query ones."""
    problems: list[str] = []
    variables = template_variables(dashboard)
    names = [v["name"] for v in dashboard.get("templating", {}).get("list", [])]
    if len(names) != len(set(names)):
        problems.append(f"template variables named twice: {names}")
    source = variables.get(DATASOURCE_VARIABLE)
    if not source or source.get("type") != "datasource" or source.get("query") != "prometheus":
        problems.append(f"no datasource variable {DATASOURCE_VARIABLE!r} of type prometheus")
    for label in TOPOLOGY:
        if variables.get(label, {}).get("type") != "query":
            problems.append(f"no query variable {label!r} (the Juju topology)")
    for name, variable in variables.items():
        if variable.get("type") != "query":
            continue
        problems += check_datasource(f"variable {name}", variable.get("datasource"))
        definition = variable.get("query")
        if isinstance(definition, dict):
            definition = definition.get("query", "")
        found = _LABEL_VALUES.match(str(definition))
        if not found:
            problems.append(f"variable {name}: not a label_values(<series>, <label>) query")
            continue
        found_problems, query = check_expression(
            f"variable {name}", found.group(1), set(variables), topology=False
        )
        problems += found_problems
        if found.group(2) not in query.labels():
            problems.append(f"variable {name}: label {found.group(2)!r} is on none of its series")
    return problems


def check_layout(dashboard: dict[str, Any]) -> list[str]:
    """Panel ids unique, and no two panels drawn over each other."""
    problems: list[str] = []
    ids = [panel.get("id") for panel in panels_of(dashboard)]
    if None in ids or len(ids) != len(set(ids)):
        problems.append(f"panel ids missing or repeated: {ids}")
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard.get("panels", []):
        grid = panel.get("gridPos", {})
        x, y, w, h = (grid.get(k, 0) for k in ("x", "y", "w", "h"))
        if w <= 0 or h <= 0 or x < 0 or x + w > 24:
            problems.append(f"panel {panel.get('title')!r}: gridPos {grid} off the 24 columns")
        for cell in ((cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)):
            if cell in cells:
                problems.append(f"panels {cells[cell]!r} and {panel.get('title')!r} overlap")
                break
            cells[cell] = str(panel.get("title"))
    return problems


def problems_of(dashboard: dict[str, Any]) -> list[str]:
    """Everything wrong with a dashboard; empty when it is fit to ship."""
    problems = check_templating(dashboard) + check_layout(dashboard)
    if not dashboard.get("title"):
        problems.append("no title")
    if "__inputs" in dashboard:
        problems.append("__inputs: use the prometheusds variable, not an import input")
    defined = set(template_variables(dashboard))
    for panel in panels_of(dashboard):
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("type") == "row":
            continue
        problems += check_datasource(where, panel.get("datasource"))
        if not panel.get("targets"):
            problems.append(f"{where}: no query")
        for target in panel.get("targets", []):
            problems += check_datasource(where, target.get("datasource"))
            found, query = check_expression(where, target.get("expr", ""), defined)
            problems += found
            legend = target.get("legendFormat", "")
            for label in sorted(set(_LEGEND_LABEL.findall(legend)) - query.labels()):
                problems.append(f"{where}: legend {legend!r} names {label!r}, on no series")
    return problems


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.iterdir())


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@pytest.fixture(params=dashboard_files(), ids=lambda path: path.name)
def dashboard_file(request: pytest.FixtureRequest) -> Path:
    return request.param


def test_there_is_a_dashboard():
    assert "garm.json" in [path.name for path in dashboard_files()]


def test_every_file_is_a_dashboard_in_json(dashboard_file: Path):
    # cos_agent json-loads every file in the directory, whatever its name.
    assert dashboard_file.suffix == ".json"
    dashboard = load(dashboard_file)
    assert isinstance(dashboard, dict)
    assert dashboard["panels"]
    assert 36 <= dashboard["schemaVersion"] <= 41


def test_the_dashboard_asks_only_for_what_exists(dashboard_file: Path):
    assert problems_of(load(dashboard_file)) == []


def test_the_dashboard_travels_as_cos_agent_sends_it(dashboard_file: Path):
    # As COSAgentProvider._dashboards does: uid from the charm name and the path, a charm
    # tag, then LZMA and base64 into the relation data; Grafana's side reverses it.
    dashboard = load(dashboard_file)
    dashboard["uid"] = DashboardPath40UID.generate(
        CHARM_NAME, str(dashboard_file.relative_to(ROOT))
    )
    dashboard["tags"] = [*dashboard.get("tags", []), f"charm: {CHARM_NAME}"]
    encoded = LZMABase64.compress(json.dumps(dashboard))

    assert json.loads(LZMABase64.decompress(encoded)) == dashboard
    assert DashboardPath40UID.is_valid(dashboard["uid"])


def test_the_reference_lists_every_metric():
    # docs/reference/metrics.md documents every charm metric and every GARM metric the
    # dashboards read.
    documented = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    for name in (*CHARM_METRICS, *used_garm_metrics()):
        assert f"`{name}`" in documented, name


def test_the_charm_metrics_are_those_the_charm_renders():
    # Both ways: a metric the charm stops rendering leaves the dashboards, and one it
    # starts rendering is listed (and so documented) here.
    source = (ROOT / "src" / "observe" / "metrics.py").read_text()
    rendered = set(re.findall(r'"(garm_charm_\w+)"', source))
    assert rendered == CHARM_METRICS.keys()


def used_garm_metrics() -> set[str]:
    used: set[str] = set()
    for path in dashboard_files():
        for panel in panels_of(load(path)):
            for target in panel.get("targets", []):
                used |= parse(target.get("expr", "")).metrics & GARM_METRICS.keys()
    return used


def _rename(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def mutate(dashboard: dict[str, Any]) -> None:
        for panel in panels_of(dashboard):
            for target in panel.get("targets", []):
                target["expr"] = target["expr"].replace(old, new)

    return mutate


def _first_panel(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(dashboard: dict[str, Any]) -> None:
        change(next(p for p in panels_of(dashboard) if p.get("type") != "row"))

    return mutate


def _repeat_id(dashboard: dict[str, Any]) -> None:
    panels = list(panels_of(dashboard))
    panels[-1]["id"] = panels[-2]["id"]


def _drop_datasource_variable(dashboard: dict[str, Any]) -> None:
    dashboard["templating"]["list"] = [
        v for v in dashboard["templating"]["list"] if v["name"] != DATASOURCE_VARIABLE
    ]


BREAKAGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "a misspelt charm metric": _rename("garm_charm_runners{", "garm_charm_runner{"),
    "a misspelt GARM metric": _rename("garm_github_errors_total", "garm_github_error_total"),
    "a label the metric lacks": _rename("runner_status)", "runnerstatus)"),
    "a matcher on a label the metric lacks": _rename('scaleset_id!=""', 'scaleset!=""'),
    "a selector without topology": _rename('juju_unit=~"$juju_unit"}', "}"),
    "an undefined variable": _rename('=~"$scaleset"', '=~"$scale_set"'),
    "a variable outside a regex": _rename('juju_model=~"$juju_model"', 'juju_model="$juju_model"'),
    "an unknown function": _rename("rate(", "rates("),
    "a legend on a missing label": _first_panel(
        lambda p: p["targets"][0].update(legendFormat="{{nope}}")
    ),
    "a datasource by name": _first_panel(lambda p: p.update(datasource="Prometheus")),
    "a repeated panel id": _repeat_id,
    "no datasource variable": _drop_datasource_variable,
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_checks_catch(breakage: str):
    dashboard = load(DASHBOARDS / "garm.json")
    broken = copy.deepcopy(dashboard)
    BREAKAGES[breakage](broken)

    assert broken != dashboard, "the breakage changed nothing: the dashboard moved on"
    assert problems_of(broken) != []


def promql(expr: str) -> str:
    """An expression as Prometheus sees it: Grafana's variables at their 'All' value."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return GRAFANA_RANGES.get(name, ".*")

    return _VARIABLE.sub(value, expr)


def all_expressions() -> list[str]:
    return [
        target["expr"]
        for path in dashboard_files()
        for panel in panels_of(load(path))
        for target in panel.get("targets", [])
    ]


PROMTOOL = find_promtool()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason=promtool_missing("the dashboard's queries are not checked")
)


def promtool(tmp_path: Path, command: str, document: dict[str, Any]) -> None:
    assert PROMTOOL is not None
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(document))
    result = subprocess.run(
        [PROMTOOL, *command.split(), str(path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_every_query_parses(tmp_path: Path):
    rules = [
        {"record": f"dashboard:query_{i}", "expr": promql(expr)}
        for i, expr in enumerate(all_expressions())
    ]
    promtool(tmp_path, "check rules", {"groups": [{"name": "dashboard", "rules": rules}]})


@needs_promtool
def test_garm_runner_panels_name_garm_scalesets(tmp_path: Path):
    # garm_runner_status knows a runner's scaleset by GARM's id only (and has a `name`
    # label of its own: the runner's); the panels join garm_scaleset_info on it.
    dashboard = load(DASHBOARDS / "garm.json")
    panels = {p["title"]: p for p in panels_of(dashboard)}
    topology = 'juju_model="m",juju_model_uuid="u",juju_application="garm",juju_unit="garm/0"'
    series = [
        ("garm_scaleset_info", 'id="3",scaleset_id="71",name="ci-1a2b3c"', "1x5"),
        ("garm_scaleset_info", 'id="4",scaleset_id="72",name="ci-4d5e6f"', "1x5"),
        ("garm_scaleset_desired_runner_count", 'id="3"', "5x5"),
        ("garm_scaleset_desired_runner_count", 'id="4"', "0x5"),
        (
            "garm_runner_status",
            'name="r1",scaleset_id="3",status="running",runner_status="idle"',
            "1x5",
        ),
        (
            "garm_runner_status",
            'name="r2",scaleset_id="3",status="running",runner_status="idle"',
            "1x5",
        ),
        (
            "garm_runner_status",
            'name="r3",scaleset_id="4",status="error",runner_status="failed"',
            "1x5",
        ),
        # A pool's runner (no scaleset id): in no scaleset panel.
        (
            "garm_runner_status",
            'name="p1",pool_id="abc",status="running",runner_status="idle"',
            "1x5",
        ),
    ]
    tests = [
        {
            "expr": promql(panels[title]["targets"][0]["expr"]),
            "eval_time": "2m",
            "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
        }
        for title, samples in {
            "GARM runners by runner status per GARM scaleset": [
                ('{name="ci-1a2b3c", runner_status="idle"}', 2),
                ('{name="ci-4d5e6f", runner_status="failed"}', 1),
            ],
            "GARM instances by instance status per GARM scaleset": [
                ('{name="ci-1a2b3c", status="running"}', 2),
                ('{name="ci-4d5e6f", status="error"}', 1),
            ],
            "Desired and maximum runners per GARM scaleset": [
                ('{name="ci-1a2b3c"}', 5),
                ('{name="ci-4d5e6f"}', 0),
            ],
        }.items()
    ]
    document = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"{name}{{{labels},{topology}}}", "values": values}
                    for name, labels, values in series
                ],
                "promql_expr_test": tests,
            }
        ],
    }
    promtool(tmp_path, "test rules", document)


def test_the_parser_reads_a_joined_query():
    query = parse(
        textwrap.dedent(
            """
            count by (name) (garm_runner_status{scaleset_id!="", job=~"a{8}"}
              * on (scaleset_id) group_left(name)
              label_replace(garm_scaleset_info, "scaleset_id", "$1", "id", "(.*)"))
            """
        )
    )
    assert query.problems == []
    assert query.metrics == {"garm_runner_status", "garm_scaleset_info"}
    assert query.grouping == {"name", "scaleset_id"}
    assert query.made == {"scaleset_id"}
    assert query.selectors[0] == (
        "garm_runner_status",
        {"scaleset_id": ("!=", ""), "job": ("=~", "a{8}")},
    )

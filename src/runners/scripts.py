"""What the charm adds to a runner's install template, and how it goes in.

GARM runs a runner's pre-install scripts as root (``proxy`` renders the charm's), then its
install template, a Go ``text/template`` of bash, as the runner user. ``install_blocks`` is
what the charm adds to that template, and ``derive_template`` puts it into GARM's
``github_linux`` just before the runner is configured: ``$RUN_HOME`` exists, the runner has
not started, and reads what the blocks wrote when it does (docs/adr/0004).

Pure and byte-for-byte stable: the charm keeps a digest of what it rendered, so a rendering
that varied would rewrite templates every pass. Every value is quoted for the shell it
lands in; the pre-job script, the one text not the charm's own, is carried base64-encoded.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping

from runners.options import DebugSsh, RunnerOptions

# The line of GARM's github_linux template the blocks go before (see derive_template).
ANCHOR = 'sendStatus "configuring runner"'

# Where the charm keeps its files on a runner (see install_blocks for why here).
CHARM_DIR = "/opt/garm-charm"
HOOK_NAME = "job-started.sh"
PRE_JOB_NAME = "pre-job.sh"
OTEL_CONFIG = "/etc/otelcol/config.d/garm-charm.yaml"
# The quoted heredoc delimiter for base64 text. Base64 has no "_", so no line of it can
# end the heredoc early, whatever the encoded file holds.
BASE64_DELIMITER = "GARM_CHARM_BASE64"

_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


class TemplateError(ValueError):
    """The charm's blocks cannot go into a runner install template; says what to do."""


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every ``@NAME@`` replaced by ``values[NAME]`` in one pass, never a value's."""
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], text)


def _refuse_template_actions(text: str, what: str) -> None:
    """Raise if ``text`` would be read by GARM as a Go template action."""
    for marker in ("{{", "}}"):
        if marker in text:
            raise TemplateError(
                f"{what} contains {marker!r}, which GARM would read as part of a template "
                "action; the value that put it there must change"
            )


# ---------------------------------------------------------------------- job hook

_HOOK_HEAD = r"""#!/bin/bash
# Job-started hook, written by the garm charm. The actions runner runs it as the runner
# user before every job, with the job's environment. Were it to exit non-zero, the job
# would fail: so nothing here stops it, each failure is logged, and it exits 0.
set +e

log() {
    echo "garm-charm job hook: $*"
    logger -t garm-charm -- "job hook: $*" 2>/dev/null
}
"""

# The collector's own receivers listen on loopback: only jobs on the runner reach them.
_HOOK_OTEL = r"""
otel_endpoint=@OTEL_ENDPOINT@

# A job's values as YAML double-quoted strings. "$" is doubled because the collector
# expands ${...} in its config, which would let a workflow name read its environment.
yaml_string() {
    local value=$1 backslash=\\ quote='"' dollar='$'
    value=${value//[[:cntrl:]]/ }
    value=${value//"$backslash"/"$backslash$backslash"}
    value=${value//"$quote"/"$backslash$quote"}
    value=${value//"$dollar"/"$dollar$dollar"}
    printf '"%s"' "$value"
}

attribute() {
    printf '      - key: %s\n        value: %s\n        action: upsert\n' \
        "$1" "$(yaml_string "$2")"
}

# Jobs export to the collector on this runner; it labels what they send (and this
# host's metrics) with the job, and exports it all to the operator's endpoint.
start_collector() {
    local config=@OTEL_CONFIG@ tmp
    tmp=$(mktemp) || return 1
    {
        printf '%s\n' \
            'receivers:' \
            '  otlp:' \
            '    protocols:' \
            '      grpc:' \
            '        endpoint: "127.0.0.1:4317"' \
            '      http:' \
            '        endpoint: "127.0.0.1:4318"' \
            '  hostmetrics:' \
            '    collection_interval: 15s' \
            '    scrapers:' \
            '      cpu: {}' \
            '      disk: {}' \
            '      filesystem: {}' \
            '      load: {}' \
            '      memory: {}' \
            '      network: {}' \
            'processors:' \
            '  batch: {}' \
            '  resource/github:' \
            '    attributes:'
        attribute github.repository "${GITHUB_REPOSITORY:-}"
        attribute github.workflow "${GITHUB_WORKFLOW:-}"
        attribute github.job "${GITHUB_JOB:-}"
        attribute github.run_id "${GITHUB_RUN_ID:-}"
        attribute github.run_attempt "${GITHUB_RUN_ATTEMPT:-}"
        attribute github.runner_name "${RUNNER_NAME:-}"
        printf '%s\n' 'exporters:' '  otlp:'
        printf '    endpoint: %s\n' "$(yaml_string "$otel_endpoint")"
        printf '%s\n' \
            'service:' \
            '  pipelines:' \
            '    metrics:' \
            '      receivers: [otlp, hostmetrics]' \
            '      processors: [resource/github, batch]' \
            '      exporters: [otlp]' \
            '    traces:' \
            '      receivers: [otlp]' \
            '      processors: [resource/github, batch]' \
            '      exporters: [otlp]' \
            '    logs:' \
            '      receivers: [otlp]' \
            '      processors: [resource/github, batch]' \
            '      exporters: [otlp]'
    } >"$tmp"
    if ! sudo -n install -d -m 0755 @OTEL_CONFIG_DIR@ ||
        ! sudo -n install -m 0644 "$tmp" "$config"; then
        log "could not write $config"
        rm -f "$tmp"
        return 1
    fi
    rm -f "$tmp"
    sudo -n snap enable opentelemetry-collector && sudo -n snap start opentelemetry-collector
}

log "starting the OpenTelemetry collector, exporting to $otel_endpoint"
start_collector || log "the OpenTelemetry collector could not be started; the job goes on"
"""

_HOOK_PRE_JOB = r"""
log "running the pre-job script"
bash @PRE_JOB@ </dev/null
status=$?
if [ "$status" -ne 0 ]; then
    log "the pre-job script failed with exit code $status; the job goes on"
fi
"""


def job_hook(options: RunnerOptions, *, root: str = "") -> str:
    """The job-started hook: start the collector for the job, run the pre-job script.

    The endpoint is used only through a shell variable set once, quoted: never expanded in
    a heredoc or a format string. ``root`` as for install_blocks.
    """
    parts = [_HOOK_HEAD]
    if options.otel_endpoint:
        config = root + OTEL_CONFIG
        values = {
            "OTEL_ENDPOINT": shlex.quote(options.otel_endpoint),
            "OTEL_CONFIG": shlex.quote(config),
            "OTEL_CONFIG_DIR": shlex.quote(config.rpartition("/")[0]),
        }
        parts.append(fill(_HOOK_OTEL, values))
    if options.pre_job_script:
        pre_job = shlex.quote(f"{root}{CHARM_DIR}/{PRE_JOB_NAME}")
        parts.append(fill(_HOOK_PRE_JOB, {"PRE_JOB": pre_job}))
    parts.append("\nexit 0\n")
    return "".join(parts)


# ------------------------------------------------------------------ install blocks

_BLOCK_HEAD = r"""# >>> garm charm: runner options >>>
# Added by the garm charm just before the runner is configured: $RUN_HOME exists and
# the runner, which has not started yet, reads what is written here when it does.
# Nothing here may stop the install: it runs in a function called as "f || log",
# where errexit does not apply, and nothing in it exits.
garm_charm_log() {
    echo "garm-charm: $*"
    logger -t garm-charm -- "$*" 2>/dev/null || true
}

# Appends each argument as a line of the runner's .env: KEY=value, the value verbatim.
garm_charm_env() {
    local env_file="$RUN_HOME/.env"
    if [ -s "$env_file" ] && [ -n "$(tail -c 1 "$env_file")" ]; then
        echo >>"$env_file"
    fi
    if ! printf '%s\n' "$@" >>"$env_file"; then
        garm_charm_log "could not add to $env_file"
        return 1
    fi
}
"""

_BLOCK_PUT = r"""
# Writes stdin, base64-decoded, to $2 with mode $1; the file is root's, so via sudo.
garm_charm_put() {
    local tmp
    tmp=$(mktemp) || return 1
    if base64 -d >"$tmp" && sudo -n install -m "$1" "$tmp" "$2"; then
        rm -f "$tmp"
        return 0
    fi
    rm -f "$tmp"
    garm_charm_log "could not write $2"
    return 1
}
"""

# Merges the mirror into an existing daemon.json, first, keeping every other setting.
# Kept free of braces and of single quotes, as it is quoted for the shell and lives in
# a Go template.
_MERGE_DAEMON_JSON = """\
import json, os, shutil, sys
path, url = sys.argv[1], sys.argv[2]
try:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
except (OSError, ValueError) as e:
    sys.exit("%s: %s" % (path, e))
if not isinstance(data, dict):
    sys.exit("%s: not a JSON object" % path)
mirrors = data.get("registry-mirrors")
mirrors = mirrors if isinstance(mirrors, list) else []
data["registry-mirrors"] = [url] + [m for m in mirrors if m != url]
tmp = path + ".garm-charm"
with open(tmp, "w", encoding="utf-8") as f:
    json.dump(data, f, indent=2)
    f.write(chr(10))
shutil.copymode(path, tmp)
os.replace(tmp, path)
"""

_BLOCK_DOCKER = r"""
# The Docker Hub mirror, for Docker itself where it is installed. A daemon.json that
# exists is merged into (which needs python3) or else left as it is: the operator's
# image may rely on it.
garm_charm_docker_mirror() {
    local daemon_json=@DAEMON_JSON@
    if ! command -v docker >/dev/null 2>&1; then
        garm_charm_log "Docker is not installed: the Docker Hub mirror is only in .env"
        return 0
    fi
    if [ ! -e "$daemon_json" ]; then
        garm_charm_log "writing $daemon_json with the Docker Hub mirror"
        if ! sudo -n install -d -m 0755 @DAEMON_DIR@ ||
            ! printf '%s\n' @DAEMON_CONTENT@ |
            sudo -n tee "$daemon_json" >/dev/null; then
            garm_charm_log "could not write $daemon_json"
            return 1
        fi
    elif ! command -v python3 >/dev/null 2>&1; then
        garm_charm_log "$daemon_json exists and there is no python3 to merge the mirror" \
            "into it: left it alone, Docker does not use the mirror"
        return 1
    else
        garm_charm_log "adding the Docker Hub mirror to $daemon_json"
        if ! sudo -n python3 -I -c @MERGE@ "$daemon_json" @MIRROR@; then
            garm_charm_log "could not merge the mirror into $daemon_json: left it alone"
            return 1
        fi
    fi
    if ! sudo -n systemctl try-restart docker.service; then
        garm_charm_log "could not restart Docker: it uses the mirror from its next start"
        return 1
    fi
}
"""

_BLOCK_MAIN = r"""
garm_charm_runner_options() {
    local failed=0
    if [ -z "${RUN_HOME:-}" ]; then
        garm_charm_log "RUN_HOME is not set: not in GARM's github_linux template"
        return 1
    fi
    sendStatus "applying the runner options of the garm charm"
@STEPS@
    return "$failed"
}

garm_charm_runner_options ||
    garm_charm_log "some runner options were not applied (see above); installing anyway" ||
    true
# <<< garm charm: runner options <<<
"""

_STEP_FILES = r"""
    # The job-started hook (it starts the collector, runs the pre-job script) and the
    # pre-job script, carried base64-encoded; read them on a runner in @DIR@.
    local hook_written=no
    if ! sudo -n install -d -m 0755 @DIR@; then
        garm_charm_log "could not create "@DIR@
        failed=1
    else
@PUTS@
    fi
    if [ "$hook_written" = yes ]; then
        garm_charm_env @HOOK_LINE@ || failed=1
    else
        garm_charm_log "the job-started hook is not set: no collector, no pre-job script"
        failed=1
    fi""".removeprefix("\n")


def _env_line(key: str, value: str) -> str:
    """One ``KEY=value`` line of the runner's .env, quoted as one shell word.

    The runner reads the value to the end of the line: a line break is refused.
    """
    line = f"{key}={value}"
    if any(char in line for char in "\r\n\0"):
        raise TemplateError(f"the runner's {key} would contain a line break; refused")
    return shlex.quote(line)


def _env_lines(options: RunnerOptions, debug: DebugSsh | None) -> list[str]:
    """The .env lines besides the hook's, in a fixed order."""
    lines = []
    if options.dockerhub_mirror:
        lines.append(_env_line("DOCKERHUB_MIRROR", options.dockerhub_mirror))
        lines.append(_env_line("CONTAINER_REGISTRY_URL", options.dockerhub_mirror))
    if options.otel_endpoint:
        lines.append(_env_line("ACTION_OTEL_EXPORTER_OTLP_ENDPOINT", options.otel_endpoint))
    if debug is not None:
        lines.append(_env_line("TMATE_SERVER_HOST", debug.host))
        lines.append(_env_line("TMATE_SERVER_PORT", str(debug.port)))
        lines.append(_env_line("TMATE_SERVER_RSA_FINGERPRINT", debug.rsa_fingerprint))
        lines.append(_env_line("TMATE_SERVER_ED25519_FINGERPRINT", debug.ed25519_fingerprint))
    return lines


def _put(path: str, content: str, *, hook: bool = False) -> str:
    """The block's lines that write ``content`` to ``path`` (0755), base64-carried.

    So it may hold anything (quotes, ``$(...)``, ``{{``, the heredoc's delimiter) and is
    never read as shell or template on the way. Writing the hook lets .env name it.
    """
    encoded = base64.encodebytes(content.encode()).decode()
    command = f"garm_charm_put 0755 {shlex.quote(path)} <<'{BASE64_DELIMITER}'"
    if hook:
        return (
            f"        if {command}; then\n{encoded}{BASE64_DELIMITER}\n"
            "            hook_written=yes\n"
            "        fi"
        )
    return f"        {command} || failed=1\n{encoded}{BASE64_DELIMITER}"


def _files_step(options: RunnerOptions, root: str) -> str:
    """The step writing the job-started hook (and pre-job script) and pointing at it."""
    directory = root + CHARM_DIR
    hook_path = f"{directory}/{HOOK_NAME}"
    puts = []
    if options.pre_job_script:
        puts.append(_put(f"{directory}/{PRE_JOB_NAME}", options.pre_job_script))
    puts.append(_put(hook_path, job_hook(options, root=root), hook=True))
    return fill(
        _STEP_FILES,
        {
            "DIR": shlex.quote(directory),
            "PUTS": "\n".join(puts),
            "HOOK_LINE": _env_line("ACTIONS_RUNNER_HOOK_JOB_STARTED", hook_path),
        },
    )


def _docker_function(mirror: str, root: str) -> str:
    """The function that sets Docker's registry mirror."""
    daemon_json = root + "/etc/docker/daemon.json"
    return fill(
        _BLOCK_DOCKER,
        {
            "DAEMON_JSON": shlex.quote(daemon_json),
            "DAEMON_DIR": shlex.quote(daemon_json.rpartition("/")[0]),
            "DAEMON_CONTENT": shlex.quote(json.dumps({"registry-mirrors": [mirror]})),
            "MERGE": shlex.quote(_MERGE_DAEMON_JSON),
            "MIRROR": shlex.quote(mirror),
        },
    )


def install_blocks(options: RunnerOptions, debug: DebugSsh | None, *, root: str = "") -> str:
    """What the charm adds to the runner install template; "" when nothing is needed.

    It appends to ``$RUN_HOME/.env``, sets Docker's mirror, and writes the job-started hook
    and pre-job script to ``/opt/garm-charm``, root's (through sudo), 0755: not in
    ``$RUN_HOME``, which the runner replaces when it updates, nor in ``/home/runner``,
    which jobs write and clean. A proxy alone needs nothing here (``proxy``). ``root``
    prefixes every absolute path written, for tests. Raises ``TemplateError`` on ``{{``,
    ``}}`` or a line break in a value.
    """
    env = _env_lines(options, debug)
    hooked = bool(options.otel_endpoint or options.pre_job_script)
    if not env and not hooked:
        return ""
    functions = [_BLOCK_HEAD]
    steps = []
    if hooked:
        functions.append(_BLOCK_PUT)
        steps.append(_files_step(options, root))
    if env:
        lines = "".join(f" \\\n        {line}" for line in env)
        steps.append(f"    garm_charm_env{lines} ||\n        failed=1")
    if options.dockerhub_mirror:
        functions.append(_docker_function(options.dockerhub_mirror, root))
        steps.append("    garm_charm_docker_mirror || failed=1")
    text = "".join(functions) + fill(_BLOCK_MAIN, {"STEPS": "\n".join(steps)})
    _refuse_template_actions(text, "the charm's runner options block")
    return text


def derive_template(base: str, blocks: str) -> str:
    """``base`` with ``blocks`` on lines of their own just before the anchor line.

    The first line that is ``ANCHOR`` at column 0, trailing whitespace aside.
    """
    if not blocks:
        return base
    _refuse_template_actions(blocks, "the charm's runner options block")
    anchor = re.search(rf"^{re.escape(ANCHOR)}\s*$", base, re.MULTILINE)
    if anchor is None:
        raise TemplateError(
            f"GARM's github_linux template has no line {ANCHOR!r} to put runner options "
            "before: restore it (garm-cli template restore)"
        )
    insert = blocks if blocks.endswith("\n") else blocks + "\n"
    return base[: anchor.start()] + insert + base[anchor.start() :]

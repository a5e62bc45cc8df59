"""The machine tier: the charm's machine side under a real systemd (``tox -e machine``)."""

from pathlib import Path

# Inside a tier's container: the tier's own files (root's, 0700; none of the charm's).
HOME = Path("/var/lib/garm-machine-test")
# The application's units as the tier set them up, this machine's first (else garm/0).
UNIT_FILE = HOME / "units"


def units() -> list[str]:
    """The application's units (``garm/<n>``), the one on this machine first."""
    return UNIT_FILE.read_text().split() if UNIT_FILE.exists() else ["garm/0"]


def unit() -> str:
    """The unit on this machine."""
    return units()[0]


def charm_dir(name: str) -> Path:
    """Where Juju keeps unit ``name``'s charm: juju-exec runs commands there."""
    return Path(f"/var/lib/juju/agents/unit-{name.replace('/', '-')}/charm")

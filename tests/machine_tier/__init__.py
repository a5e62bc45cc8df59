"""The machine tier: the charm's machine side under a real systemd (``tox -e machine``)."""

from pathlib import Path

# Inside a tier's container: the tier's own files (root's, 0700; none of the charm's),
# and the one unit on the machine.
HOME = Path("/var/lib/garm-machine-test")
UNIT = "garm/0"

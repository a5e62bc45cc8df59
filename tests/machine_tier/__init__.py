"""The machine tier: the charm's machine side under a real systemd (``tox -e machine``)."""

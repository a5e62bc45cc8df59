"""Juju in and out: what a hook reads, the rules it judges that by, what it tells back.

Holds the readers of Juju's answers (``view``: the configurator relations and
goal-state; ``postgresql``; ``secrets``; ``sqlite_home``: the peer relation), the
pure rules they feed (``config``, ``lifecycle``, ``relation``: databags
into specs), and what goes back (``status``: the one status line; ``publish``: what each
configurator is told of its scalesets).

May use: ``scalesets``, ``runners`` and ``garm``, and ops. The charm uses this package;
nothing in it uses the charm.
"""

"""Juju in and out: what a hook reads, the rules it judges that by, what it tells back.

Holds the readers of Juju's answers, which use ops: ``view`` (the configurator relations
and goal-state; it also writes what each configurator is told), ``postgresql``,
``secrets``, ``peers`` (the peer relation), ``unit`` (config, resources, address, the
model's proxy), ``telemetry`` (the cos-agent databags), ``certificates`` (GARM's
certificate from a tls-certificates provider) and ``events`` (what the charm runs its
pass on). And, without ops, what they hand the leader's pass and what it hands back
(``records``), the rules that judge what is read (``config``, ``lifecycle``,
``relation``: databags into specs; ``owners``: the relation each provider came from),
GARM on this machine as those rules allow it (``machine``, acting on the rules of
``fence``), GARM's setup on the GARM the charm set up and no other (``garm_setup``), and
what goes back (``status``: the one status line; ``publish``: what each configurator is
told of its scalesets).

May use: ``observe``, ``scalesets``, ``runners`` and ``garm``, and ops in its readers.
The leader's pass (``leader``) uses the modules without ops; the charm uses the readers.
Nothing here uses either.
"""

"""Juju in and out: what a hook reads, the rules it judges that by, what it tells back.

Holds the readers of Juju, which use ops: ``view`` (the configurator relations and
goal-state; it also tells each configurator of its scalesets), ``postgresql``,
``secrets``, ``peers``, ``unit`` (config, resources, address, the model's proxy),
``telemetry`` (cos-agent), ``certificates`` and ``events``. Without ops: what they hand
the leader's pass and what it hands back (``records``); the rules that judge what is read
(``config``, ``lifecycle``, ``relation``, ``entities``, ``owners``); GARM on this machine
(``machine``, by the rules of ``fence``) and its setup (``garm_setup``); and what goes
back (``status``, ``publish``).

May use: ``observe``, ``scalesets``, ``runners`` and ``garm``, and ops in its readers.
The leader's pass (``leader``) uses the modules without ops; the charm uses the readers.
Nothing here uses either.
"""

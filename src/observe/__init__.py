"""What the charm shows of itself: its metrics, and what it hands a COS collector.

Holds the charm's own metrics as Prometheus text (``metrics``), the file and the small
service that serve them between hooks (``endpoint``), GARM's metrics token and when it is
renewed (``token``), and the ``cos_agent`` interface's data: alert rules, dashboards and
scrape jobs (``cos_agent``).

May use: ``scalesets`` (a pass's outcome is what the metrics tell), ``runners`` and
``garm``. Nothing here imports ops (``cos_agent``'s cosl does, for the Juju topology it
labels rules with): the Juju side of the cos-agent relation is in ``juju``.
"""

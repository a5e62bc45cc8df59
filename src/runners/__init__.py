"""What runners are set up with: a unit's runner options, and how they reach a runner.

Holds the options a configurator unit publishes, typed and checked (``options``); the
scripts the charm adds to a runner's install (``scripts``) and the proxy script that runs
before everything else (``proxy``); and the charm's runner install templates in GARM
(``templates``: which exist, which are current, which go).

May use: ``garm`` (its wire models) and the relation library in ``lib/``.
"""

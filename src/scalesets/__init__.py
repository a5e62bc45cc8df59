"""GARM's scalesets kept in line with the specs: the blue-green changeover.

Holds the desired specs and the changeover settings (``spec``), generation names
(``naming``), what a plan is made of (``actions``: the observation, the writes, the
progress), the pure planner (``planner``) and its rules for replacing idle runners made
before a change that new runners get (``refresh``), what a changeover notes on a
scaleset (``notes``), the hand-over rule every retirement waits on (``cover``), the
pass that observes, plans and applies (``reconciler``), and the fleet by generation as
an operator reads it (``fleet``).

May use: ``runners`` (the runner templates a spec asks for) and ``garm``.
"""

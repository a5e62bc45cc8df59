"""GARM's scalesets kept in line with the specs: the blue-green changeover.

Holds the desired specs and the changeover settings (``spec``), generation names
(``naming``), the pure planner (``planner``), what a changeover notes on a scaleset
(``notes``) and what GitHub answered to creates (``refusals``), the pass that observes,
plans and applies (``reconciler``), and the GARM written to in imagination that the
``plan`` action runs that pass on (``preview``).

May use: ``runners`` (the runner templates a spec asks for) and ``garm``.
"""

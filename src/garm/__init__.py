"""GARM itself: its REST API, its configuration, and GARM on this machine.

Holds the thin client and the wire-exact models of GARM's API (``client``, ``models``)
and the admin's login token kept across hooks (``admin_token``);
GARM's rendered configuration and systemd unit (``config``), the certificate it serves
its API with and the CA runners get (``tls``), and the machine verbs that install and
run it (``workload``, ``resources`` checked as GARM's user, ``timer``); where GARM
keeps its data (``database``) and which providers it keeps (``providers``); the setup that makes a
fresh GARM usable (``setup``: admin, URLs, GitHub credentials, orgs and repos), and
which GARM that is (``identity``); the one memory of what GARM refused, whatever the
write (``refusals``), the one loop every write is sent through (``writes``), and the GARM
read for real and written to in imagination that the ``plan`` action runs it on
(``recording``).

May use: the standard library and PyPI packages only. Nothing here knows of Juju, of
scalesets' changeovers or of runners' options: every other package may use this one.
"""

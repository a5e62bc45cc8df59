"""The desired spec of one scaleset, as tests build it: a valid one, with what a test changes."""

from __future__ import annotations

from scalesets.spec import ScalesetSpec
from tests.passes import PROVIDER


def make_spec(name="ci", labels=("linux", "x64"), source="garm-configurator/0", **kw):
    values = {
        "source": source,
        "name": name,
        "entity_kind": "organization",
        "entity_name": "example-org",
        "provider_name": PROVIDER,
        "image": "image-uuid",
        "flavor": "m1.small",
        "os_arch": "amd64",
        "max_runners": 5,
        "labels": labels,
    }
    values.update(kw)
    return ScalesetSpec(**values)

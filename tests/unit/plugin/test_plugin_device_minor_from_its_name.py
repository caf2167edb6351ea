"""A device published without a `minor` attribute (a slice written before the attribute existed, or by
hand) takes its GPU's minor from its name, `gpu-<minor>` and every share named after it
(`gpu-<minor>-slot-<k>`, `gpu-<minor>-mig-...`): the prepare then mounts that GPU's /dev/nvidia<minor>. The
published attribute wins over the name; a name of no GPU gives the unknown minor (below 0)."""

from __future__ import annotations

from driver.plugin.claims.catalog import catalog_from_slices


def _device(name: str, attributes: dict | None = None) -> dict:
    return {"name": name, "attributes": {"type": {"string": "gpu"}, **(attributes or {})}}


def test_the_minor_is_read_from_the_name_when_no_attribute_gives_it() -> None:
    names = ["gpu-3", "gpu-12-slot-1", "gpu-0-mig-1g10gb-4", "gpu-7", "mig-1g.10gb-a"]
    slices = [{"spec": {"devices": [_device(n) for n in names]}}]
    slices.append({"spec": {"devices": [_device("gpu-5-slot-0", {"minor": {"int": 2}})]}})
    catalog = catalog_from_slices(slices)
    minors = {name: d.minor for name, d in catalog.items()}
    assert minors.pop("mig-1g.10gb-a") < 0  # its exact value is no one's: every reader asks only `< 0`
    assert minors == {
        "gpu-3": 3,
        "gpu-12-slot-1": 12,
        "gpu-0-mig-1g10gb-4": 0,
        "gpu-7": 7,
        "gpu-5-slot-0": 2,
    }

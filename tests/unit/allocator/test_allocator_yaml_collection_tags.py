"""A sequence or mapping with an explicit tag other than `!!seq`/`!!map` is not built as a plain list or
map by the fast YAML loader: it is what yaml.safe_load makes of it (an `!!omap` or `!!pairs` sequence its
pairs) or refused as safe_load refuses it (`!!str [x]`), for tags sorting before and after the plain ones."""

import pytest
import yaml

from driver.allocator import yaml_load

REFUSED = ["a: !!str [x]\n", "a: !!timestamp [x]\n", "a: !!set [x]\n", "a: !!binary [x]\n",
           "a: !!python/tuple [x]\n", "a: !!str {b: 1}\n", "a: !!omap {b: 1}\n", "a: !!binary {b: 1}\n",
           "a: !!int {b: 1}\n", "--- !!str [x]\n", "--- !!str {b: 1}\n",
           # a plain collection's tag on the other kind of collection
           "a: !!map [x]\n", "a: !!seq {b: 1}\n", "--- !!map [x]\n", "--- !!seq {b: 1}\n",
           # a document's own mapping tagged with a tag sorting before `!!map`, or a local tag
           "--- !!binary {b: 1}\n", "--- !!int {b: 1}\n", "--- !local {b: 1}\n"]
READ = ["a: !!omap [{b: 1}]\n", "a: !!pairs [{b: 1}, {c: 2}]\n", "a: !!seq [x]\nb: !!map {c: 1}\n",
        "a: !!set {x: null}\n", "--- !!seq [x]\n--- !!map {c: 1}\n"]


@pytest.mark.parametrize("text", REFUSED)
def test_a_collection_tagged_as_a_scalar_or_another_collection_is_refused(text):
    with pytest.raises(yaml.YAMLError):
        list(yaml.safe_load_all(text))
    with pytest.raises(yaml.YAMLError):
        yaml_load.load_all(text)


@pytest.mark.parametrize("text", READ)
def test_a_collection_tagged_as_a_known_collection_reads_as_safe_load_reads_it(text):
    assert yaml_load.load_all(text) == list(yaml.safe_load_all(text))

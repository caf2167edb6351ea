"""The fast YAML loader of `carve allocate` gives what yaml.safe_load_all gives."""

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.allocator import yaml_load

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.text(max_size=12),
                    st.sampled_from(["yes", "no", "on", "1e3", "0x1F", "0o17", "~", "null", "True", "1.5",
                                     "2001-12-14", ".inf", "-.nan", "1_000", "010", "", " x ", "8Gi"]),
                    st.floats(allow_nan=False))
keys = st.one_of(st.text(max_size=6), st.integers())
data = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.lists(data, min_size=1, max_size=3), st.sampled_from([None, True, False]))
def test_fast_loader_equals_safe_load_all_on_random_documents(docs, flow):
    text = yaml.safe_dump_all(docs, default_flow_style=flow)
    assert list(yaml_load.load_all(text)) == list(yaml.safe_load_all(text))


@pytest.mark.parametrize("text", [
    "a: &x {b: 1}\nc: *x\nd: [*x, *x]\n",
    "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "when: 2001-12-14t21:59:43.10-05:00\nn: ~\ns: '123'\nt: !!str 5\nbin: !!binary aGVsbG8=\n",
    "--- 1\n--- [a, b]\n---\n...\n",
    "a: 1\na: 2\n",
    "set: !!set {a, b}\nomap: !!omap [a: 1, b: 2]\n",
    "r: &r [1, *r]\n",
])
def test_fast_loader_equals_safe_load_all_on_yaml_features(text):
    fast, safe = list(yaml_load.load_all(text)), list(yaml.safe_load_all(text))
    assert repr(fast) == repr(safe)


def test_aliases_share_one_object_as_in_pyyaml():
    (doc,) = yaml_load.load_all("a: &x {b: 1}\nc: *x\n")
    assert doc["a"] is doc["c"]


@pytest.mark.parametrize("text", ["? [a]\n: 1\n", "a: !!python/object:os.system x\n", "a: [\n"])
def test_what_safe_load_refuses_the_fast_loader_refuses(text):
    with pytest.raises(yaml.YAMLError):
        list(yaml.safe_load_all(text))
    with pytest.raises(yaml.YAMLError):
        list(yaml_load.load_all(text))


def test_libyaml_is_used_where_pyyaml_has_it():
    assert hasattr(yaml, "CSafeLoader") == yaml_load.HAS_LIBYAML
    assert issubclass(yaml_load.FastSafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def test_plain_data_is_built_from_events_without_the_node_graph(monkeypatch):
    def no_nodes(self, node):
        raise AssertionError("the node graph was built")

    monkeypatch.setattr(yaml_load.FastSafeLoader, "construct_document", no_nodes)
    text = "a: [1, true, null, 1.5, '2', x]\nb: {c: &k d, e: *k}\n---\n- 8Gi\n"
    assert yaml_load.load_all(text) == list(yaml.safe_load_all(text))


@pytest.mark.parametrize("text", [
    "a: !!str 5\n<<: {x: 1, y: 2}\ny: 3\n",  # a merge key in a document's top mapping
    "- !!str 5\n- <<: [{x: 1}, {z: 2}]\n  y: 3\n",  # in a list item
    "a: !!str 5\n=: 7\n",  # the value key
])
def test_merge_and_value_keys_in_a_tagged_stream_read_as_safe_load_reads_them(text):
    # The explicit tag sends the stream to FastSafeLoader, whose direct map builder must leave mappings with
    # these keys to SafeLoader's constructor.
    assert yaml_load.load_all(text) == list(yaml.safe_load_all(text))

"""The fast YAML loader on streams that take its long way (an explicit tag anywhere sends the whole stream
to FastSafeLoader's node builder): what yaml.safe_load_all gives, aliases shared, the same refusals."""

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.allocator import yaml_load

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.text(max_size=8),
                    st.sampled_from(["yes", "1e3", "0x1F", "~", "True", "1.5", "", "8Gi", "=", "<<"]))
data = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)), max_leaves=16)


@settings(max_examples=150, deadline=None)
@given(st.lists(data, min_size=1, max_size=4), st.sampled_from([None, True, False]))
def test_a_tagged_stream_of_many_documents_reads_as_safe_load_all(docs, flow):
    text = "--- !!str tagged\n" + yaml.safe_dump_all(docs, default_flow_style=flow, explicit_start=True)
    assert yaml_load.load_all(text) == list(yaml.safe_load_all(text))


@pytest.mark.parametrize("text", [
    "t: !!str 5\na: &x {b: 1}\nc: *x\nl: &l [1, 2]\nm: *l\n",
    "t: !!str 5\nq: '1'\np: 1\nr: \"true\"\ns: true\nu: '~'\nv: ~\n",
    "a: ! 5\nb: ! [1]\nc: ! {d: 1}\n",
    "t: !!str 5\na: ! 5\n",
    "",
    "---\n",
    "--- !!str a\n--- !!int '7'\n--- [x]\n",
])
def test_tagged_and_non_specific_scalars_read_as_safe_load_reads_them(text):
    assert yaml_load.load_all(text) == list(yaml.safe_load_all(text))


def test_aliases_share_one_object_in_a_tagged_stream_too():
    (doc,) = yaml_load.load_all("t: !!str 5\na: &x {b: 1}\nc: *x\nl: &l [1]\nm: *l\nn: [*x, *l]\n")
    assert doc["a"] is doc["c"] is doc["n"][0]
    assert doc["l"] is doc["m"] is doc["n"][1]


def test_an_alias_in_one_document_is_not_another_documents_object():
    docs = yaml_load.load_all("--- !!map\na: &x {b: 1}\nc: *x\n--- !!map\na: &x {b: 2}\nc: *x\n")
    assert docs == [{"a": {"b": 1}, "c": {"b": 1}}, {"a": {"b": 2}, "c": {"b": 2}}]
    assert docs[0]["a"] is not docs[1]["a"]


@pytest.mark.parametrize("text", [
    "a: *nope\n",
    "t: !!str 5\na: *nope\n",
    "t: !!str 5\n? [a]\n: 1\n",
    "t: !!str 5\n? {a: 1}\n: 1\n",
    "{[a]: 1}\n",
])
def test_what_safe_load_refuses_in_any_stream_the_fast_loader_refuses(text):
    with pytest.raises(yaml.YAMLError):
        list(yaml.safe_load_all(text))
    with pytest.raises(yaml.YAMLError):
        yaml_load.load_all(text)

"""values.schema.json is generated from the commented values.yaml."""

from __future__ import annotations

from glm_operator.render.chart_schema import value_descriptions, values_schema, values_table

VALUES = """\
# -- Image settings.
image:
  # -- Repository.
  repository: example/op
  # -- Tag,
  # continued here.
  tag: ""
# -- How many.
replicas: 1
free:
  # -- Documented.
  a: 1
  b: true
list: [x]
"""


def test_descriptions_come_from_dash_dash_comments_and_their_continuations() -> None:
    docs = value_descriptions(VALUES)
    assert docs[("image",)] == "Image settings."
    assert docs[("image", "tag")] == "Tag, continued here."
    assert ("free", "b") not in docs


def test_types_come_from_defaults_and_fully_documented_maps_are_closed() -> None:
    schema = values_schema(VALUES)
    props = schema["properties"]
    assert props["replicas"] == {"type": "integer", "description": "How many."}
    assert props["image"]["additionalProperties"] is False
    assert "additionalProperties" not in props["free"], "a map with an undocumented key stays open"
    assert props["free"]["properties"]["b"]["type"] == "boolean"
    assert props["list"]["items"] == {"type": "string"}
    assert "additionalProperties" not in schema, "root has an undocumented key"


def test_values_table_lists_each_documented_key_with_its_default() -> None:
    table = values_table(VALUES)
    assert '| `image.repository` | string | `"example/op"` | Repository. |' in table
    assert "free.b" not in table

"""values.schema.json is generated from the commented values.yaml."""

from __future__ import annotations

import pytest

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


ANNOTATED = """\
# -- Level.
# @schema {enum: [DEBUG, INFO]}
logLevel: INFO
# -- Count,
# at least one.
# @schema {minimum: 1, maximum: 5}
replicas: 1
"""


def test_schema_lines_add_enums_and_bounds_and_stay_out_of_the_description() -> None:
    props = values_schema(ANNOTATED)["properties"]
    assert props["logLevel"] == {"type": "string", "enum": ["DEBUG", "INFO"], "description": "Level."}
    assert props["replicas"] == {"type": "integer", "minimum": 1, "maximum": 5, "description": "Count, at least one."}


@pytest.mark.parametrize(
    "text, message",
    [
        ("# -- L.\n# @schema {enum: [A]}\nlevel: B\n", "level: default 'B' is not in its @schema enum"),
        ("# -- N.\n# @schema {minimum: 2}\nn: 1\n", "n: default 1 is below its @schema minimum 2"),
        ("# -- N.\n# @schema {minimum: 0, maximum: 2}\nn: 3\n", "n: default 3 is above its @schema maximum 2"),
        ("# -- N.\n# @schema {minimun: 2}\nn: 3\n", "expected a mapping of enum, maximum, minimum, pattern"),
    ],
)
def test_a_schema_line_that_refuses_its_own_default_or_is_misspelt_stops_generation(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        values_schema(text)

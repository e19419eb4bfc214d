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
        (
            "# -- N.\n# @schema {minimun: 2}\nn: 3\n",
            "expected a mapping of additionalProperties, enum, items, maximum, minimum, pattern, type",
        ),
    ],
)
def test_a_schema_line_that_refuses_its_own_default_or_is_misspelt_stops_generation(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        values_schema(text)


TYPED = """\
# -- A quantity.
# @schema {type: [string, number], pattern: "^[0-9]+m?$"}
cpu: 100m
# -- Shared with a parent.
# @schema {additionalProperties: true}
global:
  # -- Pull secrets.
  # @schema {items: {type: object, required: [name]}}
  pullSecrets: []
# -- Labels.
# @schema {additionalProperties: {type: string}}
labels: {}
"""


def test_schema_lines_may_widen_the_type_describe_list_entries_and_free_keys() -> None:
    props = values_schema(TYPED)["properties"]
    assert props["cpu"]["type"] == ["string", "number"] and props["cpu"]["pattern"] == "^[0-9]+m?$"
    assert props["global"]["additionalProperties"] is True, "a documented map stays open when told to"
    assert props["global"]["properties"]["pullSecrets"]["items"] == {"type": "object", "required": ["name"]}
    assert props["labels"]["additionalProperties"] == {"type": "string"}


def test_values_table_shows_a_widened_type() -> None:
    assert '| `cpu` | string or number | `"100m"` | A quantity. |' in values_table(TYPED)


@pytest.mark.parametrize(
    "text, message",
    [
        ("# -- C.\n# @schema {type: [integer, string]}\nc: 0.5\n", "c: default 0.5 is not of its @schema type"),
        ("# -- C.\n# @schema {type: [str]}\nc: x\n", r"c: @schema type \['str'\] is not a JSON-schema type"),
        ("# -- C.\n# @schema {type: string, pattern: '^[0-9]+$'}\nc: x\n", "c: default 'x' does not match"),
    ],
)
def test_a_widened_type_or_pattern_that_refuses_its_own_default_stops_generation(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        values_schema(text)

"""`glmctl render|validate -o yaml|json` and `render -n NAMESPACE`, as kubectl prints and places objects."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.cli import render as render_module
from glm_operator.cli.main import main
from glm_operator.cli.output import ObjectStream, write_objects
from tests.support.builders import GLMDeploymentBuilder

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}


def write(tmp_path: Path, *builders: GLMDeploymentBuilder) -> str:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([b.tensor(8).build() for b in builders]))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> tuple[str, str]:
    assert main(argv) == code
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.mark.parametrize(
    "count, printed",
    [
        (1, CONFIG_MAP),
        (2, {"apiVersion": "v1", "items": [CONFIG_MAP] * 2, "kind": "List", "metadata": {"resourceVersion": ""}}),
    ],
    ids=["one-object-alone", "several-objects-in-a-v1-list"],
)
def test_json_prints_one_object_alone_and_several_in_a_v1_list(count: int, printed: dict[str, Any]) -> None:
    out = io.StringIO()
    write_objects([CONFIG_MAP] * count, "json", out)
    assert json.loads(out.getvalue()) == printed
    assert out.getvalue().startswith('{\n    "apiVersion"'), "indented by four spaces, as kubectl indents"


@pytest.mark.parametrize(
    "argv, same_as",
    [
        (["-o", "yaml"], []),
        (["--output", "json"], []),
        (["-o", "json", "--no-lws"], ["--no-lws"]),
    ],
    ids=["yaml-is-the-default", "json-holds-the-same-objects", "json-without-lws"],
)
def test_render_prints_the_same_objects_in_each_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], same_as: list[str]
) -> None:
    path = write(tmp_path, GLMDeploymentBuilder("a"), GLMDeploymentBuilder("b"))
    default, _ = run(capsys, ["render", *same_as, path])
    expected = list(yaml.safe_load_all(default))
    out, _ = run(capsys, ["render", *argv, path])
    if "yaml" in argv:
        assert out == default
    else:
        assert json.loads(out) == {
            "apiVersion": "v1",
            "items": expected,
            "kind": "List",
            "metadata": {"resourceVersion": ""},
        }


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_validate_prints_the_same_results_as_json_or_yaml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    path = write(tmp_path, GLMDeploymentBuilder("a"), GLMDeploymentBuilder("b"))
    out, _ = run(capsys, ["validate", "-o", output, path])
    results = json.loads(out) if output == "json" else yaml.safe_load(out)
    assert [(r["name"], r["allowed"]) for r in results] == [("a", True), ("b", True)]


def test_validate_prints_text_unless_asked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, GLMDeploymentBuilder("a"))
    out, _ = run(capsys, ["validate", path])
    assert out.startswith(f"{path}: a: admitted\n")


def namespaces(out: str) -> set[str]:
    return {obj["metadata"].get("namespace") for obj in yaml.safe_load_all(out)}


@pytest.mark.parametrize(
    "argv, own, placed",
    [
        ([], None, "default"),
        (["-n", "team-a"], None, "team-a"),
        (["--namespace", "team-a"], "team-a", "team-a"),
        (["--namespace=team-a"], "team-a", "team-a"),
        ([], "team-b", "team-b"),
    ],
    ids=[
        "without-n-a-manifest-without-namespace-goes-to-default",
        "n-places-a-manifest-without-namespace",
        "n-matching-the-manifest-is-fine",
        "n-with-equals-sign",
        "without-n-the-manifest-keeps-its-own",
    ],
)
def test_render_places_the_objects_in_the_namespace_kubectl_would(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], own: str | None, placed: str
) -> None:
    builder = GLMDeploymentBuilder("a")
    path = write(tmp_path, builder.namespace(own) if own else builder)
    out, _ = run(capsys, ["render", *argv, path])
    assert namespaces(out) == {placed}


def test_a_manifest_in_another_namespace_than_n_is_bad_input_as_kubectl_says(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        GLMDeploymentBuilder("a").namespace("team-b"),
        GLMDeploymentBuilder("b"),
        GLMDeploymentBuilder("c").namespace("team-c"),
    )
    out, err = run(capsys, ["render", "-n", "team-a", path], code=2)
    assert out == ""
    # Every mismatch at once, each with kubectl's words and the way out.
    assert err.splitlines() == [
        f'error: {path}#{i}: the namespace from the provided object "{ns}" does not match the namespace "team-a". '
        f"You must pass '--namespace={ns}' to perform this operation, or remove metadata.namespace from the file"
        for i, ns in ((0, "team-b"), (2, "team-c"))
    ]


@pytest.mark.parametrize("namespace", ["Team_A", "", "a-", "a.b", "a" * 64])
def test_a_namespace_that_is_not_a_name_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, namespace: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["render", "-n", namespace, write(tmp_path, GLMDeploymentBuilder("a"))])
    assert exit_.value.code == 2
    assert "not a namespace name" in capsys.readouterr().err


@pytest.mark.parametrize("output", ["json", "yaml"])
@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_the_stream_writes_byte_for_byte_what_write_objects_writes(output: str, count: int) -> None:
    objects = [{**CONFIG_MAP, "metadata": {"name": f"c{i}", "labels": {"n": str(i)}}} for i in range(count)]
    whole, streamed = io.StringIO(), io.StringIO()
    write_objects(objects, output, whole)
    with ObjectStream(output, streamed) as stream:
        for obj in objects:
            stream.write(obj)
    if output == "yaml" and count == 0:
        assert streamed.getvalue() == ""  # yaml.dump_all([]) writes nothing either; an empty stream is no document
        return
    assert streamed.getvalue() == whole.getvalue()


class LeavesAfterFirstFlush(io.StringIO):
    """A reader that takes what it was given at the first flush and leaves, as `head` does."""

    def flush(self) -> None:
        if self.getvalue():
            raise BrokenPipeError


def test_render_writes_each_deployment_as_it_is_rendered_and_stops_when_the_reader_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, *(GLMDeploymentBuilder(f"d{i}") for i in range(20)))
    rendered: list[str] = []
    objects_of = render_module.objects_of

    def counting(doc: dict[str, Any], *args: Any) -> list[dict[str, Any]]:
        rendered.append(doc["metadata"]["name"])
        return objects_of(doc, *args)

    monkeypatch.setattr(render_module, "objects_of", counting)
    out = LeavesAfterFirstFlush()
    with pytest.raises(BrokenPipeError):
        render_module.render([path], lws=True, stdout=out)
    # One GLMDeployment rendered and written, not twenty held back until the last.
    assert rendered == ["d0"]
    assert {d["metadata"]["name"] for d in yaml.safe_load_all(out.getvalue())} >= {"d0"}


def test_a_refused_manifest_leaves_no_partial_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = [GLMDeploymentBuilder(f"ok{i}").tensor(8).build() for i in range(3)]
    bad = GLMDeploymentBuilder("bad").tensor(8).set("spec.parallelism.tensor", 3).build()
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump_all([*good, bad]))
    out, err = run(capsys, ["render", str(path)], code=1)
    assert out == "" and "refused by admission" in err

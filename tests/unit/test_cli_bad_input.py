"""`glmctl validate` and `render` on hostile files: a short message, the documented exit code, bounded work."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from glm_operator.cli.main import EXIT_BROKEN_PIPE, main
from glm_operator.cli.manifests import MAX_EXPANDED_NODES, MAX_INPUT_BYTES
from glm_operator.rules.findings import MAX_VALUE_CHARS
from tests.support.builders import GLMDeploymentBuilder
from tests.support.cluster import REPO

HEADER = "apiVersion: glmops.dev/v1alpha1\nkind: GLMDeployment\nmetadata: {name: hostile, namespace: default}\n"
VALID = yaml.safe_dump(GLMDeploymentBuilder("fine").tensor(8).build())


def alias_bomb(levels: int = 9) -> str:
    """Nine lists of nine references per level: 9**levels strings once expanded, a few hundred bytes written."""
    lines = ["  l0: &l0 [" + ", ".join(['"lol"'] * 9) + "]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return HEADER + "x-anchors:\n" + "\n".join(lines) + f"\nspec:\n  model: {{name: *l{levels - 1}}}\n"


def text_bomb() -> str:
    """One 1 MiB string referenced 64 times: few values, but 64 MiB of text once expanded."""
    return (
        HEADER
        + f"x-big: &big {'x' * (1024 * 1024)}\n"
        + "spec:\n  model: {name: a/b}\n  accelerator: {type: H200}\n  engine:\n    extraArgs: ["
        + ", ".join(["*big"] * 64)
        + "]\n"
    )


BUNDLE_WITH_OTHER_KINDS = (
    VALID + "---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\napiVersion: v1\nkind: ConfigMap\n"
)
LIST_OF_OBJECTS = yaml.safe_dump(
    {"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Secret"}, yaml.safe_load(VALID)]}
)


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize(
    "content, code, says",
    [
        (alias_bomb, 2, f"its YAML aliases expand it to more than {MAX_EXPANDED_NODES} values; refused"),
        (text_bomb, 2, "its YAML aliases expand it to more than 16 MiB of text; refused"),
        (lambda: HEADER + "metadata: &m {name: r, labels: *m}\n", 2, "a YAML alias refers to itself"),
        (lambda: "a: " + "[" * 10_000 + "]" * 10_000 + "\n", 2, "not valid YAML"),
        (lambda: "", 2, "no GLMDeployment in {path}"),
        (lambda: "---\n---\n...\n---\n", 2, "no GLMDeployment in {path}"),
        (lambda: "# only a comment\n", 2, "no GLMDeployment in {path}"),
        (lambda: "apiVersion: v1\nkind: Pod\n", 2, "no GLMDeployment in {path}"),
        (lambda: "- 1\n", 2, "not a Kubernetes object"),
        (lambda: "a: [unclosed\n", 2, "not valid YAML"),
        (lambda: VALID.replace("v1alpha1", "v1beta9"), 2, 'apiVersion "glmops.dev/v1beta9" of GLMDeployment'),
        (lambda: BUNDLE_WITH_OTHER_KINDS, 0, 'note: {path}#1: skipped "Service" ("v1"): not a GLMDeployment'),
        (lambda: LIST_OF_OBJECTS, 0, 'note: {path}.items[0]: skipped "Secret"'),
    ],
    ids=[
        "alias-bomb",
        "text-bomb",
        "recursive-alias",
        "10000-levels",
        "empty",
        "separators-only",
        "comment-only",
        "only-other-kinds",
        "not-a-mapping",
        "broken-yaml",
        "unknown-version",
        "bundle-with-other-kinds",
        "kind-list",
    ],
)
def test_hostile_file_gets_its_exit_code_and_one_short_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, content: Callable[[], str], code: int, says: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(content())
    assert main([command, str(path)]) == code
    captured = capsys.readouterr()
    assert says.format(path=path) in captured.err
    assert len(captured.err) < 1000, "bad input is answered in a line or two"
    if code == 2:
        assert captured.out == ""


def test_a_file_without_glmdeployment_fails_even_beside_a_good_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good, empty = tmp_path / "good.yaml", tmp_path / "empty.yaml"
    good.write_text(VALID)
    empty.write_text("---\n")
    assert main(["validate", str(good), str(empty)]) == 2
    assert f"no GLMDeployment in {empty}" in capsys.readouterr().err


def test_a_file_over_the_size_cap_is_refused_unread(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(VALID + "#" + "x" * MAX_INPUT_BYTES + "\n")
    assert main(["validate", str(path)]) == 2
    assert "larger than 16 MiB; refused unread" in capsys.readouterr().err


@pytest.mark.parametrize(
    "field, value",
    [
        ("spec.model.name", "a/" + "z" * 5_000_000),
        ("spec.engine.moeBackend", "b" * 100_000),
        ("spec.engine.extraArgs", ["--x"] * 50_000),
    ],
    ids=["5MB-model-name", "long-backend", "long-list"],
)
def test_long_values_are_cut_in_messages_with_a_marker(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str, value: object
) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(json.dumps(GLMDeploymentBuilder("long").set(field, value).build()))  # JSON is YAML, and quick
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    # A long string is cut with a marker; a list too long for the schema is elided ("[...]") by the schema check.
    assert field in out and ("... (truncated" in out or f"{field}: [...]" in out)
    assert len(out) < 2 * MAX_VALUE_CHARS + 1000


def test_output_piped_into_head_ends_quietly() -> None:
    samples = sorted(str(p) for p in (REPO / "samples").glob("*fixed.yaml"))
    glmctl = subprocess.Popen(
        [sys.executable, "-m", "glm_operator.cli.main", "render", *samples],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert glmctl.stdout is not None and glmctl.stderr is not None
    glmctl.stdout.close()  # the reader leaves before the first write, as `head` does once it has its lines
    err = glmctl.stderr.read().decode()
    assert glmctl.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert err == "", err

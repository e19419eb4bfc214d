"""`glmctl validate|render -f FILE|DIR|-` and `-R`, as kubectl reads them, and the bounds on a directory walk."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from glm_operator.cli.main import main
from tests.support.builders import GLMDeploymentBuilder

OTHER_KIND = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"


def manifest(name: str) -> str:
    return yaml.safe_dump(GLMDeploymentBuilder(name).tensor(8).build())


def tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> text) under `root`; a directory is made for each parent."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


APP = {
    "b.yaml": manifest("b"),
    "a.yml": manifest("a"),
    "c.json": json.dumps(GLMDeploymentBuilder("c").tensor(8).build()),
    "README.md": "not read",
    "kustomization.txt": "not read",
    "z-service.yaml": OTHER_KIND,
    "sub/d.yaml": manifest("d"),
    "sub/deeper/e.yaml": manifest("e"),
    "sub2/f.yaml": manifest("f"),
}


def validated_names(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    assert main(["validate", "-o", "json", *argv]) == 0, capsys.readouterr().err
    return [result["name"] for result in json.loads(capsys.readouterr().out)]


@pytest.mark.parametrize(
    "argv, names",
    [
        (["-f", "{root}/b.yaml"], ["b"]),
        (["{root}/b.yaml"], ["b"]),
        (["--filename", "{root}/b.yaml", "-f", "{root}/a.yml"], ["b", "a"]),
        (["{root}/a.yml", "-f", "{root}/b.yaml"], ["a", "b"]),
        (["-f", "{root}"], ["a", "b", "c"]),
        (["-f", "{root}", "-R"], ["a", "b", "c", "d", "e", "f"]),
        (["--recursive", "-f", "{root}/sub"], ["d", "e"]),
        (["-f", "{root}/sub2", "-f", "{root}/b.yaml"], ["f", "b"]),
    ],
    ids=[
        "one-file-with-f",
        "one-file-as-before-without-f",
        "files-in-the-order-given",
        "a-positional-file-then-f",
        "a-directory-reads-its-own-manifests-in-name-order",
        "recursive-descends-depth-first-in-name-order",
        "recursive-from-a-subdirectory",
        "a-directory-and-a-file",
    ],
)
def test_filenames_read_the_manifests_kubectl_would_read_in_its_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], names: list[str]
) -> None:
    root = tree(tmp_path, APP)
    assert validated_names(capsys, [arg.format(root=root) for arg in argv]) == names


@pytest.mark.parametrize("command", ["validate", "render"])
def test_dash_f_dash_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(manifest("from-stdin")))
    assert main([command, "-f", "-"]) == 0
    assert "from-stdin" in capsys.readouterr().out


def test_a_directory_file_of_other_kinds_only_is_noted_not_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = tree(tmp_path, {"a.yaml": manifest("a"), "service.yaml": OTHER_KIND, "empty.yaml": "---\n"})
    assert main(["validate", "-f", str(root)]) == 0
    err = capsys.readouterr().err
    assert f'note: {root}/service.yaml: skipped "ConfigMap"' in err
    assert f"note: {root}/empty.yaml: skipped: no objects in it" in err


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize(
    "files, argv, says",
    [
        (
            {"sub/a.yaml": manifest("a")},
            ["-f", "{root}"],
            "{root}: no manifest files (.json, .yaml, .yml) in it; add -R",
        ),
        ({"README.md": "x"}, ["-R", "-f", "{root}"], "{root}: no manifest files (.json, .yaml, .yml) in it or below"),
        ({"a.yaml": OTHER_KIND, "b.yaml": ""}, ["-f", "{root}"], "no GLMDeployment in any file of {root}"),
        ({"a.yaml": manifest("a"), "b.yaml": "a: [x\n"}, ["-f", "{root}"], "{root}/b.yaml: not valid YAML"),
        ({"a.yaml": manifest("a")}, ["-f", "{root}/missing.yaml"], "{root}/missing.yaml: cannot read"),
        ({"a.yaml": manifest("a")}, [], "give manifests with -f FILE|DIR|-"),
    ],
    ids=[
        "a-directory-with-manifests-only-below-it-without-R",
        "a-directory-without-manifest-files",
        "a-directory-without-any-glmdeployment",
        "a-broken-file-in-a-directory",
        "a-missing-file",
        "no-file-at-all",
    ],
)
def test_a_filename_that_reads_nothing_useful_is_bad_input_naming_the_path_and_the_fix(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: str,
    files: dict[str, str],
    argv: list[str],
    says: str,
) -> None:
    root = tree(tmp_path, files)
    try:
        code = main([command, *(arg.format(root=root) for arg in argv)])
    except SystemExit as usage_error:  # argparse answers a missing argument itself, with its usage line
        code = int(str(usage_error.code))
    assert code == 2
    captured = capsys.readouterr()
    assert says.format(root=root) in captured.err
    assert captured.out == "" and len(captured.err) < 1000


@pytest.fixture
def deep_tree(tmp_path: Path) -> Iterator[Path]:
    """A tree deeper than Python's recursion limit: the walk must not recurse once per level.

    Made and removed one level at a time: pathlib's mkdir(parents=True) and shutil.rmtree, which pytest's
    clean-up of old temporary folders uses, both recurse once per level.
    """
    levels = [str(tmp_path / "tree")]
    for _ in range(1100):
        levels.append(os.path.join(levels[-1], "d"))
    for level in levels:
        os.mkdir(level)
    Path(levels[-1], "a.yaml").write_text(manifest("deep"))
    yield Path(levels[0])
    os.unlink(os.path.join(levels[-1], "a.yaml"))
    for level in reversed(levels):
        os.rmdir(level)


def test_a_symlink_loop_ends_the_walk_after_one_visit_of_each_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tree(tmp_path, {"a.yaml": manifest("a"), "sub/b.yaml": manifest("b")})
    (tmp_path / "sub" / "back-to-root").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "self").symlink_to(tmp_path / "self")  # a link to itself: neither a file nor a directory
    (tmp_path / "x.yaml").symlink_to(tmp_path / "y.yaml")
    (tmp_path / "y.yaml").symlink_to(tmp_path / "x.yaml")
    assert main(["validate", "-o", "json", "-R", "-f", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert [result["name"] for result in json.loads(captured.out)] == ["a", "b"]
    assert f"note: {tmp_path}/sub/back-to-root: skipped: a directory already read" in captured.err


def test_a_tree_deeper_than_the_recursion_limit_is_walked(capsys: pytest.CaptureFixture[str], deep_tree: Path) -> None:
    assert validated_names(capsys, ["-R", "-f", str(deep_tree)]) == ["deep"]


@pytest.mark.parametrize(
    "bound, value, files, says",
    [
        ("glm_operator.cli.sources.MAX_DIR_ENTRIES", 40, 60, "{root}: more than 40 names under it; refused"),
        ("glm_operator.cli.sources.MAX_FILES", 40, 60, "{root}: more than 40 manifest files; refused"),
        ("glm_operator.cli.manifests.MAX_TOTAL_BYTES", 5_000, 60, "in all; refused (check them in several runs)"),
    ],
    ids=["names-examined", "manifest-files-kept", "bytes-read-in-all"],
)
def test_a_huge_directory_is_refused_at_its_bound_with_a_short_message(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    bound: str,
    value: int,
    files: int,
    says: str,
) -> None:
    # The bounds are lowered so the test writes 60 files instead of 100,000; the code path is the same.
    monkeypatch.setattr(bound, value)
    tree(tmp_path, {f"m{i:03}.yaml": manifest(f"m{i}") for i in range(files)})
    assert main(["validate", "-f", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert says.format(root=tmp_path) in captured.err
    assert captured.out == "" and len(captured.err) < 1000


def test_notes_on_a_directory_of_many_other_kinds_are_cut_with_a_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tree(tmp_path, {"a.yaml": manifest("a"), **{f"cm{i:03}.yaml": OTHER_KIND for i in range(120)}})
    assert main(["validate", "-f", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 51 and err[-1] == "note: ... and 70 more notes like these"


def test_a_directory_is_read_without_following_into_unlisted_special_files(tmp_path: Path) -> None:
    tree(tmp_path, {"a.yaml": manifest("a")})
    os.mkfifo(tmp_path / "pipe.yaml")  # opening it would wait for a writer forever
    assert main(["validate", "-f", str(tmp_path)]) == 0

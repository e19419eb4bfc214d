"""The plugin's own machinery: version guard, decisions, re-entrancy, log lines, target checks, registry."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from glmops_vllm_patches import plugin, static
from glmops_vllm_patches.base import Context, Patch, PatchInfo, PatchTargetMissing, Target, resolve
from glmops_vllm_patches.registry import PATCHES
from glmops_vllm_patches.version import SUPPORTED, Version, VersionRange

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "release", "final"),
    [
        ("0.31.0", (0, 31, 0), True),
        ("v0.33.0", (0, 33, 0), True),
        ("0.31.0+cu130", (0, 31, 0), True),
        ("0.32.0rc1", (0, 32, 0), False),
        ("0.32.0.dev12+g1234", (0, 32, 0), False),
        ("0.30", (0, 30, 0), True),
    ],
)
def test_version_parse_reads_release_and_pre_release(text: str, release: tuple[int, int, int], final: bool) -> None:
    v = Version.parse(text)
    assert (v.release, v.final) == (release, final)


def test_a_release_candidate_sorts_below_its_release_so_a_fix_is_not_assumed() -> None:
    assert Version.parse("0.32.0rc1") < Version.parse("0.32.0") < Version.parse("0.32.1")
    assert Version.parse("0.32.0rc1") not in VersionRange("0.32.0")
    assert Version.parse("0.32.0rc1") in VersionRange("0.27.1", "0.32.0")


def test_a_version_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="not a vLLM version"):
        Version.parse("main")


def _info(name: str = "demo-patch", platforms: tuple[str, ...] = ("cuda",), until: str | None = "0.32.0") -> PatchInfo:
    return PatchInfo(
        name=name,
        issue="demo-1",
        issue_url="https://example.invalid/1",
        prs=(),
        why="w",
        how="h",
        affected=VersionRange("0.27.1", until),
        platforms=platforms,
        remove_when="r",
    )


class Recorder:
    """A patch whose apply only counts calls: the framework is what is under test here."""

    def __init__(self, name: str = "demo-patch", skip: str | None = None) -> None:
        self.calls = 0
        self.patch = Patch(info=_info(name), targets=lambda ctx: (), apply=self._apply, skip=lambda ctx: skip)

    def _apply(self, ctx: Context, found: Mapping[Target, Any]) -> str:
        self.calls += 1
        return "did it"


@pytest.fixture(autouse=True)
def fresh_plugin_state() -> Iterator[None]:
    plugin.forget()
    yield
    plugin.forget()


def ctx(version: str = "0.31.0", platform: str = "cuda", **env: str) -> Context:
    return Context(Version.parse(version), platform, env)


@pytest.mark.parametrize(
    ("context", "skip", "applies", "reason"),
    [
        (ctx(), None, True, "affected"),
        (ctx("0.32.0"), None, False, "outside the affected range >=0.27.1,<0.32.0"),
        (ctx(platform="rocm"), None, False, "platform rocm is not affected"),
        (ctx(GLMOPS_PATCH_DEMO_PATCH="off"), None, False, "turned off by GLMOPS_PATCH_DEMO_PATCH"),
        (ctx(GLMOPS_PATCH_DEMO_PATCH="0"), None, False, "turned off by GLMOPS_PATCH_DEMO_PATCH"),
        (ctx(GLMOPS_PATCH_DEMO_PATCH="on"), None, True, "affected"),
        (ctx(), "no expert parallelism", False, "no expert parallelism"),
    ],
)
def test_decide_applies_only_inside_range_platform_switch_and_patch_guard(
    context: Context, skip: str | None, applies: bool, reason: str
) -> None:
    decision = Recorder(skip=skip).patch.decide(context)
    assert decision.apply is applies
    assert reason in decision.reason


def test_register_is_re_entrant_and_logs_one_line_per_patch(caplog: pytest.LogCaptureFixture) -> None:
    one, two = Recorder("one-patch"), Recorder("two-patch")
    caplog.set_level(logging.INFO, logger="vllm.glmops_patches")
    first = plugin.apply_patches(ctx(), (one.patch, two.patch))
    again = plugin.apply_patches(ctx(), (one.patch, two.patch))
    assert (one.calls, two.calls) == (1, 1)
    assert first == again
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "glmops patch one-patch (demo-1) applied: did it",
        "glmops patch two-patch (demo-1) applied: did it",
    ]


def test_an_unsupported_vllm_version_gets_no_patch_at_all() -> None:
    rec = Recorder()
    out = plugin.apply_patches(ctx("0.25.0"), (rec.patch,))
    assert rec.calls == 0
    assert not out["demo-patch"].applied
    assert f"not a supported version ({SUPPORTED})" in out["demo-patch"].message


def test_a_missing_target_stops_registration_loudly() -> None:
    patch = Patch(info=_info(), targets=lambda c: (Target("json", "no_such_function"),), apply=lambda c, f: "x")
    with pytest.raises(PatchTargetMissing, match="json::no_such_function: 'no_such_function' not found"):
        plugin.apply_patches(ctx(), (patch,))


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        (Target("json", "dumps", ("obj", "indent")), None),
        (Target("json.decoder", "JSONDecoder.decode", ("s",)), None),
        (Target("json", "dumps", ("no_such_param",)), "parameter(s) no_such_param not found"),
        (Target("json", "JSONEncoder.no_such_method"), "'no_such_method' not found"),
        (Target("no_such_module_here", "x"), "module does not import"),
    ],
)
def test_resolve_finds_real_objects_and_names_what_is_missing(target: Target, problem: str | None) -> None:
    if problem is None:
        assert callable(resolve(target))
    else:
        with pytest.raises(PatchTargetMissing, match=problem.replace("(", r"\(").replace(")", r"\)")):
            resolve(target)


SOURCE = """
import sys
class Engine:
    def apply(self, x, expert_map=None):
        pass
    limit = 3
if sys.platform == "linux":
    def helper(a):
        pass
"""


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        (Target("pkg.mod", "Engine.apply", ("x", "expert_map")), None),
        (Target("pkg.mod", "Engine.limit"), None),
        (Target("pkg.mod", "helper", ("a",)), None),
        (Target("pkg", "Engine"), "module file not found"),
        (Target("pkg.mod", "Engine.apply", ("topk_ids",)), "parameter(s) topk_ids not found"),
        (Target("pkg.mod", "Engine.run"), "'run' not found in mod.py"),
        (Target("pkg.other", "x"), "module file not found"),
    ],
)
def test_static_check_reads_targets_from_source_without_importing(
    tmp_path: Path, target: Target, problem: str | None
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(SOURCE)
    found = static.find_problem(tmp_path, target)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_every_registry_entry_is_complete_and_its_switch_unique() -> None:
    switches = {p.info.env_switch for p in PATCHES}
    assert PATCHES and len(switches) == len(PATCHES), "two patches share a switch"
    for p in PATCHES:
        i = p.info
        for field in (i.issue, i.why, i.how, i.remove_when):
            assert field and "TODO" not in field, f"{i.name}: incomplete registry entry"
        assert i.issue_url.startswith("https://"), i.name


def test_registry_ranges_are_the_ones_the_operator_image_catalog_promises() -> None:
    catalog = yaml.safe_load((REPO / "operator/glm_operator/catalog/data/images.yaml").read_text())
    promised = catalog["patches"]
    assert set(promised) == {p.info.name for p in PATCHES}
    for p in PATCHES:
        entry = promised[p.info.name]
        assert (p.info.affected.first, p.info.affected.until) == (entry["from"], entry["until"]), p.info.name
        # The catalog lists the platforms glmops builds images for; a patch may also run elsewhere (cpu).
        assert set(p.info.platforms) & {"cuda", "rocm"} == set(entry["platforms"]), p.info.name

"""The checklists of docs/architecture.md, run: every rule, fact, patch, start-up refusal and supported vLLM version
has each piece its checklist names, and a missing one fails naming the item, the piece and the file to edit.

The checks live in tests/support/checklists.py; the second half of this file removes one piece at a time from a copy
of the data and expects the named failure, so no check here is one that cannot fail.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import pytest
import yaml
from glmops_vllm_patches.registry import PATCHES
from glmops_vllm_patches.version import PROVEN_VERSIONS

from glm_operator.catalog import vllm_facts
from glm_operator.catalog.bundle import Catalogs
from glm_operator.catalog.images import load_images
from glm_operator.rules import known_issues
from glm_operator.rules.engine import admit
from glm_operator.rules.known_issues import KNOWN_ISSUES
from glm_operator.rules.registry import RuleInfo
from glm_operator.rules.startup import STARTUP_REFUSALS
from glm_operator.sim.faults import KNOWN_FAILURES
from tests.support import checklists as cl
from tests.vllm_source.extract import LINE_READERS
from tests.vllm_source.test_source_facts import READERS

TREE = cl.Tree()
CATALOGS = Catalogs.packaged()
VERSIONS = load_images().versions
RULES = {r.id: r for r in KNOWN_ISSUES}
FACTS = {f.id: f for f in vllm_facts.FACTS}
FACT_CONSTS = {getattr(vllm_facts, name).id: name for name in cl.declared(TREE, cl.FACTS_PY, "Fact")}
PATCHES_BY_NAME = {p.info.name: p for p in PATCHES}
REFUSALS = {r.id: r for r in STARTUP_REFUSALS}


@cache
def refused_by(sample: str, root: Path = cl.REPO) -> set[str]:
    return {e.rule for e in admit(yaml.safe_load((root / sample).read_text()), CATALOGS).errors}


def missing_for_rule(rule_id: str, tree: cl.Tree = TREE, rules: Mapping[str, RuleInfo] = RULES) -> list[str]:
    return cl.rule_missing(
        rules[rule_id],
        tree,
        fact_ids=set(FACTS),
        patch_issues={p.info.name: p.info.issue for p in PATCHES},
        failures=[issue for issue, _check in KNOWN_FAILURES],
        refused_by=lambda sample: refused_by(sample, tree.root),
    )


def missing_for_fact(fact_id: str, tree: cl.Tree = TREE, readers: Iterable[str] = READERS) -> list[str]:
    return cl.fact_missing(
        FACTS[fact_id],
        FACT_CONSTS[fact_id],
        tree,
        readers=readers,
        versions=VERSIONS,
        rules=KNOWN_ISSUES,
    )


def missing_for_patch(name: str, tree: cl.Tree = TREE) -> list[str]:
    return cl.patch_missing(PATCHES_BY_NAME[name], tree, rules=KNOWN_ISSUES, versions=PROVEN_VERSIONS)


def missing_for_refusal(rule_id: str, tree: cl.Tree = TREE) -> list[str]:
    return cl.refusal_missing(REFUSALS[rule_id], tree, line_readers=LINE_READERS, versions=VERSIONS)


def missing_for_version(version: str, tree: cl.Tree = TREE) -> list[str]:
    return cl.version_missing(version, tree, platforms=sorted(CATALOGS.images.patched_images))


# --- The checklists, run over every item -----------------------------------------------------------------------------


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_has_every_piece_of_the_rule_checklist(rule_id: str) -> None:
    assert not missing_for_rule(rule_id), "\n".join(missing_for_rule(rule_id))


@pytest.mark.parametrize("fact_id", sorted(FACTS))
def test_fact_has_every_piece_of_the_fact_checklist(fact_id: str) -> None:
    assert not missing_for_fact(fact_id), "\n".join(missing_for_fact(fact_id))


@pytest.mark.parametrize("name", sorted(PATCHES_BY_NAME))
def test_patch_has_every_piece_of_the_patch_checklist(name: str) -> None:
    assert not missing_for_patch(name), "\n".join(missing_for_patch(name))


@pytest.mark.parametrize("rule_id", sorted(REFUSALS))
def test_startup_refusal_has_every_piece_of_its_checklist(rule_id: str) -> None:
    assert not missing_for_refusal(rule_id), "\n".join(missing_for_refusal(rule_id))


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_version_is_in_every_list_that_must_know_it(version: str) -> None:
    assert not missing_for_version(version), "\n".join(missing_for_version(version))


def test_every_declaration_is_in_its_registry() -> None:
    """A rule, fact, refusal or patch module written but never registered is not checked by anything above."""
    unregistered = [
        f"RuleInfo {name} of {cl.KNOWN_ISSUES_PY} is not in KNOWN_ISSUES"
        for name in cl.declared(TREE, cl.KNOWN_ISSUES_PY, "RuleInfo")
        if getattr(known_issues, name) not in KNOWN_ISSUES
    ]
    unregistered += [
        f"Fact {name} of {cl.FACTS_PY} is not in FACTS"
        for name in cl.declared(TREE, cl.FACTS_PY, "Fact")
        if getattr(vllm_facts, name) not in vllm_facts.FACTS
    ]
    unregistered += [
        f"{rule_id} is refused in {cl.STARTUP_PY} without a StartupRefusal in STARTUP_REFUSALS"
        for rule_id in sorted(cl.startup_rule_ids(TREE) - set(REFUSALS))
    ]
    unregistered += [
        f"{cl.PLUGIN}/patch_{cl.snake(name)}.py is not in PATCHES of {cl.REGISTRY_PY}"
        for name in cl.patch_modules(TREE)
        if name not in PATCHES_BY_NAME
    ]
    assert not unregistered, "\n".join(unregistered)


def test_every_patch_has_its_own_switch() -> None:
    switches = [p.info.env_switch for p in PATCHES]
    assert len(set(switches)) == len(switches), f"two patches share a switch: {switches}"


# --- Each check can fail: one piece removed from a copy ---------------------------------------------------------------


def _copy(tmp_path: Path, *rels: str) -> cl.Tree:
    """A copy of the files the checklists read (and `rels`, to be changed by the test)."""
    for rel in (
        "samples",
        "docs",
        "README.md",
        "images/docker-bake.json",
        "images/vllm-patches/README.md",
        cl.PLUGIN,
        "operator/glm_operator/sim",
        "operator/glm_operator/catalog",
        "operator/glm_operator/rules",
        "operator/glm_operator/cli",
        cl.RULE_TESTS,
        cl.STARTUP_TESTS,
        "tests/unit/test_canary_endpoint_faults.py",
        "tests/plugin",
        *rels,
    ):
        src, dst = cl.REPO / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy(src, dst)
    return cl.Tree(tmp_path)


def _edit(tree: cl.Tree, rel: str, old: str, new: str) -> None:
    path = tree.root / rel
    text = path.read_text()
    assert old in text, f"{old!r} not in {rel}: this test no longer removes anything"
    path.write_text(text.replace(old, new))


def test_the_copy_itself_misses_nothing(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    assert not missing_for_rule("vllm-52833", tree) + missing_for_patch("rocm-mla-bf16-bmm", tree)
    assert not missing_for_fact("http-keep-alive", tree) + missing_for_refusal("startup/pp-partition", tree)
    assert not missing_for_version(VERSIONS[-1], tree)


@pytest.mark.parametrize(
    "remove, expected",
    [
        ("samples/vllm-52833-fixed.yaml", "rule vllm-52833: no fixed sample beside samples/vllm-52833-broken.yaml"),
        ("samples/vllm-52833-broken.yaml", "rule vllm-52833: no broken sample: add samples/vllm-52833"),
    ],
)
def test_a_rule_without_its_sample_fails_naming_it(tmp_path: Path, remove: str, expected: str) -> None:
    tree = _copy(tmp_path)
    (tree.root / remove).unlink()
    assert any(m.startswith(expected) for m in missing_for_rule("vllm-52833", tree)), missing_for_rule(
        "vllm-52833", tree
    )


def test_a_broken_sample_admission_lets_through_fails_naming_it(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    shutil.copy(tree.root / "samples/vllm-52833-fixed.yaml", tree.root / "samples/vllm-52833-broken.yaml")
    assert "rule vllm-52833: admission does not refuse samples/vllm-52833-broken.yaml for vllm-52833" in " ".join(
        missing_for_rule("vllm-52833", tree)
    )


@pytest.mark.parametrize(
    "rel, old, new, expected",
    [
        (
            cl.SAMPLES_README,
            "`vllm-52833-fixed.yaml`",
            "",
            f"samples/vllm-52833-fixed.yaml has no row in {cl.SAMPLES_README}",
        ),
        (
            cl.FAULTS_PY,
            '("vllm-52833", mtp_zero)',
            '("vllm-x", mtp_zero)',
            f"no row of KNOWN_FAILURES in {cl.FAULTS_PY}",
        ),
        (cl.RULE_TESTS, "vllm-52833", "vllm-x", f"no test names it in {cl.RULE_TESTS}"),
        (cl.RULES_MD, "### `vllm-52833`:", "### x", f"no entry in {cl.RULES_MD}"),
        (
            cl.IMAGES_YAML,
            "  rocm-mla-bf16-bmm:",
            "  x:",
            f"is not in the image catalog: add it under patches in {cl.IMAGES_YAML}",
        ),
    ],
)
def test_a_rule_without_a_piece_fails_naming_it(tmp_path: Path, rel: str, old: str, new: str, expected: str) -> None:
    tree = _copy(tmp_path)
    _edit(tree, rel, old, new)
    found = missing_for_rule("vllm-52833", tree)
    if rel == cl.FAULTS_PY:  # KNOWN_FAILURES is code: the check reads the table it is handed
        found = cl.rule_missing(
            RULES["vllm-52833"],
            tree,
            fact_ids=set(FACTS),
            patch_issues={p.info.name: p.info.issue for p in PATCHES},
            failures=[i for i, _ in KNOWN_FAILURES if i != "vllm-52833"],
            refused_by=lambda s: refused_by(s),
        )
    assert any(m.startswith("rule vllm-52833: ") and expected in m for m in found), found


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"facts": ("aiter-switch-defaults", "no-such-fact")}, "reads fact no-such-fact, which is not in FACTS"),
        ({"facts": ()}, "its RuleInfo names no vLLM fact it reads"),
        ({"remove_when": ""}, "its RuleInfo has no remove_when"),
        ({"upstream": "https://github.com/vllm-project/vllm/issues/1"}, "is not https://github.com/vllm-project"),
        ({"patch": "no-such-patch"}, "its patch no-such-patch is not in the plugin's registry"),
        ({"patch": "dsa-pp-topk-handoff"}, "its patch dsa-pp-topk-handoff names issue vllm-63170, not vllm-52833"),
    ],
)
def test_a_rule_declaration_missing_a_piece_fails_naming_it(change: dict[str, object], expected: str) -> None:
    rules = {**RULES, "vllm-52833": dataclasses.replace(RULES["vllm-52833"], **change)}  # type: ignore[arg-type]
    found = missing_for_rule("vllm-52833", rules=rules)
    assert any(m.startswith("rule vllm-52833: ") and expected in m for m in found), found


def test_a_fact_without_a_reader_a_location_docs_or_a_user_fails_naming_each(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _edit(tree, cl.LOCATIONS, "  http-keep-alive:\n", "  x:\n")
    _edit(tree, cl.RULES_MD, '<a id="http-keep-alive">', "<a>")
    (tree.root / "tests/unit/test_canary_endpoint_faults.py").unlink()
    found = "\n".join(missing_for_fact("http-keep-alive", tree, readers=set(READERS) - {"http-keep-alive"}))
    for piece in (
        "fact http-keep-alive: no reader that reads it from vLLM's source: add one to tests/vllm_source/extract.py",
        f"fact http-keep-alive: no location in vLLM {VERSIONS[0]} in {cl.LOCATIONS}",
        f"fact http-keep-alive: no section in {cl.RULES_MD}",
        "fact http-keep-alive: nothing relies on it",
    ):
        assert piece in found, found


def test_a_fact_that_does_not_start_at_the_oldest_version_fails() -> None:
    fact = FACTS["http-keep-alive"]
    late = dataclasses.replace(fact, since=(("0.30.0", 5),))
    found = cl.fact_missing(late, "HTTP_KEEP_ALIVE_S", TREE, readers=READERS, versions=VERSIONS, rules=KNOWN_ISSUES)
    assert any("its `since` does not start at the oldest supported version" in m for m in found), found


@pytest.mark.parametrize(
    "rel, old, new, expected",
    [
        (cl.PATCHES_MD, "\n## rocm-mla-bf16-bmm\n", "\n## x\n", f"no row and section in {cl.PATCHES_MD}"),
        (
            cl.IMAGES_YAML,
            'rocm-mla-bf16-bmm: {platforms: [rocm], from: "0.26.0", until: "0.33.0"}',
            'rocm-mla-bf16-bmm: {platforms: [rocm], from: "0.26.0", until: "0.34.0"}',
            "make them agree",
        ),
        (cl.BAKE, ",rocm-mla-bf16-bmm", "", f"{cl.BAKE} target vllm-rocm-"),
        ("operator/glm_operator/sim/faults.py", '"rocm-mla-bf16-bmm"', '"x"', "the simulator does not know it"),
    ],
)
def test_a_patch_without_a_piece_fails_naming_it(tmp_path: Path, rel: str, old: str, new: str, expected: str) -> None:
    tree = _copy(tmp_path)
    _edit(tree, rel, old, new)
    found = missing_for_patch("rocm-mla-bf16-bmm", tree)
    assert any(m.startswith("patch rocm-mla-bf16-bmm: ") and expected in m for m in found), found


def test_a_patch_without_its_module_test_or_user_fails_naming_each(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    (tree.root / cl.PLUGIN / "patch_null_content_metrics.py").unlink()
    (tree.root / "tests/plugin/test_null_content_metrics.py").unlink()
    for rel in ("operator/glm_operator/cli/canary_cmd.py", "operator/glm_operator/sim/server.py"):
        (tree.root / rel).unlink()
    found = "\n".join(missing_for_patch("null-content-metrics", tree))
    for piece in ("no module", "no test tests/plugin/test_null_content_metrics.py", "nothing in the operator uses it"):
        assert f"patch null-content-metrics: {piece}" in found, found


def test_a_patch_entry_without_why_or_pull_requests_fails_naming_it() -> None:
    patch = PATCHES_BY_NAME["rocm-mla-bf16-bmm"]
    bare = dataclasses.replace(patch, info=dataclasses.replace(patch.info, why="", prs=(), issue="vllm-1"))
    found = "\n".join(cl.patch_missing(bare, TREE, rules=KNOWN_ISSUES, versions=PROVEN_VERSIONS))
    for piece in ("has no why", "names no upstream pull request", "its issue vllm-1 is no known-issue rule"):
        assert piece in found, found


def test_a_startup_refusal_citing_other_lines_than_the_source_fails_naming_the_version(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _edit(tree, cl.STARTUP_MD, "0.34.0 :211 (:232, :234, :236)", "0.34.0 :211 (:232, :234, :237)")
    found = missing_for_refusal("startup/pp-partition", tree)
    assert found == [
        f"start-up refusal startup/pp-partition: {cl.STARTUP_MD} cites :211, :232, :234, :237 in vLLM 0.34.0, "
        f"the source has :211, :232, :234, :236 ({cl.LOCATIONS}): correct the row"
    ]


def test_a_startup_refusal_without_row_test_reader_or_located_lines_fails_naming_each(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _edit(tree, cl.STARTUP_MD, "`startup/moe-backend-model`", "`x`")
    _edit(tree, cl.STARTUP_TESTS, "startup/moe-backend-model", "x")
    _edit(tree, cl.LOCATIONS, "  moe-backend-model:\n", "  x:\n")
    readers = set(LINE_READERS) - {"moe-backend-model"}
    found = "\n".join(
        cl.refusal_missing(REFUSALS["startup/moe-backend-model"], tree, line_readers=readers, versions=VERSIONS)
    )
    for piece in (f"no row in {cl.STARTUP_MD}", f"no test names it in {cl.STARTUP_TESTS}", "no reader of its lines"):
        assert f"start-up refusal startup/moe-backend-model: {piece}" in found, found
    assert "its lines moe-backend-model are not located in vLLM 0.26.0" in found, found


def test_an_undeclared_refusal_an_unregistered_patch_module_or_rule_is_found(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _edit(tree, cl.STARTUP_PY, "rule=EXTRA_ARGS_JSON.id", 'rule="startup/new-check"')
    (tree.root / cl.PLUGIN / "patch_new_fix.py").write_text("")
    assert cl.startup_rule_ids(tree) == {"startup/new-check"}
    with (tree.root / cl.KNOWN_ISSUES_PY).open("a") as f:
        f.write("\nVLLM_1 = RuleInfo(id='vllm-1')\n")
    assert "VLLM_1" in cl.declared(tree, cl.KNOWN_ISSUES_PY, "RuleInfo")
    assert "new-fix" in cl.patch_modules(tree)


@pytest.mark.parametrize(
    "rel, old, new, expected",
    [
        (cl.VERSIONS_YAML, ', "0.34.0"', "", f"not in {cl.VERSIONS_YAML}"),
        (cl.BAKE, '"vllm-rocm-0-34-0":', '"x":', f"no {cl.BAKE} target vllm-rocm-0-34-0"),
        (cl.PATCHES_MD, "0.33.0, 0.34.0.", "0.33.0.", f"{cl.PATCHES_MD} does not list it as proven"),
        (cl.LOCATIONS, "    0.34.0: [238]\n", "", f"{cl.LOCATIONS} has no lines entry for it (moe-backend-model)"),
        ("README.md", "0.34.0", "0.3x", "README.md does not name it"),
        (
            cl.RULES_MD,
            "| 0.34.0 | `config/parallel.py:45` |\n",
            "",
            f"{cl.RULES_MD} gives its source line for {len(FACTS) - 1} of {len(FACTS)}",
        ),
    ],
)
def test_a_version_missing_from_a_list_fails_naming_the_list(
    tmp_path: Path, rel: str, old: str, new: str, expected: str
) -> None:
    tree = _copy(tmp_path)
    _edit(tree, rel, old, new)
    found = missing_for_version("0.34.0", tree)
    assert any(m.startswith("vLLM 0.34.0: ") and expected in m for m in found), found


@pytest.mark.parametrize(
    "cell, expected",
    [
        (
            "`distributed/utils.py` `get_pp_indices`: 0.26.0, 0.30.0 :127 (raises :149, :152); 0.31.0 :128 (:150)",
            {"0.26.0": [127, 149, 152], "0.30.0": [127, 149, 152], "0.31.0": [128, 150]},
        ),
        (
            "`config/kernel.py`: 0.30.0 :194 and 0.31.0 :187 (both); 0.32.0 :237; absent in 0.26.0 and 0.27.1",
            {"0.30.0": [194], "0.31.0": [187], "0.32.0": [237], "0.26.0": [], "0.27.1": []},
        ),
    ],
)
def test_cited_lines_reads_a_where_cell_as_people_write_it(cell: str, expected: dict[str, list[int]]) -> None:
    assert cl.cited_lines(cell) == expected

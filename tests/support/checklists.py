"""What each checklist of docs/architecture.md asks of one rule, fact, patch, start-up refusal or vLLM version.

Each function returns the pieces missing for one item, each as one line naming the item, the piece and the file
to edit (or the command that writes it). They read the files through a `Tree`, so a test can hand them a copy of
the repository with one piece removed and see the named failure (tests/unit/test_checklists.py).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from glmops_vllm_patches.base import Patch
from glmops_vllm_patches.version import Version

from glm_operator.catalog.vllm_facts import Fact
from glm_operator.rules.registry import RuleInfo
from glm_operator.rules.startup import StartupRefusal

REPO = Path(__file__).resolve().parents[2]

KNOWN_ISSUES_PY = "operator/glm_operator/rules/known_issues.py"
STARTUP_PY = "operator/glm_operator/rules/startup.py"
FACTS_PY = "operator/glm_operator/catalog/vllm_facts.py"
FAULTS_PY = "operator/glm_operator/sim/faults.py"
LOCATIONS = "operator/glm_operator/catalog/data/vllm-fact-locations.yaml"
VERSIONS_YAML = "operator/glm_operator/catalog/data/vllm-versions.yaml"
IMAGES_YAML = "operator/glm_operator/catalog/data/images.yaml"
PLUGIN = "images/vllm-patches/src/glmops_vllm_patches"
REGISTRY_PY = f"{PLUGIN}/registry.py"
VERSION_PY = f"{PLUGIN}/version.py"
BAKE = "images/docker-bake.json"
RULES_MD = "docs/rules.md"
PATCHES_MD = "docs/patches.md"
STARTUP_MD = "docs/startup-refusals.md"
SAMPLES_README = "samples/README.md"
RULE_TESTS = "tests/unit/test_rules_known_issues.py"
STARTUP_TESTS = "tests/unit/test_rules_startup.py"
READERS_AT = "tests/vllm_source/extract.py (listed in READERS of tests/vllm_source/test_source_facts.py)"
GENERATE = "run `glmctl generate`"
LOCATE = "run `python -m tests.vllm_source.locate`"
ISSUE_URL = "https://github.com/vllm-project/vllm/issues/"


@dataclass(frozen=True)
class Tree:
    """The repository's files as a checklist reads them: the real one, or a copy a test has changed."""

    root: Path = REPO

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def text(self, rel: str) -> str:
        path = self.root / rel
        return path.read_text() if path.is_file() else ""

    def yaml(self, rel: str) -> Any:
        return yaml.safe_load(self.text(rel)) or {}

    def names(self, rel: str, pattern: str) -> list[str]:
        return sorted(p.name for p in (self.root / rel).glob(pattern))

    def mentions(self, under: str, needle: str, skip: Iterable[str] = ()) -> bool:
        """Whether any .py, .yaml or .md file under `under` (a file or folder), other than `skip`, names `needle`."""
        base = self.root / under
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.suffix in (".py", ".yaml", ".md")]
        skipped = {self.root / s for s in skip}
        return any(needle in p.read_text() for p in files if p not in skipped)


def snake(name: str) -> str:
    return name.replace("-", "_")


# --- A known-issue rule ----------------------------------------------------------------------------------------------


def rule_missing(
    rule: RuleInfo,
    tree: Tree,
    *,
    fact_ids: set[str],
    patch_issues: Mapping[str, str],
    failures: Iterable[str],
    refused_by: Callable[[str], set[str]],
) -> list[str]:
    """`patch_issues`: plugin patch name -> its issue; `failures`: the ids of sim/faults.py KNOWN_FAILURES;
    `refused_by(sample)`: the rule ids admission refuses a sample file for."""
    item = f"rule {rule.id}"
    out = _declaration_missing(rule, item, fact_ids)
    if rule.patch:
        if rule.patch not in patch_issues:
            out.append(f"{item}: its patch {rule.patch} is not in the plugin's registry: add it to {REGISTRY_PY}")
        elif patch_issues[rule.patch] != rule.id:
            out.append(
                f"{item}: its patch {rule.patch} names issue {patch_issues[rule.patch]}, not {rule.id}: fix the "
                f"patch's PatchInfo in {PLUGIN}/patch_{snake(rule.patch)}.py"
            )
        if rule.patch not in (tree.yaml(IMAGES_YAML).get("patches") or {}):
            out.append(
                f"{item}: its patch {rule.patch} is not in the image catalog: add it under patches in {IMAGES_YAML}"
            )
    out += _samples_missing(rule, item, tree, refused_by)
    if rule.id not in set(failures):
        out.append(
            f"{item}: no row of KNOWN_FAILURES in {FAULTS_PY}: the simulator must show the failure it prevents "
            "(written from the upstream report and vLLM's source, not from the rule)"
        )
    if rule.id not in tree.text(RULE_TESTS):
        out.append(f"{item}: no test names it in {RULE_TESTS}")
    if f"### `{rule.id}`:" not in tree.text(RULES_MD):
        out.append(f"{item}: no entry in {RULES_MD}: {GENERATE}")
    return out


def _declaration_missing(rule: RuleInfo, item: str, fact_ids: set[str]) -> list[str]:
    out = []
    for name in ("title", "affected", "remedy", "remove_when", "condition"):
        if not str(getattr(rule, name)).strip():
            out.append(f"{item}: its RuleInfo has no {name}: fill it in {KNOWN_ISSUES_PY}")
    if not rule.upstream.startswith(ISSUE_URL) or rule.upstream.rstrip("/").rsplit("/", 1)[1] != rule.id.removeprefix(
        "vllm-"
    ):
        out.append(
            f"{item}: upstream {rule.upstream!r} is not {ISSUE_URL}{rule.id.removeprefix('vllm-')} ({KNOWN_ISSUES_PY})"
        )
    if not rule.facts:
        out.append(f"{item}: its RuleInfo names no vLLM fact it reads ({KNOWN_ISSUES_PY}, facts from {FACTS_PY})")
    out += [
        f"{item}: reads fact {f}, which is not in FACTS of {FACTS_PY}: add it there with a reader in {READERS_AT}"
        for f in rule.facts
        if f not in fact_ids
    ]
    return out


def _samples_missing(rule: RuleInfo, item: str, tree: Tree, refused_by: Callable[[str], set[str]]) -> list[str]:
    out = []
    broken = tree.names("samples", f"{rule.id}*-broken.yaml")
    if not broken:
        out.append(f"{item}: no broken sample: add samples/{rule.id}[-<setup>]-broken.yaml (remediation: Reject)")
    readme = tree.text(SAMPLES_README)
    for name in broken:
        fixed = name.removesuffix("-broken.yaml") + "-fixed.yaml"
        if not tree.exists(f"samples/{fixed}"):
            out.append(f"{item}: no fixed sample beside samples/{name}: add samples/{fixed}")
        for sample in (name, fixed):
            if tree.exists(f"samples/{sample}") and f"`{sample}`" not in readme:
                out.append(f"{item}: samples/{sample} has no row in {SAMPLES_README}")
        if rule.id not in refused_by(f"samples/{name}"):
            out.append(f"{item}: admission does not refuse samples/{name} for {rule.id}: make the sample show it")
    return out


# --- A fact about vLLM -----------------------------------------------------------------------------------------------


def fact_missing(
    fact: Fact[object],
    const: str,
    tree: Tree,
    *,
    readers: Iterable[str],
    versions: tuple[str, ...],
    rules: Iterable[RuleInfo],
) -> list[str]:
    """`const`: the name vllm_facts.py gives the fact; `readers`: the fact ids tests/vllm_source can read."""
    item = f"fact {fact.id}"
    out = []
    if not fact.claim.strip():
        out.append(f"{item}: no claim: say what vLLM does in {FACTS_PY}")
    if fact.id not in set(readers):
        out.append(f"{item}: no reader that reads it from vLLM's source: add one to {READERS_AT}")
    oldest = min(versions, key=Version.parse)
    if not fact.since or fact.since[0][0] != oldest:
        out.append(f"{item}: its `since` does not start at the oldest supported version {oldest} ({FACTS_PY})")
    located = (tree.yaml(LOCATIONS).get("facts") or {}).get(fact.id) or {}
    for version in versions:
        if not located.get(version):
            out.append(f"{item}: no location in vLLM {version} in {LOCATIONS}: {LOCATE}")
    if f'<a id="{fact.id}"></a>' not in tree.text(RULES_MD):
        out.append(f"{item}: no section in {RULES_MD}: {GENERATE}")
    if not _relied_on(fact, const, tree, rules):
        out.append(
            f"{item}: nothing relies on it: name it in a rule's facts ({KNOWN_ISSUES_PY}), or read {const} or cite "
            f"{fact.id} where the operator (operator/glm_operator/) or a unit test uses it"
        )
    return out


def _relied_on(fact: Fact[object], const: str, tree: Tree, rules: Iterable[RuleInfo]) -> bool:
    if any(fact.id in rule.facts for rule in rules):
        return True
    own = (FACTS_PY, LOCATIONS)
    return any(
        tree.mentions(under, needle, skip=own)
        for under in ("operator/glm_operator", "tests/unit")
        for needle in (
            f"`{fact.id}`",
            f"{fact.id},",
            f"{fact.id})",
            f'"{fact.id}"',
            f"facts.{const}",
            f"import {const}",
        )
    )


# --- A vLLM patch ----------------------------------------------------------------------------------------------------


def patch_missing(patch: Patch, tree: Tree, *, rules: Iterable[RuleInfo], versions: tuple[str, ...]) -> list[str]:
    info = patch.info
    item = f"patch {info.name}"
    module = f"{PLUGIN}/patch_{snake(info.name)}.py"
    out = []
    if not tree.exists(module):
        out.append(f"{item}: no module {module}")
    for name in ("issue", "why", "how", "remove_when"):
        if not str(getattr(info, name)).strip():
            out.append(f"{item}: its registry entry has no {name}: fill its PatchInfo in {module}")
    if not info.issue_url.startswith(ISSUE_URL):
        out.append(f"{item}: its registry entry's issue_url is not an upstream issue ({module})")
    if not info.prs and "no upstream PR" not in info.why:
        out.append(
            f"{item}: its registry entry names no upstream pull request (prs), nor says in why that there is "
            f"no upstream PR ({module})"
        )
    if not info.platforms:
        out.append(f"{item}: its registry entry names no platform ({module})")
    proven = [v for v in versions if Version.parse(v) in info.affected]
    if not proven:
        out.append(f"{item}: its range {info.affected} holds no proven version ({VERSION_PY} PROVEN_VERSIONS)")
    out += _catalog_missing(patch, item, tree, proven)
    rules = list(rules)
    if info.issue not in {r.id for r in rules}:
        out.append(f"{item}: its issue {info.issue} is no known-issue rule: add the rule to {KNOWN_ISSUES_PY}")
    if not any(r.patch == info.name for r in rules) and not tree.mentions(
        "operator/glm_operator", info.name, skip=(IMAGES_YAML,)
    ):
        out.append(
            f"{item}: nothing in the operator uses it: name it as a rule's patch in {KNOWN_ISSUES_PY} (or read it "
            "where the operator relies on it, as the canary reads null-content-metrics)"
        )
    if not tree.mentions("operator/glm_operator/sim", info.name):
        out.append(f"{item}: the simulator does not know it: honour it in {FAULTS_PY} (or sim/server.py)")
    test = f"tests/plugin/test_{snake(info.name)}.py"
    if not tree.exists(test):
        out.append(f"{item}: no test {test} proving its targets in every proven version")
    return out


def _catalog_missing(patch: Patch, item: str, tree: Tree, proven: list[str]) -> list[str]:
    info = patch.info
    out = []
    catalog = tree.yaml(IMAGES_YAML)
    entry = (catalog.get("patches") or {}).get(info.name)
    if entry is None:
        out.append(f"{item}: no entry under patches in {IMAGES_YAML}")
    elif (entry.get("from"), entry.get("until")) != (info.affected.first, info.affected.until):
        out.append(
            f"{item}: {IMAGES_YAML} promises from {entry.get('from')} until {entry.get('until')}, the registry says "
            f"{info.affected}: make them agree"
        )
    elif not set(entry.get("platforms") or ()) <= set(info.platforms):
        out.append(f"{item}: {IMAGES_YAML} builds it for platforms its registry entry does not name")
    docs = tree.text(PATCHES_MD)
    if f"| [{info.name}](#{info.name}) |" not in docs or f"\n## {info.name}\n" not in docs:
        out.append(f"{item}: no row and section in {PATCHES_MD}: {GENERATE}")
    bake = _bake_targets(tree)
    for platform in (entry or {}).get("platforms") or ():
        for version in proven:
            target = f"vllm-{platform}-{version.replace('.', '-')}"
            if info.name not in bake.get(target, ()):
                out.append(f"{item}: {BAKE} target {target} does not build it: {GENERATE}")
    return out


def _bake_targets(tree: Tree) -> dict[str, tuple[str, ...]]:
    raw = json.loads(tree.text(BAKE) or "{}").get("target") or {}
    return {
        name: tuple(p for p in str(t.get("args", {}).get("GLMOPS_PATCHES", "")).split(",") if p)
        for name, t in raw.items()
    }


# --- A start-up refusal ----------------------------------------------------------------------------------------------


def refusal_missing(
    refusal: StartupRefusal, tree: Tree, *, line_readers: Iterable[str], versions: tuple[str, ...]
) -> list[str]:
    item = f"start-up refusal {refusal.id}"
    out = []
    row = startup_doc_row(tree.text(STARTUP_MD), refusal.id)
    if row is None:
        out.append(f"{item}: no row in {STARTUP_MD} (the vLLM refusal, where per version, the rule, the tests)")
    if refusal.id not in tree.text(STARTUP_TESTS):
        out.append(f"{item}: no test names it in {STARTUP_TESTS}")
    if refusal.cites not in set(line_readers):
        out.append(
            f"{item}: no reader of its lines {refusal.cites}: add it to LINE_READERS of tests/vllm_source/extract.py"
        )
    located = (tree.yaml(LOCATIONS).get("lines") or {}).get(refusal.cites) or {}
    cited = cited_lines(row[1]) if row else {}
    for version in versions:
        if version not in located:
            out.append(f"{item}: its lines {refusal.cites} are not located in vLLM {version} ({LOCATIONS}): {LOCATE}")
        elif row is not None and cited.get(version, []) != list(located[version]):
            out.append(
                f"{item}: {STARTUP_MD} cites {_lines(cited.get(version))} in vLLM {version}, the source has "
                f"{_lines(located[version])} ({LOCATIONS}): correct the row"
            )
    return out


def _lines(lines: Iterable[int] | None) -> str:
    found = list(lines or ())
    return ", ".join(f":{n}" for n in found) if found else "no line"


def startup_doc_row(text: str, rule_id: str) -> tuple[str, str] | None:
    """The table row of docs/startup-refusals.md whose rule cell names `rule_id` first: (whole row, where cell)."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.match(rf"`{re.escape(rule_id)}`", cells[2]):
            return line, cells[1]
    return None


_TOKEN = re.compile(r"(?<![\d.])(\d+\.\d+\.\d+)(?![\d.])|:(\d+)")


def cited_lines(cell: str) -> dict[str, list[int]]:
    """Version -> the line numbers a `where` cell cites for it: the numbers (`:N`) that follow a run of versions
    belong to each version of the run; a version followed by no number cites none ("absent in ...")."""
    out: dict[str, list[int]] = {}
    run: list[str] = []
    numbers_seen = False
    for match in _TOKEN.finditer(cell):
        version, number = match.groups()
        if version:
            if numbers_seen:
                run, numbers_seen = [], False
            run.append(version)
            out.setdefault(version, [])
        elif run:
            numbers_seen = True
            for v in run:
                out[v].append(int(number))
    return out


# --- A supported vLLM version ----------------------------------------------------------------------------------------


def version_missing(version: str, tree: Tree, *, platforms: Iterable[str]) -> list[str]:
    """`platforms`: those the image catalog builds patched images for."""
    item = f"vLLM {version}"
    out = []
    listed = [str(v) for v in (tree.yaml(VERSIONS_YAML).get("vllmVersions") or ())]
    if version not in listed:
        out.append(f"{item}: not in {VERSIONS_YAML}: {GENERATE}")
    bake = _bake_targets(tree)
    for platform in platforms:
        target = f"vllm-{platform}-{version.replace('.', '-')}"
        if target not in bake:
            out.append(f"{item}: no {BAKE} target {target}: {GENERATE}")
    proven = next((line for line in tree.text(PATCHES_MD).splitlines() if "proven against the sources of" in line), "")
    if version not in re.findall(r"\d+\.\d+\.\d+", proven):
        out.append(f"{item}: {PATCHES_MD} does not list it as proven: {GENERATE}")
    locations = tree.yaml(LOCATIONS)
    for kind in ("facts", "lines"):
        unlocated = [name for name, per in (locations.get(kind) or {}).items() if version not in (per or {})]
        if unlocated:
            out.append(f"{item}: {LOCATIONS} has no {kind} entry for it ({', '.join(unlocated)}): {LOCATE}")
    facts = locations.get("facts") or {}
    rows = tree.text(RULES_MD).count(f"\n| {version} | `")
    if rows < len(facts):
        out.append(f"{item}: {RULES_MD} gives its source line for {rows} of {len(facts)} facts: {LOCATE}")
    for readme in ("README.md", "images/vllm-patches/README.md"):
        if version not in tree.text(readme):
            out.append(f"{item}: {readme} does not name it among the supported versions")
    return out


# --- Registries: every declaration is registered ---------------------------------------------------------------------


def declared(tree: Tree, rel: str, kind: str) -> list[str]:
    """The module-level names `rel` binds to a `kind(...)` call (RuleInfo, Fact, StartupRefusal)."""
    names = []
    for node in ast.parse(tree.text(rel)).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            func = node.value.func
            if isinstance(target, ast.Name) and isinstance(func, ast.Name) and func.id == kind:
                names.append(target.id)
    return names


def startup_rule_ids(tree: Tree) -> set[str]:
    """The rule ids startup.py spells as a string in a finding (`rule="startup/..."`) instead of a declared
    refusal's `.id`: each is a start-up refusal missing from STARTUP_REFUSALS."""
    return {
        str(n.value.value)
        for n in ast.walk(ast.parse(tree.text(STARTUP_PY)))
        if isinstance(n, ast.keyword) and n.arg == "rule" and isinstance(n.value, ast.Constant)
    }


def patch_modules(tree: Tree) -> list[str]:
    """The patch names the plugin's `patch_*.py` modules stand for."""
    return [n.removeprefix("patch_").removesuffix(".py").replace("_", "-") for n in tree.names(PLUGIN, "patch_*.py")]

"""Admission policy: evaluate every rule, repair what Auto may repair, and decide.

Auto repairs only settings the user left unset (or that glmops itself set earlier, as recorded in the
`glmops.dev/remediations` annotation). A repair that would override an explicit value is never made:
the finding stays an error naming the field. Reject changes nothing. The same checks serve the
webhooks and `glmctl validate`, which receive raw JSON (`admit`, `evaluate`: parse, then check), and the
operator, which parsed the stored object once at its edge (`validated_condition`, `evaluate_model`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from glm_operator.api import GLMDeployment, GLMDeploymentSpec, Remediation, structural
from glm_operator.api.constants import Reason
from glm_operator.rules.access import ACCESS_CHECKS
from glm_operator.rules.context import Catalogs, resolve
from glm_operator.rules.feasibility import FEASIBILITY_CHECKS
from glm_operator.rules.findings import REDACTED, Change, Finding, is_secret_name
from glm_operator.rules.image_policy import image_policy_findings
from glm_operator.rules.known_issues import KNOWN_ISSUES
from glm_operator.rules.network import NETWORK_CHECKS
from glm_operator.rules.pod_settings import POD_SETTINGS_CHECKS
from glm_operator.rules.startup import STARTUP_CHECKS
from glm_operator.rules.storage import STORAGE_CHECKS

REMEDIATIONS_ANNOTATION = "glmops.dev/remediations"
MAX_REPAIR_ROUNDS = 4


@dataclass
class Admission:
    allowed: bool
    findings: list[Finding]
    patched: dict[str, Any]
    changes: list[Change] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != "error"]

    def rejection(self, extra: Sequence[Finding] = ()) -> str:
        """One message listing every problem (the rules' and `extra`, e.g. the author's rights; the first MAX_LISTED
        of more), as the API server shows it."""
        errors = [*self.errors, *extra]
        lines = [f"- {f.message}" for f in errors[:MAX_LISTED]]
        if len(errors) > MAX_LISTED:
            lines.append(f"- ... and {len(errors) - MAX_LISTED} more; fix these and apply again to see the rest")
        return f"{len(errors)} problem(s) with this GLMDeployment:\n" + "\n".join(lines)


MAX_LISTED = 100
"""Problems one refusal lists: 100,000 empty volumes made a 24 MB message, each line saying the same."""


def evaluate(obj: dict[str, Any], catalogs: Catalogs) -> list[Finding]:
    """Every finding for one object, without changing it."""
    parsed = parse(obj)
    if isinstance(parsed, list):
        return parsed
    return evaluate_model(parsed, catalogs)


def parse(obj: dict[str, Any]) -> GLMDeployment | list[Finding]:
    """The object as the model, or the schema findings that keep it from parsing (secret-like env values hidden)."""
    cleaned = structural.drop_nulls(obj)  # once, for the schema check and the model both
    problems = structural.check_cleaned(cleaned)
    if problems:
        return hide_secret_env(
            [
                Finding(rule="schema", severity="error", field=p.path, value=p.value, problem=p.problem, fix=p.fix)
                for p in problems
            ],
            obj,
        )
    try:
        return GLMDeployment.model_validate(cleaned)
    except ValidationError as err:
        return hide_secret_env(schema_findings(err), obj)


def evaluate_model(glmd: GLMDeployment, catalogs: Catalogs) -> list[Finding]:
    """Every finding for an object already parsed (the operator parses a stored object once, at its edge)."""
    ctx = resolve(glmd.spec, catalogs, owned_env(glmd.metadata.annotations))
    findings: list[Finding] = image_policy_findings(ctx)
    for check in (
        *FEASIBILITY_CHECKS,
        *NETWORK_CHECKS,
        *POD_SETTINGS_CHECKS,
        *STORAGE_CHECKS,
        *STARTUP_CHECKS,
        *ACCESS_CHECKS,
    ):
        findings.extend(check(ctx))
    for rule in KNOWN_ISSUES:
        findings.extend(rule.findings(ctx))
    return findings


_ENV_ITEM = re.compile(r"^spec\.engine\.env(?:\[(\d+)\]|\.(\d+))(?:\.|$)")


def hide_secret_env(findings: list[Finding], obj: dict[str, Any]) -> list[Finding]:
    """Schema findings quote the value they found; under an env entry whose name is secret-like, that goes.

    `{"name": "HF_TOKEN", "value": 12345}` is refused for its type, and the message must not carry 12345.
    """
    env: Any = obj
    for key in ("spec", "engine", "env"):
        env = env.get(key) if isinstance(env, dict) else None
    if not isinstance(env, list):
        return findings
    out = []
    for f in findings:
        match = _ENV_ITEM.match(f.field)
        index = int(match[1] or match[2]) if match else -1
        item = env[index] if 0 <= index < len(env) else None
        secret = isinstance(item, dict) and is_secret_name(item.get("name"))
        out.append(dataclasses.replace(f, value=REDACTED) if secret else f)
    return out


def schema_findings(err: ValidationError) -> list[Finding]:
    out = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        value = structural.show(e.get("input"))
        out.append(
            Finding(
                rule="schema",
                severity="error",
                field=path,
                value=value,
                problem=e["msg"],
                fix=f"See `kubectl explain {structural.explain_path(path)}`",
            )
        )
    return out


def owned_env(annotations: Mapping[str, str]) -> dict[str, str]:
    """Environment values glmops set in earlier repairs (so it may set them again)."""
    return {r["env"]: r["value"] for r in _records(annotations) if "env" in r and "value" in r}


def admit(obj: dict[str, Any], catalogs: Catalogs | None = None) -> Admission:
    """Decide on one GLMDeployment, repairing it first when its policy is Auto."""
    catalogs = catalogs or Catalogs.packaged()
    # Repairs work on the object as the API server keeps it: null-valued keys are dropped there too. drop_nulls builds
    # every dict and list anew, so the repairs below never reach the caller's object (no deep copy needed).
    current = structural.drop_nulls(obj)
    findings = evaluate(current, catalogs)
    if any(f.rule == "schema" for f in findings):
        return Admission(False, findings, current)
    auto = (current.get("spec", {}).get("validation") or {}).get("remediation", "Auto") == "Auto"
    applied: list[tuple[Finding, Change]] = []
    current, default_change = _pin_default_version(current, catalogs) if auto else (current, None)
    for _ in range(MAX_REPAIR_ROUNDS if auto else 0):
        repairable = [f for f in findings if _repairable(f)]
        if not repairable:
            break
        for finding in repairable:
            for change in finding.changes:
                _apply(current, change)
                applied.append((finding, change))
        _record(current, applied)
        findings = evaluate(current, catalogs)
    remediated = [
        Finding(
            rule=f.rule,
            severity="remediated",
            field=c.path,
            value=str(c.value),
            problem=f"repaired: {f.problem}",
            fix=c.describe(),
            upstream=f.upstream,
        )
        for f, c in applied
    ]
    if default_change:
        remediated.insert(
            0,
            Finding(
                rule="defaults",
                severity="remediated",
                field=default_change.path,
                value=str(default_change.value),
                problem="left unset; glmops pins its default",
                fix=default_change.describe(),
            ),
        )
    all_findings = remediated + findings
    changes = ([default_change] if default_change else []) + [c for _, c in applied]
    return Admission(not any(f.severity == "error" for f in findings), all_findings, current, changes)


def _pin_default_version(obj: dict[str, Any], catalogs: Catalogs) -> tuple[dict[str, Any], Change | None]:
    engine = obj.setdefault("spec", {}).setdefault("engine", {})
    if engine.get("image") or engine.get("vllmVersion"):
        return obj, None
    engine["vllmVersion"] = catalogs.images.default_version
    return obj, Change("spec.engine.vllmVersion", catalogs.images.default_version)


def _apply(obj: dict[str, Any], change: Change) -> None:
    engine = obj.setdefault("spec", {}).setdefault("engine", {})
    if change.env_name:
        env = engine.setdefault("env", [])
        for entry in env:
            if entry.get("name") == change.env_name:
                entry["value"] = change.value
                return
        env.append({"name": change.env_name, "value": change.value})
        return
    *parents, leaf = change.path.split(".")[1:]
    node = obj["spec"]
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = change.value


def _record(obj: dict[str, Any], applied: list[tuple[Finding, Change]]) -> None:
    """Keep the remediation record on the object: which rule set which value."""
    annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
    try:
        records = json.loads(annotations.get(REMEDIATIONS_ANNOTATION) or "[]")
    except json.JSONDecodeError:
        records = []
    by_key = {(r.get("env") or r.get("field")): r for r in records if isinstance(r, dict)}
    for finding, change in applied:
        key = change.env_name or change.path
        entry = {"rule": finding.rule, "value": change.value}
        entry["env" if change.env_name else "field"] = key
        by_key[key] = entry
    annotations[REMEDIATIONS_ANNOTATION] = json.dumps(list(by_key.values()), sort_keys=True)


@dataclass
class Verdict:
    """What the operator writes into the Validated condition for a stored object."""

    status: Literal["True", "False"]
    reason: str
    message: str
    remediations: list[dict[str, Any]]
    spec: GLMDeploymentSpec | None


def validated_condition(glmd: GLMDeployment, catalogs: Catalogs) -> Verdict:
    """Re-check a stored object already parsed (admission may have been bypassed, or the rules changed since)."""
    findings = evaluate_model(glmd, catalogs)
    if glmd.spec.validation.remediation is Remediation.AUTO and any(_repairable(f) for f in findings):
        # Repairs are edits of the object as stored: the model is written back to that form for them.
        findings = admit(glmd.model_dump(mode="json", by_alias=True, exclude_unset=True), catalogs).findings
    records = [r for r in _records(glmd.metadata.annotations) if "value" in r]
    if any(f.severity == "error" for f in findings):
        return Verdict("False", Reason.RULES_FAILED, Admission(False, findings, {}).rejection(), records, glmd.spec)
    warnings = [f.message for f in findings if f.severity == "warning"]
    parts = [f"{len(records)} setting(s) repaired by admission" if records else "no repairs needed"]
    parts += [f"warning: {w}" for w in warnings]
    return Verdict("True", Reason.RULES_PASSED, "; ".join(parts), records, glmd.spec)


def unparsed_condition(problems: list[Finding], annotations: Mapping[str, Any]) -> Verdict:
    """The verdict on a stored object the model refuses: its schema problems, as admission would list them."""
    records = [r for r in _records(annotations) if "value" in r]
    return Verdict("False", Reason.RULES_FAILED, Admission(False, problems, {}).rejection(), records, None)


def _repairable(finding: Finding) -> bool:
    return finding.severity == "error" and bool(finding.changes) and not finding.blocked_by


def _records(annotations: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = annotations.get(REMEDIATIONS_ANNOTATION)
    try:
        records = json.loads(raw) if raw else []
    except json.JSONDecodeError:
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []

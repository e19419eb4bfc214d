"""The committed generated files, each with the function that produces it from its one source."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from glm_operator.api.crd import render_crd_yaml, render_image_crd_yaml
from glm_operator.catalog.images import load_images
from glm_operator.render.alerts import RULE_TEMPLATE, RULES_FILE, render_prometheus_rule_template, render_rules_file
from glm_operator.render.chart_schema import render_values_schema, values_table
from glm_operator.render.dockerfile import BAKE_FILE, dockerfile_path, render_bake, render_dockerfile
from glm_operator.rules.docs import render_rules_md

CHART = Path("charts/glmops")

_CHART_README_HEAD = """# glmops Helm chart

Installs the glmops operator and the GLMDeployment CRD. Generated from the comments in
`values.yaml` by `glmctl generate`; do not edit by hand.

```sh
helm install glmops charts/glmops --namespace glmops-system --create-namespace
```

## Values

"""


def _patches_md(_root: Path) -> str:
    # The plugin's registry is the one source; it is installed beside the operator in the dev venv only.
    from glmops_vllm_patches.docs import render_registry_md

    return render_registry_md()


def _values(root: Path) -> str:
    return (root / CHART / "values.yaml").read_text()


GENERATED: dict[Path, Callable[[Path], str]] = {
    Path("crds/glmops.dev_glmdeployments.yaml"): lambda _root: render_crd_yaml(),
    CHART / "crds/glmops.dev_glmdeployments.yaml": lambda _root: render_crd_yaml(),
    Path("crds/glmops.dev_glmimages.yaml"): lambda _root: render_image_crd_yaml(),
    CHART / "crds/glmops.dev_glmimages.yaml": lambda _root: render_image_crd_yaml(),
    CHART / "values.schema.json": lambda root: render_values_schema(_values(root)),
    CHART / "README.md": lambda root: _CHART_README_HEAD + values_table(_values(root)),
    Path(RULES_FILE): lambda root: render_rules_file(_values(root)),
    Path(RULE_TEMPLATE): lambda _root: render_prometheus_rule_template(),
    Path("docs/rules.md"): lambda _root: render_rules_md(),
    Path("docs/patches.md"): _patches_md,
    Path(dockerfile_path("cuda")): lambda _root: render_dockerfile("cuda"),
    Path(dockerfile_path("rocm")): lambda _root: render_dockerfile("rocm"),
    Path(BAKE_FILE): lambda _root: render_bake(load_images()),
}


def stale_files(root: Path) -> list[Path]:
    """Generated files whose committed text differs from a fresh generation."""
    return [p for p, make in GENERATED.items() if not (root / p).is_file() or (root / p).read_text() != make(root)]


def write_all(root: Path) -> list[Path]:
    written = []
    for path, make in GENERATED.items():
        text = make(root)
        target = root / path
        if not target.is_file() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            written.append(path)
    return written

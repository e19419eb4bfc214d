"""The committed generated files, each with the function that produces it from its one source."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from glm_operator import __version__
from glm_operator.api.crd import render_crd_yaml, render_image_crd_yaml
from glm_operator.catalog.images import VERSIONS_PATH, load_images, render_versions_yaml
from glm_operator.render.alerts import RULE_TEMPLATE, RULES_FILE, render_prometheus_rule_template, render_rules_file
from glm_operator.render.chart_schema import render_values_schema, values_table
from glm_operator.render.dockerfile import BAKE_FILE, dockerfile_path, render_bake, render_dockerfile
from glm_operator.rules.docs import render_rules_md

CHART = Path("charts/glmops")

_CHART_README_HEAD = """# glmops Helm chart

Installs the glmops operator, the GLMDeployment and GLMImage CRDs, and the admission webhooks that refuse or
repair a GLMDeployment hitting a known vLLM issue. This file is generated from the comments in `values.yaml` by
`glmctl generate`; do not edit it by hand.

## Prerequisites

- Kubernetes 1.30 or later (the pod's `preStop` sleep action), Helm 3.8 or later (OCI charts).
- The LeaderWorkerSet CRD (`leaderworkerset.x-k8s.io`) for multi-node GLMDeployments.
- Optional: cert-manager with its CA injector (`webhook.certManager.enabled`); the prometheus-operator CRDs
  (`monitoring.serviceMonitor.enabled`, `monitoring.prometheusRule.enabled`).

## Install

From a checkout, from the chart package of a release (`make release` builds `glmops-<version>.tgz`), or from the
OCI registry a release is pushed to (docs/releasing.md: `helm push` to `oci://<registry>/charts`; the project's
releases go to `oci://ghcr.io/glmops/charts`):

```sh
helm install glmops charts/glmops --namespace glmops-system --create-namespace
helm install glmops dist/release/@VERSION@/glmops-@VERSION@.tgz --namespace glmops-system --create-namespace
helm install glmops oci://ghcr.io/glmops/charts/glmops --version @VERSION@ --namespace glmops-system --create-namespace
helm test glmops --namespace glmops-system   # the validating webhook refuses a broken GLMDeployment
```

The operator image is `image.repository:<appVersion>`; a release pushes it there (`ghcr.io/glmops/operator` for the
project's releases). From a private registry, push the release's image archive to it and set `image.repository`
(or `image.digest`) and `imagePullSecrets`.

Each release owns its own MutatingWebhookConfiguration and ValidatingWebhookConfiguration, named
`<release fullname>-<namespace>`; the operator never creates or deletes them, and only fills their `caBundle` when
it generates the certificate (docs/webhooks.md: certificates, rotation, readiness).

## Upgrade

Helm installs the CRDs in `crds/` once and never upgrades them. Apply the CRDs of the new version first, then
upgrade the release:

```sh
helm pull oci://ghcr.io/glmops/charts/glmops --version <new> --untar --untardir /tmp/glmops-chart
kubectl apply --server-side --force-conflicts -f /tmp/glmops-chart/glmops/crds/
helm upgrade glmops oci://ghcr.io/glmops/charts/glmops --version <new> --namespace glmops-system --reuse-values
```

The generated webhook certificate (Secret `<fullname>-webhook-cert`) is kept across upgrades. Replicas roll one at a
time (`maxUnavailable: 0`); a replica is in the webhook Service only once its webhook server answers.

## Uninstall

```sh
helm uninstall glmops --namespace glmops-system
```

Removed: the operator, its RBAC, the webhook configurations and Service. Kept: the CRDs and so every
GLMDeployment and what it runs (delete them first, or `kubectl delete crd glmdeployments.glmops.dev
glmimages.glmops.dev` to remove them all), and the generated certificate Secret `<fullname>-webhook-cert`, which the
operator created (`kubectl -n glmops-system delete secret <fullname>-webhook-cert`).

## Values

"""


PROOF = Path("images/vllm-patches/proof")


def _patches_md(root: Path) -> str:
    # The plugin's registry is the one source; it is installed beside the operator in the dev venv only. The real-kernel
    # proof's figures come only from its committed result files.
    from glmops_vllm_patches.docs import render_proof_md, render_registry_md

    results = [json.loads(p.read_text()) for p in sorted((root / PROOF / "results").glob("*.json"))]
    partial = [json.loads(p.read_text()) for p in sorted((root / PROOF / "results" / "pp1-one-gpu").glob("*.json"))]
    wheels = [line.split("#")[0].strip() for line in (root / PROOF / "requirements-gpu.txt").read_text().splitlines()]
    return render_registry_md() + render_proof_md(results, [w for w in wheels if w], partial)


def _versions_yaml(_root: Path) -> str:
    # The plugin cannot be imported by the operator at run time; its list is copied into the catalog's data here.
    from glmops_vllm_patches.version import PROVEN_VERSIONS

    return render_versions_yaml(PROVEN_VERSIONS)


def _dashboard_json(_root: Path) -> str:
    # Built with grafana-foundation-sdk, a development dependency: the operator never imports the dashboard.
    from glm_operator.render.dashboard import render_dashboard_json

    return render_dashboard_json()


def _chart_readme_head() -> str:
    """The README's fixed part, naming this version's chart package and OCI tag."""
    return _CHART_README_HEAD.replace("@VERSION@", __version__)


def _values(root: Path) -> str:
    return (root / CHART / "values.yaml").read_text()


GENERATED: dict[Path, Callable[[Path], str]] = {
    Path(VERSIONS_PATH): _versions_yaml,  # first: everything below reads the catalog, which reads this file
    Path("crds/glmops.dev_glmdeployments.yaml"): lambda _root: render_crd_yaml(),
    CHART / "crds/glmops.dev_glmdeployments.yaml": lambda _root: render_crd_yaml(),
    Path("crds/glmops.dev_glmimages.yaml"): lambda _root: render_image_crd_yaml(),
    CHART / "crds/glmops.dev_glmimages.yaml": lambda _root: render_image_crd_yaml(),
    CHART / "values.schema.json": lambda root: render_values_schema(_values(root)),
    CHART / "README.md": lambda root: _chart_readme_head() + values_table(_values(root)),
    Path(RULES_FILE): lambda root: render_rules_file(_values(root)),
    Path(RULE_TEMPLATE): lambda _root: render_prometheus_rule_template(),
    CHART / "files/dashboard.json": _dashboard_json,
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
            if path == Path(VERSIONS_PATH):
                load_images.cache_clear()  # the files below are generated from the new list, in this same run
    return written

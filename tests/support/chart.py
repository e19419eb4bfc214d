"""What `helm template` needs to be told about the cluster: the API versions the chart asks the cluster for.

`helm template` cannot ask an API server what it serves, and the chart refuses to render without the
ValidatingAdmissionPolicy it requires (values rbac.writePolicy, docs/rbac.md); the tests render for a cluster that
serves it, as the local control plane does, and as a user of `helm template` is told to pass.
"""

from __future__ import annotations

VAP_API_VERSION = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
TEMPLATE_FLAGS = ("--api-versions", VAP_API_VERSION)

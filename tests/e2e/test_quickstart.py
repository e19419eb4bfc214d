"""docs/quickstart.md as written, on the local control plane with its real node.

Its `sh` blocks are extracted and run in order in one `bash` (so exports carry from block to block, as in the
reader's shell), from the repository root, with the real-node cluster's kubeconfig and its kubectl and helm first
on PATH. The page's own last section lists what differs from a GPU cluster; here is how each difference is made:

- the values block is replaced by this cluster's values (REPLACED below);
- the images block is replaced: nothing is pushed (no registry is reachable), so the images are imported into the
  node's containerd under the names the page pushes: the operator image `make images` built, and a stand-in for
  glmops' patched vLLM image, the operator image with a `vllm` command that runs the simulator (`glmctl sim`) on
  what the operator rendered (STAND_IN_LAUNCHER) — the node has no GPU for vLLM's CUDA image;
- the real node is made the cluster's one GPU node for the test (tests/support/realnode.py `gpu_stand_in`): H200's
  label and eight `nvidia.com/gpu` advertised, its own taint lifted and the kwok nodes cordoned, so both the
  operator and the serving pod land on it as on a one-node GPU cluster. All of it is undone afterwards.

After each block named in PROBES the test adds read-only commands of its own, to prove what the page claims (the
serving pod ran the page's image on the real node and passed its gate) without changing the page's steps.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glm_operator.api.constants import CANARY_CONDITION
from glm_operator.catalog.accelerators import load_accelerators
from glm_operator.catalog.images import load_images
from tests.conftest import ARTIFACTS
from tests.support.cluster import REPO, eventually
from tests.support.realnode import (
    NODE_NAME,
    REAL_NODE_AND_PODMAN,
    TAINT_KEY,
    RealNode,
    built_operator_image,
    gpu_stand_in,
)

pytestmark = [
    *REAL_NODE_AND_PODMAN,
    pytest.mark.timeout(1500),
]

PAGE = REPO / "docs" / "quickstart.md"
REG = "localhost/glmops"
SAMPLE_NAME = "glm53-fp8-h200-tp8"
SAMPLE_NS = "glm"
OPERATOR_NS = "glmops-system"
VERSION = "0.32.0"  # the version samples/baseline-h200-glm53-fp8.yaml pins
ACCELERATOR = load_accelerators().get("H200")
PATCHED_IMAGE = f"{REG}/{load_images().patched_ref('cuda', VERSION).rsplit('/', 1)[-1]}"
SCRIPT_TIMEOUT_S = 1200

# Blocks this cluster cannot run as written, by their first line: why, and what runs instead.
REPLACED = {
    "export REG=registry.example.com/glmops": (
        "this cluster's values: images are imported under localhost/glmops, and nothing checks the credentials",
        f"export REG={REG} REG_USER=glmops REG_PASSWORD=not-used-nothing-is-pulled",
    ),
    "docker buildx bake -f images/docker-bake.json operator": (
        "no registry and no GPU: the test imports the operator image and the simulator stand-in under these names",
        ": images imported by tests/e2e/test_quickstart.py",
    ),
}
# Read-only commands the test runs after a block (by its first line), writing what it asserts on to $PROBES.
PROBES = {
    "kubectl -n glm port-forward": (
        f'kubectl -n {SAMPLE_NS} get pods -l glmops.dev/deployment={SAMPLE_NAME} -o json > "$PROBES/pods.json"\n'
        f'kubectl -n {SAMPLE_NS} get glmd {SAMPLE_NAME} -o json > "$PROBES/glmd.json"'
    ),
}
MARK = "::quickstart block"

# The stand-in's `vllm`: what the operator rendered (`vllm serve MODEL ARGS...`), served by the simulator as the
# patched image of VERSION on H200 would, with that image's patches from the catalog.
STAND_IN_LAUNCHER = textwrap.dedent(
    f'''\
    #!/opt/glmops/bin/python
    """`vllm` of the quickstart test's stand-in image: glmctl sim serving what the operator rendered."""
    import sys

    from glm_operator.catalog.images import load_images
    from glm_operator.cli.main import main

    args = sys.argv[1:]
    port = args[args.index("--port") + 1] if "--port" in args else "8000"
    patches = ",".join(load_images().patches_for("cuda", "{VERSION}"))
    sim = ["sim", "--host", "0.0.0.0", "--port", port, "--gpu", "H200", "--vllm-version", "{VERSION}"]
    sys.exit(main([*sim, "--patches", patches, "--", "vllm", *args]))
    '''
)


def sh_blocks(text: str) -> list[str]:
    """The page's ```sh blocks, in order."""
    return [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```$", text, flags=re.M | re.S)]


def script(blocks: list[str]) -> str:
    """One bash script: each block (or its replacement) after a marker line, the test's probes after their block."""
    parts = ["set -euo pipefail"]
    for i, block in enumerate(blocks, 1):
        first = block.splitlines()[0]
        replaced = next((r for key, (_, r) in REPLACED.items() if first.startswith(key)), None)
        title = re.sub(r"[^A-Za-z0-9 ._/=-]", "", first)[:80]
        parts.append(f"echo '{MARK} {i}: {title}' >&2")
        parts.append(block if replaced is None else replaced)
        parts += [probe for key, probe in PROBES.items() if first.startswith(key)]
    return "\n".join(parts) + "\n"


def test_every_replacement_and_probe_names_exactly_one_block_of_the_page() -> None:
    firsts = [b.splitlines()[0] for b in sh_blocks(PAGE.read_text())]
    assert len(firsts) >= 8, firsts
    for key in [*REPLACED, *PROBES]:
        assert sum(f.startswith(key) for f in firsts) == 1, (key, firsts)


def _stand_in_image(operator_image: str, work: Path) -> Path:
    """The stand-in built FROM the operator image (one layer: the launcher) and saved as an archive for ctr."""
    context = work / "stand-in"
    context.mkdir()
    launcher = context / "vllm"
    launcher.write_text(STAND_IN_LAUNCHER)
    launcher.chmod(0o755)
    (context / "Containerfile").write_text(f"FROM {operator_image}\nCOPY vllm /usr/local/bin/vllm\n")
    archive = work / "stand-in.tar"
    build = f"""
        source hack/podman-env.sh
        podman build --quiet --label dev.glmops.image=quickstart-stand-in --tag {PATCHED_IMAGE} {context} >&2
        podman save --quiet --format docker-archive --output {archive} {PATCHED_IMAGE}
        podman rmi {PATCHED_IMAGE} >/dev/null
    """
    proc = subprocess.run(["bash", "-c", build], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return archive


def _schedulable_nodes(node: RealNode) -> list[str]:
    nodes = node.kubectl.get("nodes")["items"]
    return [n["metadata"]["name"] for n in nodes if not n["spec"].get("unschedulable")]


@pytest.fixture(scope="module")
def one_gpu_node_cluster(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    """The real node as the cluster's only schedulable node, an H200 node, with the page's images imported."""
    real_node.ensure_up()
    kubectl = real_node.kubectl
    _leave_nothing(real_node)  # what an interrupted earlier run left (the page creates its namespaces)
    operator_image, archive = built_operator_image()
    real_node.ctr("images", "import", archive)
    app_version = operator_image.rsplit(":", 1)[1]  # hack/build-images.sh tags it with the chart's appVersion
    real_node.ctr("images", "tag", "--force", operator_image, f"{REG}/operator:{app_version}")
    real_node.ctr("images", "import", str(_stand_in_image(operator_image, tmp_path_factory.mktemp("quickstart"))))
    taints = kubectl.get("node", NODE_NAME)["spec"].get("taints") or []
    others = [n for n in _schedulable_nodes(real_node) if n != NODE_NAME]
    for name in others:
        kubectl.run("cordon", name)
    kubectl.run("taint", "node", NODE_NAME, f"{TAINT_KEY}-")
    try:
        with gpu_stand_in(kubectl, ACCELERATOR):
            yield real_node
    finally:
        _leave_nothing(real_node)
        patch = [{"op": "add", "path": "/spec/taints", "value": taints}]
        kubectl.run("patch", "node", NODE_NAME, "--type=json", "-p", json.dumps(patch), check=False)
        for name in others:
            kubectl.run("uncordon", name, check=False)


def _leave_nothing(node: RealNode) -> None:
    """What the page makes, gone even when it stopped half-way (its clean-up section did not run)."""
    subprocess.run(
        [node.helm, f"--kubeconfig={node.kubectl.kubeconfig}", "uninstall", "glmops", "-n", OPERATOR_NS, "--wait"],
        capture_output=True,
        timeout=180,
        check=False,
    )
    node.kubectl.run("delete", "namespace", SAMPLE_NS, OPERATOR_NS, "--ignore-not-found", "--timeout=120s", check=False)


def _run_page(node: RealNode, probes: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KUBECONFIG": node.kubectl.kubeconfig,
        "PATH": f"{node.bin_dir}:{os.environ['PATH']}",
        "PROBES": str(probes),
    }
    text = script(sh_blocks(PAGE.read_text()))
    out = ARTIFACTS / "quickstart"
    out.mkdir(parents=True, exist_ok=True)
    (out / "script.sh").write_text(text)
    proc = subprocess.run(
        ["bash", "-c", text], cwd=REPO, env=env, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S
    )
    (out / "output.log").write_text(f"{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def _chat_completion(stdout: str) -> dict[str, Any]:
    """The first JSON object in the output with `choices`: curl's answer (it ends without a newline)."""
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", stdout)):
        try:
            found, _ = decoder.raw_decode(stdout, start)
        except ValueError:
            continue
        if isinstance(found, dict) and "choices" in found:
            return found
    raise AssertionError(f"no chat completion in the output:\n{stdout[-4000:]}")


def test_the_quickstart_runs_as_written_from_install_to_a_first_answer_and_clean_up(
    one_gpu_node_cluster: RealNode, tmp_path: Path
) -> None:
    node = one_gpu_node_cluster
    proc = _run_page(node, tmp_path)
    blocks = sh_blocks(PAGE.read_text())
    ran = re.findall(rf"^{re.escape(MARK)} (\d+):", proc.stderr, flags=re.M)
    assert proc.returncode == 0, f"block {ran[-1] if ran else '?'} failed:\n{proc.stderr[-6000:]}"
    assert len(ran) == len(blocks)
    # The first request got an answer from the deployment's Service.
    answer = _chat_completion(proc.stdout)
    assert answer["model"] == "zai-org/GLM-5.3" and answer["choices"][0]["message"]
    # What served it: the page's image on the real node, through the readiness gate, with the deployment Ready.
    pods = json.loads((tmp_path / "pods.json").read_text())["items"]
    assert [p["spec"]["nodeName"] for p in pods] == [NODE_NAME]
    assert pods[0]["spec"]["containers"][0]["image"] == PATCHED_IMAGE
    gate = {c["type"]: c["status"] for c in pods[0]["status"]["conditions"]}
    assert gate[CANARY_CONDITION] == "True" and gate["Ready"] == "True", gate
    glmd = json.loads((tmp_path / "glmd.json").read_text())
    assert glmd["status"]["readyReplicas"] == 1
    # The clean-up section left neither the release nor the namespaces.
    eventually(
        lambda: not node.kubectl.run("get", "namespace", SAMPLE_NS, OPERATOR_NS, check=False).stdout,
        timeout=120,
        what="the page's namespaces gone",
    )

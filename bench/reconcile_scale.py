"""Reconcile scale (issue 16 item 2): N GLMDeployments across namespaces on the fake fleet, operator against floor.

Floor: the same client creates each GLMDeployment and applies, server-side, the objects glmops' pure planner
renders for it (planned before the clock starts, the owner's uid filled in from the create's answer), then
writes the same status. Nothing else runs the logic: it is the API work the operator cannot avoid.
Operator: the operator runs (`kopf run`, webhooks on); the same client creates the same GLMDeployments (through
the webhooks, as users do), and the clock stops when every one is Validated=True and its Deployment exists.
The operator's phase runs first on a fresh cluster (`cluster/down.sh --purge` before), the floor second.

Both phases use the same client pool (`--threads`). Reported: the time of each and their ratio (target <= 3x),
the operator's peak RSS sampled from /proc every 0.5 s (target < 300 MiB), and the API server's
apiserver_request_total by verb and resource, before and after, divided by N, for both phases, plus the same
counted over a settle window after the operator's phase (requests made while nothing changed). The API server cannot
tell its clients apart, so the operator's own requests are also counted inside it (`bench/request_count.py`): the
target is that it reads nothing per GLMDeployment, until done and while nothing changes.
Run: `.venv/bin/python bench/reconcile_scale.py [--objects 1000 --namespaces 20]`. Prints JSON; exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.admission import samples
from bench.harness import GROUP_PATH, REPO, Cluster, Operator, Sampler, counts_delta, emit, log

from glm_operator.planner.deployment import Observed, plan
from glm_operator.planner.stored import parse_stored
from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import admit

UID = "00000000-0000-0000-0000-00000000beef"


def specs(objects: int, namespaces: int, prefix: str) -> list[dict[str, Any]]:
    """Admitted GLMDeployments from the samples, as a user writes them, spread over the namespaces."""
    catalogs = Catalogs.packaged()
    base = [d for d in samples() if admit(copy.deepcopy(d), catalogs).allowed and not admit(d, catalogs).changes]
    out = []
    for i in range(objects):
        doc = copy.deepcopy(base[i % len(base)])
        doc["metadata"] = {"name": f"glmd-{i:04d}", "namespace": f"{prefix}-{i % namespaces:02d}"}
        out.append(doc)
    return out


def rendered(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What the operator would apply and write for `doc` (owner uid left as a placeholder)."""
    catalogs = Catalogs.packaged()
    body = admit(copy.deepcopy(doc), catalogs).patched
    body["metadata"] |= {"uid": UID, "generation": 1}
    outcome = plan(parse_stored(body), Observed(), catalogs)
    return list(outcome.apply), outcome.status_patch()


# Every kind the planner renders (model storage adds the download Job and the shared claim).
PLURALS = {
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "Service": "services",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "ConfigMap": "configmaps",
    "Job": "jobs",
    "PersistentVolumeClaim": "persistentvolumeclaims",
}


def api_path(obj: dict[str, Any]) -> str:
    api_version, kind = obj["apiVersion"], obj["kind"]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    plural = PLURALS[kind]
    return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}/{obj['metadata']['name']}"


def make_namespaces(cluster: Cluster, prefix: str, namespaces: int) -> None:
    names = [f"{prefix}-{i:02d}" for i in range(namespaces)]
    manifest = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifest}))


def run_floor(cluster: Cluster, docs: list[dict[str, Any]], threads: int) -> float:
    work = [(doc, *rendered(doc)) for doc in docs]
    local = threading.local()

    def one(item: tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]) -> None:
        doc, objs, status = item
        s = local.__dict__.setdefault("s", cluster.session())
        ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        r = s.post(f"{cluster.base}{GROUP_PATH}/namespaces/{ns}/glmdeployments", json=doc, timeout=60)
        r.raise_for_status()
        uid = r.json()["metadata"]["uid"]
        for obj in objs:
            body = json.dumps(obj).replace(UID, uid)
            r = s.patch(
                f"{cluster.base}{api_path(obj)}?fieldManager=glmops&force=true",
                data=body,
                headers={"Content-Type": "application/apply-patch+yaml"},
                timeout=60,
            )
            r.raise_for_status()
        r = s.patch(
            f"{cluster.base}{GROUP_PATH}/namespaces/{ns}/glmdeployments/{name}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=60,
        )
        r.raise_for_status()

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, work))
    return time.monotonic() - t0


def create_all(cluster: Cluster, docs: list[dict[str, Any]], threads: int) -> dict[str, int]:
    """Create each object; a create refused for a webhook timeout (504/500) is retried, as a user would, and
    counted. Returns the failed attempts by status code."""
    local = threading.local()
    failures: dict[str, int] = {}
    lock = threading.Lock()

    def one(doc: dict[str, Any]) -> None:
        s = local.__dict__.setdefault("s", cluster.session())
        ns = doc["metadata"]["namespace"]
        for _ in range(10):
            r = s.post(f"{cluster.base}{GROUP_PATH}/namespaces/{ns}/glmdeployments", json=doc, timeout=60)
            if r.status_code in (201, 409):  # 409: an earlier attempt timed out at the client but was stored
                return
            with lock:
                failures[str(r.status_code)] = failures.get(str(r.status_code), 0) + 1
            if r.status_code < 500:
                r.raise_for_status()
        r.raise_for_status()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, docs))
    return failures


def workloads(docs: list[dict[str, Any]]) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """(namespace, name) of each GLMDeployment -> the (kind, name) of the workloads the planner renders for it."""
    return {
        (d["metadata"]["namespace"], d["metadata"]["name"]): {
            (o["kind"], o["metadata"]["name"]) for o in rendered(d)[0] if o["kind"] in ("Deployment", "StatefulSet")
        }
        for d in docs
    }


# The done check's own requests, taken out of the operator's counts: one LIST of each of these per poll.
POLL_LISTS = (
    ("LIST", "glmops.dev", "glmdeployments"),
    ("LIST", "apps", "deployments"),
    ("LIST", "apps", "statefulsets"),
)
polls = 0


def done_count(cluster: Cluster, prefix: str, expected: dict[tuple[str, str], set[tuple[str, str]]]) -> int:
    """GLMDeployments Validated=True whose every rendered workload (Deployment or StatefulSets) exists."""
    global polls
    polls += 1
    s = cluster.session()
    glmds = s.get(f"{cluster.base}{GROUP_PATH}/glmdeployments", timeout=120).json()["items"]
    have: dict[str, set[tuple[str, str]]] = {}
    for kind, plural in (("Deployment", "deployments"), ("StatefulSet", "statefulsets")):
        for w in s.get(f"{cluster.base}/apis/apps/v1/{plural}", timeout=120).json()["items"]:
            have.setdefault(w["metadata"]["namespace"], set()).add((kind, w["metadata"]["name"]))
    done = 0
    for g in glmds:
        meta = g["metadata"]
        if not meta["namespace"].startswith(prefix):
            continue
        conds = {c["type"]: c["status"] for c in (g.get("status") or {}).get("conditions") or []}
        want = expected[(meta["namespace"], meta["name"])]
        if conds.get("Validated") == "True" and want <= have.get(meta["namespace"], set()):
            done += 1
    return done


def per_object(delta: dict[tuple[str, str, str], float], n: int) -> dict[str, float]:
    out = {}
    for (verb, group, res), v in sorted(delta.items()):
        out[f"{verb} {group + '/' if group else ''}{res}"] = round(v / n, 3)
    return out


READ_SLACK = 0.05  # per GLMDeployment: what the floor's run itself varies by, not a read per deployment
READ_RESOURCES = (
    ("glmops.dev", "glmdeployments"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("", "services"),
    ("policy", "poddisruptionbudgets"),
    ("", "configmaps"),
    ("batch", "jobs"),
    ("", "persistentvolumeclaims"),
    ("", "pods"),
)


def read_own(path: Path) -> dict[str, int]:
    from bench.request_count import read

    time.sleep(0.6)  # the operator writes its counts every 0.5 s
    return read(path)


def own_per_object(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    return {k: round((v - before.get(k, 0)) / n, 3) for k, v in sorted(after.items()) if v - before.get(k, 0) > 0}


def repeated_reads(
    floor: dict[tuple[str, str, str], float],
    operator: dict[tuple[str, str, str], float],
    settle: dict[tuple[str, str, str], float],
    n: int,
) -> dict[str, dict[str, float]]:
    """GETs and LISTs per GLMDeployment of the kinds the operator reads, beyond what the floor's phase saw (the
    controllers' and kwok's own); the settle window is compared with nothing, since nothing changes in it."""
    out: dict[str, dict[str, float]] = {"until_done": {}, "while_nothing_changes": {}}
    for verb in ("GET", "LIST"):
        for group, res in READ_RESOURCES:
            key = (verb, group, res)
            name = f"{verb} {group + '/' if group else ''}{res}"
            out["until_done"][name] = round((operator.get(key, 0.0) - floor.get(key, 0.0)) / n, 3)
            out["while_nothing_changes"][name] = round(settle.get(key, 0.0) / n, 3)
    return out


def wait_webhooks(cluster: Cluster, operator: Operator) -> None:
    from bench.admission import wait_for_webhooks

    wait_for_webhooks(cluster, operator)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument(
        "--probe", type=Path, help="run the operator under bench/memory_probe.py, its samples to this file (JSON lines)"
    )
    args = parser.parse_args(argv)
    n = args.objects
    cluster = Cluster.up()
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        cluster.kubectl("delete", kind, "glmops.dev", check=False)  # a previous operator's, if any

    make_namespaces(cluster, "bench-op", args.namespaces)
    own_requests = REPO / ".bench-artifacts" / "reconcile-operator-requests.json"
    operator = Operator(
        cluster, REPO / ".bench-artifacts" / "reconcile-operator.log", probe=args.probe, count_requests=own_requests
    )
    operator.start()
    try:
        wait_webhooks(cluster, operator)
        expected = workloads(specs(n, args.namespaces, "bench-op"))
        with Sampler(operator.pid) as sampler:
            before = cluster.request_counts()
            own_before = read_own(own_requests)
            t0 = time.monotonic()
            create_failures = create_all(cluster, specs(n, args.namespaces, "bench-op"), args.threads)
            created_s = time.monotonic() - t0
            done = 0
            while done < n and time.monotonic() - t0 < args.timeout:
                time.sleep(2)
                done = done_count(cluster, "bench-op", expected)
                log(f"operator: {done}/{n} done after {time.monotonic() - t0:.0f}s")
            operator_s = time.monotonic() - t0
            if args.probe is not None:
                Path(f"{args.probe}.dump").touch()  # the probe records the live objects once everything is done
            at_done = cluster.request_counts()
            own_at_done = read_own(own_requests)
            time.sleep(args.settle)
            settled = cluster.request_counts()
            own_settled = read_own(own_requests)
            peak_at_done = sampler.peak_rss
        final_rss, cpu_s = sampler.samples[-1][1], sampler.samples[-1][2]
    finally:
        operator.stop()
    # The floor runs second, in namespaces of its own, with the operator stopped: deleting the operator's objects
    # first would wait on the namespace controller and kwok for minutes on this machine. The objects left in place
    # add only background work for the controllers to the floor's run (which favours the floor, not the operator).
    make_namespaces(cluster, "bench-floor", args.namespaces)
    floor_before = cluster.request_counts()
    floor_s = run_floor(cluster, specs(n, args.namespaces, "bench-floor"), args.threads)
    floor_counts = counts_delta(floor_before, cluster.request_counts())
    log(f"floor: {floor_s:.1f}s")
    op_counts = counts_delta(before, at_done)
    for key in POLL_LISTS:  # the benchmark's own polling is not the operator's
        op_counts[key] = op_counts.get(key, 0.0) - polls
    settle_counts = counts_delta(at_done, settled)
    ratio = operator_s / floor_s
    owned = (
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("", "services"),
        ("policy", "poddisruptionbudgets"),
        ("", "configmaps"),
        ("batch", "jobs"),
        ("", "persistentvolumeclaims"),
    )
    # Server-side apply is counted under verb APPLY (a PATCH with the apply content type).
    apply_patches = {r: op_counts.get(("APPLY", g, r), 0) / n for g, r in owned}
    result = {
        "bench": "reconcile_scale",
        "command": " ".join(["bench/reconcile_scale.py", *sys.argv[1:]]),
        "objects": n,
        "namespaces": args.namespaces,
        "client_threads": args.threads,
        "floor_s": round(floor_s, 2),
        "operator_s": round(operator_s, 2),
        "operator_creates_s": round(created_s, 2),
        "done": done,
        "create_attempts_failed": create_failures,
        "ratio": round(ratio, 3),
        "operator_peak_rss_mib": round(peak_at_done, 1),
        "operator_rss_after_settle_mib": round(final_rss, 1),
        "operator_cpu_s": round(cpu_s, 1),
        "applies_per_glmdeployment_until_done": {k: round(v, 3) for k, v in apply_patches.items()},
        "requests_per_object": {
            "floor": per_object(floor_counts, n),
            "operator_until_done": per_object(op_counts, n),
            f"operator_settle_{args.settle:.0f}s": per_object(settle_counts, n),
        },
        "targets": {
            "ratio <= 3": ratio <= 3.0,
            "peak RSS < 300 MiB": peak_at_done < 300,
            "all done": done == n,
            "no create refused for a webhook timeout": not create_failures,
        },
    }
    own = {
        "until_done": own_per_object(own_before, own_at_done, n),
        f"next_{args.settle:.0f}s": own_per_object(own_at_done, own_settled, n),
    }
    result["operator_own_requests_per_glmdeployment"] = own
    per_object_kinds = {f"{g}/{r}" if g else r for g, r in READ_RESOURCES}
    own_reads = {
        w: {
            k: v
            for k, v in c.items()
            if k.split()[0] in ("GET", "LIST") and k.split()[1].split("/status")[0] in per_object_kinds
        }
        for w, c in own.items()
    }
    result["operator_own_reads_per_glmdeployment"] = own_reads
    result["targets"]["the operator reads nothing per GLMDeployment (its own GETs and LISTs, counted in it)"] = all(
        v <= READ_SLACK for window in own_reads.values() for v in window.values()
    )
    # What it reads whatever the number of deployments (discovery, the LeaderWorkerSet CRD every 30 s), per second.
    result["operator_own_reads_per_second_operator_wide"] = {
        w: {
            k: round(v * n / seconds, 3)
            for k, v in c.items()
            if k.split()[0] in ("GET", "LIST") and k.split()[1].split("/status")[0] not in per_object_kinds
        }
        for (w, c), seconds in zip(own.items(), (operator_s, args.settle), strict=True)
    }
    repeated = repeated_reads(floor_counts, op_counts, settle_counts, n)
    result["reads_beyond_floor_per_glmdeployment"] = repeated
    # Reported, not a target: the API server counts every client's reads here (the garbage collector GETs an
    # owner it has not seen yet; bench/RESULTS.md), which the operator's own count above tells apart.
    result["bench_polls"] = polls
    result["met"] = all(result["targets"].values())
    emit(result)
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())

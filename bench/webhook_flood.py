"""The webhook's latency for ordinary reviews while it is flooded with large or slow requests, beside its idle latency.

Issue 29 item 3. glmops' webhook server (`GuardedWebhookServer`, on uvloop as `kopf run` runs it) is started in a
process of its own on a loopback port with a certificate made here; its handler decides each review with the
rules engine through `decide`, as `handlers/admission.py` does (kopf's own dispatch around it is left out, the
same for every phase). One client thread sends ordinary reviews (a sample GLMDeployment, CREATE) one after another
over a kept-alive connection, as the API server does, and records each answer's latency, while other threads
flood the server, phase by phase:

- `idle`: nothing else;
- `large-refused`: reviews of 4 MiB of empty objects (the issue's probe), refused by their Content-Length;
- `large-parsed`: reviews just under the size bound (3 MiB: 49,000 empty volumes and a long annotation),
  parsed and decided on the large-review thread (the engine refuses them, listing 100 problems);
- `slow-headers`: connections that send a request line and a header byte a second, never finishing;
- `slow-over-cap`: more of them than the connection cap, so that ordinary reviews meet the cap.

Each phase reports the ordinary reviews' count, p50, p99, their p99 over the idle p99, errors (any answer but 200
or a failed connection) and what the flood got. Run: `PYTHONPATH=operator .venv/bin/python bench/webhook_flood.py
[--seconds 6] [--flooders 4] [--slow 100]`. Prints JSON, and a table on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from bench.harness import emit, log, percentile  # noqa: E402  (the repository is put on the path above)

from glm_operator.k8s.admission_review import MAX_BODY_BYTES  # noqa: E402
from glm_operator.k8s.webhook_limits import ConnectionLimits  # noqa: E402
from glm_operator.render.webhook_certs import generate  # noqa: E402

PHASES = ("idle", "large-refused", "large-parsed", "slow-headers", "slow-over-cap")


def _review(obj: dict[str, Any], uid: str = "0df28fbd-5f5f-4a4f-8e4f-000000000001") -> bytes:
    """An AdmissionReview as kube-apiserver writes one: kind, apiVersion, request with uid first."""
    request = {
        "uid": uid,
        "kind": {"group": "glmops.dev", "version": "v1alpha1", "kind": "GLMDeployment"},
        "resource": {"group": "glmops.dev", "version": "v1alpha1", "resource": "glmdeployments"},
        "name": obj["metadata"]["name"],
        "namespace": "default",
        "operation": "CREATE",
        "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": True,
    }
    return json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}).encode()


def ordinary() -> bytes:
    import yaml  # noqa: PLC0415 (only the client reads samples)

    return _review(yaml.safe_load((REPO / "samples" / "baseline-h200-glm53-fp8.yaml").read_text()))


def empty_objects(size: int) -> bytes:
    """The issue's probe: a review of `size` bytes, its object's volumes all `{}`."""
    count = size // 3
    obj = {"apiVersion": "glmops.dev/v1alpha1", "kind": "GLMDeployment", "metadata": {"name": "flood"}}
    head = _review({**obj, "spec": {"pod": {"volumes": []}}})
    return head.replace(b'"volumes": []', b'"volumes": [' + b",".join([b"{}"] * count) + b"]")


def under_the_bound() -> bytes:
    """A review just under MAX_BODY_BYTES that the screen lets through: 49,000 volumes and a long annotation."""
    obj = {
        "apiVersion": "glmops.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": "flood", "annotations": {"note": ""}},
        "spec": {"model": {"name": "zai-org/GLM-5.3"}, "pod": {"volumes": [{}] * 49_000}},
    }
    body = _review(obj)
    return body.replace(b'"note": ""', b'"note": "' + b"x" * (MAX_BODY_BYTES - len(body) - 1024) + b'"')


# --- the server, in a process of its own ---------------------------------------------------------------------


def serve(certdir: Path) -> None:
    """Run the webhook server on uvloop; print its port; serve until stdin closes."""
    import uvloop  # noqa: PLC0415

    from glm_operator.k8s.webhooks import GuardedWebhookServer, decide  # noqa: PLC0415
    from glm_operator.rules.context import Catalogs  # noqa: PLC0415
    from glm_operator.rules.engine import admit  # noqa: PLC0415

    catalogs = Catalogs.packaged()

    async def handler(review: dict[str, Any], **_: Any) -> dict[str, Any]:
        result = await decide(admit, review["request"]["object"], catalogs)
        response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": result.allowed}
        if not result.allowed:
            response["status"] = {"code": 422, "message": result.rejection()}
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    async def run() -> None:
        server = GuardedWebhookServer(
            addr="127.0.0.1",
            host="127.0.0.1",
            certfile=str(certdir / "tls.crt"),
            pkeyfile=str(certdir / "tls.key"),
            limits=ConnectionLimits(),
        )
        served = server(handler)
        config = await anext(served)
        print(config["url"].rsplit(":", 1)[1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await served.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())


# --- the client ----------------------------------------------------------------------------------------------


class Client:
    def __init__(self, port: int, ca: bytes) -> None:
        self.port = port
        self.context = ssl.create_default_context(cadata=ca.decode())
        self.context.check_hostname = False

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30)

    def post(self, connection: http.client.HTTPSConnection, body: bytes) -> int:
        connection.request("POST", "/glmops-validate", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.getheader("Connection", "").lower() == "close":
            connection.close()
        return response.status


def measure(client: Client, stop: threading.Event, latencies: list[float], errors: collections.Counter[str]) -> None:
    """Ordinary reviews, one after another on a kept-alive connection, until `stop`."""
    body = ordinary()
    connection = client.connection()
    while not stop.is_set():
        started = time.perf_counter()
        try:
            status = client.post(connection, body)
        except (OSError, http.client.HTTPException) as err:
            errors[type(err).__name__] += 1
            connection.close()
            connection = client.connection()
            continue
        if status == 200:
            latencies.append(time.perf_counter() - started)
        else:
            errors[f"HTTP {status}"] += 1
    connection.close()


def flood_large(client: Client, body: bytes, stop: threading.Event, got: collections.Counter[str]) -> None:
    while not stop.is_set():
        connection = client.connection()
        try:
            status = client.post(connection, body)
            got[f"HTTP {status}"] += 1
        except (OSError, http.client.HTTPException) as err:
            got[type(err).__name__] += 1
        finally:
            connection.close()


def flood_slow(client: Client, stop: threading.Event, got: collections.Counter[str]) -> None:
    """A slow client: a request line, then a header byte a second; reconnects when cut off."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", client.port), timeout=30) as raw:
                tls = client.context.wrap_socket(raw, server_hostname="localhost")
                tls.sendall(b"POST /glmops-validate HTTP/1.1\r\nHost: localhost\r\n")
                tls.settimeout(1.0)
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        answer = tls.recv(200)
                        got[answer.split(b"\r\n")[0].decode() or "closed"] += 1
                        time.sleep(0.5)  # as a patient attacker would: a handshake a second, not a spin
                        break
                    tls.sendall(b"X")
        except (OSError, ssl.SSLError) as err:
            got[type(err).__name__] += 1
            time.sleep(0.1)


def phase(client: Client, name: str, seconds: float, flooders: int, slow: int) -> dict[str, Any]:
    stop = threading.Event()
    latencies: list[float] = []
    errors: collections.Counter[str] = collections.Counter()
    got: collections.Counter[str] = collections.Counter()
    threads = []
    if name == "large-refused":
        body = empty_objects(4 * 1024 * 1024)
        threads = [threading.Thread(target=flood_large, args=(client, body, stop, got)) for _ in range(flooders)]
    elif name == "large-parsed":
        body = under_the_bound()
        threads = [threading.Thread(target=flood_large, args=(client, body, stop, got)) for _ in range(flooders)]
    elif name.startswith("slow"):
        count = slow if name == "slow-headers" else ConnectionLimits().max_connections + slow
        threads = [threading.Thread(target=flood_slow, args=(client, stop, got)) for _ in range(count)]
    for thread in threads:
        thread.start()
    time.sleep(1.0 if threads else 0)  # the flood is under way before the first ordinary review
    measurer = threading.Thread(target=measure, args=(client, stop, latencies, errors))
    measurer.start()
    time.sleep(seconds)
    stop.set()
    measurer.join()
    for thread in threads:
        thread.join()
    return {
        "phase": name,
        "flood_clients": len(threads),
        "reviews": len(latencies),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "max_ms": round(max(latencies, default=float("nan")) * 1000, 1),
        "errors": dict(errors),
        "flood_got": dict(got),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=6.0, help="how long each phase measures")
    parser.add_argument("--flooders", type=int, default=4, help="clients sending large reviews at once")
    parser.add_argument("--slow", type=int, default=100, help="slow connections (and this many over the cap)")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    certs = generate(["localhost"], datetime.datetime.now(datetime.UTC))
    with tempfile.TemporaryDirectory(prefix="glmops-bench-") as tmp:
        (Path(tmp) / "tls.crt").write_bytes(certs.tls_cert)
        (Path(tmp) / "tls.key").write_bytes(certs.tls_key)
        env = {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}:{REPO}"}
        server = subprocess.Popen(  # noqa: S603 (this interpreter, this file)
            [sys.executable, __file__, "--serve", tmp], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        try:
            assert server.stdout is not None and server.stdin is not None  # noqa: S101
            client = Client(int(server.stdout.readline()), certs.ca_bundle)
            results = []
            for name in args.phases:
                log(f"phase {name}")
                results.append(phase(client, name, args.seconds, args.flooders, args.slow))
            server.stdin.close()
            server.wait(timeout=30)
        finally:
            if server.poll() is None:
                server.kill()
    idle = next((r["p99_ms"] for r in results if r["phase"] == "idle"), None)
    for result in results:
        result["p99_over_idle_p99"] = round(result["p99_ms"] / idle, 1) if idle else None
    emit({"bench": "webhook_flood", "limits": ConnectionLimits().__dict__, "phases": results})
    for r in results:
        log(
            f"{r['phase']:14} reviews {r['reviews']:5}  p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
            f"x{r['p99_over_idle_p99']}  errors {r['errors']}  flood {r['flood_got']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

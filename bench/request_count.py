"""Count the Kubernetes API requests one process makes, by verb and resource, as the API server would count them.

The API server's own counter (`apiserver_request_total`) has no label for the client, so a GET it counts may be the
operator's or the garbage collector's. This counts inside the operator: both its clients, the Kubernetes client
(urllib3, what `k8s/` uses) and kopf's own (aiohttp: watches, its patches, Events), are wrapped at their request
method, and the totals are written to a JSON file every half second and at exit.

Installed by `sitecustomize` (`install_into(folder, out)` writes one into a folder put first on PYTHONPATH), so the
operator runs unchanged. Verbs as the API server names them: GET of one object, LIST, WATCH, APPLY (a PATCH with the
apply content type), PATCH, POST, PUT, DELETE. Paths that name no resource (discovery, /version) count as `-`.
"""

from __future__ import annotations

import atexit
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


def classify(method: str, url: str, content_type: str | None = None) -> tuple[str, str]:
    """(verb, group/resource[/subresource]) of one request, e.g. ("LIST", "apps/deployments")."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if segments[:1] == ["api"] and len(segments) >= 2:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, rest = segments[1], segments[3:]
    else:
        return method.upper(), "-"
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]  # namespaced: drop namespaces/<ns>; a bare namespaces/<name> is a namespace itself
    if not rest:
        return method.upper(), "-"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    named = len(rest) >= 2
    verb = method.upper()
    if verb == "GET":
        watching = parse_qs(parts.query).get("watch", ["false"])[0] in ("true", "1")
        verb = "WATCH" if watching else ("GET" if named else "LIST")
    elif verb == "PATCH" and content_type and content_type.startswith(APPLY_CONTENT_TYPE):
        verb = "APPLY"
    return verb, f"{group}/{resource}" if group else resource


class Counts:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def add(self, method: str, url: str, content_type: str | None) -> None:
        verb, resource = classify(method, url, content_type)
        with self.lock:
            self.counts[f"{verb} {resource}"] += 1

    def write(self) -> None:
        with self.lock:
            data = dict(self.counts)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        tmp.replace(self.out)


def _header(headers: Any, name: str) -> str | None:
    for key, value in dict(headers or {}).items():
        if str(key).lower() == name:
            return str(value)
    return None


def install(out: Path) -> Counts:
    counts = Counts(out)
    import urllib3

    original_urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        counts.add(method, url, _header(kwargs.get("headers"), "content-type"))
        return original_urlopen(self, method, url, *args, **kwargs)

    urllib3.connectionpool.HTTPConnectionPool.urlopen = urlopen  # type: ignore[method-assign]

    import aiohttp

    original_request = aiohttp.ClientSession._request

    async def request(self: Any, method: str, str_or_url: Any, *args: Any, **kwargs: Any) -> Any:
        url = str(str_or_url)
        params = kwargs.get("params")
        if params:
            url += ("&" if "?" in url else "?") + "&".join(f"{k}={v}" for k, v in dict(params).items())
        counts.add(method, url, _header(kwargs.get("headers"), "content-type"))
        return await original_request(self, method, str_or_url, *args, **kwargs)

    aiohttp.ClientSession._request = request  # type: ignore[method-assign]

    def flush() -> None:
        while True:
            time.sleep(0.5)
            counts.write()

    threading.Thread(target=flush, daemon=True, name="request-count").start()
    atexit.register(counts.write)
    return counts


SITECUSTOMIZE = """import os
from pathlib import Path
from bench.request_count import install
install(Path(os.environ["GLMOPS_BENCH_REQUEST_COUNT"]))
"""


def install_into(folder: Path) -> Path:
    """Write a sitecustomize.py into `folder` that installs the counter (the file it writes: its env variable)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def read(out: Path) -> dict[str, int]:
    """The counts as last written (empty before the first write)."""
    try:
        data: dict[str, int] = json.loads(out.read_text())
    except FileNotFoundError:
        return {}
    return data

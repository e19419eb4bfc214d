"""Run the operator (`kopf run ...`) with a thread that writes where its memory is, one JSON line a second.

For finding what holds the operator's memory, not for the figures of record (the gc walk costs memory and time).
Each line: RSS and anonymous RSS; glibc malloc's totals (`mallinfo2`: in use, free); Python's allocated blocks; every
10 s (and at each new peak) the resident KiB of the process's mappings by shape: the main heap, glibc's per-thread
arenas (64 MiB-aligned), thread stacks, files, and other anonymous mappings (pymalloc's 1 MiB arenas, merged by the
kernel, and large allocations). Every `GLMOPS_PROBE_DUMP_S` seconds (0: never), or when the file named by
`GLMOPS_PROBE_DUMP_REQUEST` appears: live objects by type, coroutines and tasks by function, and the size of the kopf
bodies still reachable. Usage: `python bench/memory_probe.py OUT.jsonl run --standalone -m glm_operator.handlers`
(`reconcile_scale.py --probe OUT.jsonl` runs the benchmark's operator this way).
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import sys
import threading
import time
from typing import Any

MAPPING_SHAPES = ("main heap", "thread arenas", "thread stacks", "files", "other anonymous")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def _status() -> dict[str, int]:
    wanted = {"VmRSS": "rss_kib", "RssAnon": "anon_kib", "Threads": "threads"}
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in wanted:
                out[wanted[key]] = int(value.split()[0])
    return out


def _shape(start: int, size: int, path: str) -> str:
    if path == "[heap]":
        return "main heap"
    if path.startswith("/"):
        return "files"
    if path:
        return "other anonymous"
    if start % (64 << 20) == 0 and size <= 64 << 20:
        return "thread arenas"
    if size in (8 << 20, (8 << 20) + 4096):
        return "thread stacks"
    return "other anonymous"


def mappings() -> dict[str, int]:
    """Resident KiB by mapping shape, from /proc/self/smaps."""
    resident: dict[str, int] = dict.fromkeys(MAPPING_SHAPES, 0)
    shape = ""
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                shape = _shape(start, end - start, parts[5] if len(parts) > 5 else "")
            elif parts and parts[0] == "Rss:" and shape:
                resident[shape] += int(parts[1])
    return resident


def _deep_size(roots: list[Any]) -> int:
    seen: set[int] = set()
    stack, total = list(roots), 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def live_objects() -> dict[str, Any]:
    """What the garbage collector sees: types, coroutines, tasks, and the kopf bodies (and their KiB) still alive."""
    types: collections.Counter[str] = collections.Counter()
    coroutines: collections.Counter[str] = collections.Counter()
    bodies = []
    for obj in gc.get_objects():
        name = type(obj).__qualname__
        types[name] += 1
        if name == "coroutine":
            coroutines[obj.cr_code.co_qualname] += 1
        elif name == "Body" and type(obj).__module__.startswith("kopf"):
            bodies.append(getattr(obj, "_src", None))
    return {
        "types": types.most_common(30),
        "coroutines": coroutines.most_common(20),
        "kopf_bodies": len(bodies),
        "kopf_bodies_kib": _deep_size(bodies) >> 10,
    }


def sample_forever(out_path: str, dump_every: float, dump_request: str) -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    t0 = time.monotonic()
    peak, last_maps, next_dump = 0, 0.0, dump_every or float("inf")
    with open(out_path, "a") as out:
        while True:
            now = time.monotonic() - t0
            info = libc.mallinfo2()
            record: dict[str, Any] = {"t": round(now, 1), **_status()}
            record |= {"malloc_used_kib": info.uordblks >> 10, "malloc_free_kib": info.fordblks >> 10}
            record["python_blocks"] = sys.getallocatedblocks()
            if record["rss_kib"] > peak or now - last_maps >= 10:
                peak, last_maps = max(peak, record["rss_kib"]), now
                record["mappings_kib"] = mappings()
            if now >= next_dump or os.path.exists(dump_request):
                next_dump = now + (dump_every or float("inf"))
                if os.path.exists(dump_request):
                    os.unlink(dump_request)
                record["live"] = live_objects()
            out.write(json.dumps(record) + "\n")
            out.flush()
            time.sleep(1)


def main() -> None:
    out_path, kopf_args = sys.argv[1], sys.argv[2:]
    dump_every = float(os.environ.get("GLMOPS_PROBE_DUMP_S", "0"))
    dump_request = os.environ.get("GLMOPS_PROBE_DUMP_REQUEST", out_path + ".dump")
    threading.Thread(target=sample_forever, args=(out_path, dump_every, dump_request), daemon=True).start()
    from kopf.cli import main as kopf_main

    sys.argv = ["kopf", *kopf_args]
    kopf_main()


if __name__ == "__main__":
    main()

"""What hostile manifests cost `glmctl validate`: peak memory, time, output size and exit code, one process each.

    python bench/hostile_inputs.py                      # this tree's glmctl
    python bench/hostile_inputs.py --tree /tmp/before   # another checkout (e.g. `git archive REV | tar -x`)

Each file is run under /usr/bin/time in its own process, with a 4 GiB address-space cap so that a regression
cannot take the machine down; a run that hits the cap shows as a failure, not as a figure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HEADER = "apiVersion: glmops.dev/v1alpha1\nkind: GLMDeployment\nmetadata: {name: hostile, namespace: default}\n"
LIMIT_KB = 4 * 1024 * 1024


def alias_bomb(levels: int) -> str:
    lines = ["  l0: &l0 [" + ", ".join(['"lol"'] * 9) + "]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    spec = f"spec:\n  model: {{name: *l{levels - 1}}}\n  accelerator: {{type: H200}}\n"
    return HEADER + "x-anchors:\n" + "\n".join(lines) + "\n" + spec


FILES = {
    "alias bomb, 9^8 strings": lambda: alias_bomb(8),
    "alias bomb, 9^9 strings": lambda: alias_bomb(9),
    "5 MB model name": lambda: HEADER + "spec:\n  model: {name: a/" + "z" * 5_000_000 + "}\n",
    "empty file": lambda: "",
    "separators only": lambda: "---\n---\n",
    "10,000-level nesting": lambda: "a: " + "[" * 10_000 + "]" * 10_000 + "\n",
}


def measure(tree: Path, path: Path) -> tuple[int, int, float, int, str]:
    env = dict(os.environ, PYTHONPATH=f"{tree / 'operator'}:{tree}")
    glmctl = f"{sys.executable} -m glm_operator.cli.main validate {path}"
    cmd = f"ulimit -v {LIMIT_KB}; exec /usr/bin/time -f '%M %e' {glmctl}"
    with tempfile.TemporaryFile() as out:
        done = subprocess.run(["bash", "-c", cmd], env=env, stdout=out, stderr=subprocess.PIPE, timeout=600)
        size = out.seek(0, 2)
    *messages, figures = done.stderr.decode(errors="replace").strip().splitlines()
    rss_kb, wall = figures.split()[-2:]
    first = next((m for m in messages if not m.startswith("Command exited")), "")
    return done.returncode, int(rss_kb), float(wall), size, first[:100]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    print("| file | exit | peak RSS | wall | stdout | stderr (first line) |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in FILES.items():
            path = Path(tmp) / "in.yaml"
            path.write_text(content())
            code, rss_kb, wall, size, first = measure(args.tree, path)
            print(f"| {name} | {code} | {rss_kb / 1024:.0f} MB | {wall:.1f} s | {size:,} B | {first} |")


if __name__ == "__main__":
    main()

"""The least resident memory a forked model process can have: what RSS counts before any model loads.

A process forked from a template inherits the template's anonymous pages; they stay shared
(copy-on-write) but RSS counts every one of them in each process.  So the RSS of a fresh fork of a
template is the floor of a model process's RSS.  Printed for three templates, each forked after
``gc.collect()``, ``malloc_trim`` and ``gc.freeze()`` as the real one does: a bare interpreter, one
that imported only numpy (every Python model needs it), and the real template (the stub's imports).
Then the floor of the 17-model tree, the figure ``run.py`` measures: 17 forks of the real template,
with the engine and the template beside them (their RSS taken from a run of ``run.py``, passed in).

usage: python benchmarks/isolation/fork_floor.py [--engine-mib 88] [--models 17]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "server"))

PROBE = """
import ctypes, gc, os, sys, time
{imports}
gc.collect()
ctypes.CDLL(None).malloc_trim(0)
gc.freeze()
def rollup(pid):
    fields = {{}}
    for line in open(f"/proc/{{pid}}/smaps_rollup").read().splitlines()[1:]:
        key, value = line.split()[:2]
        fields[key.rstrip(":")] = int(value) / 1024
    return fields
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(read, 1)
    os._exit(0)
time.sleep(0.2)
child, parent = rollup(pid), rollup(os.getpid())
os.write(write, b"x")
os.waitpid(pid, 0)
print(parent["Rss"], parent["Anonymous"], child["Rss"], child["Anonymous"], child["Pss"])
"""

TEMPLATES = {
    "bare interpreter": "",
    "numpy only": "import numpy",
    "the real template": "from naiad.backends.python import stub",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine-mib", type=float, default=88.0, help="the engine's RSS (run.py)")
    parser.add_argument("--models", type=int, default=17)
    args = parser.parse_args()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [sys.path[0], os.environ.get("PYTHONPATH")]))
    )
    floors: dict[str, tuple[float, float]] = {}
    print("MiB                    template RSS (anon)   fresh fork RSS (anon)   fork PSS")
    for name, imports in TEMPLATES.items():
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(imports=imports)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        parent_rss, parent_anon, child_rss, child_anon, child_pss = (float(value) for value in out)
        floors[name] = parent_rss, child_rss
        print(
            f"  {name:<20} {parent_rss:7.1f} ({parent_anon:5.1f})        {child_rss:7.1f} ({child_anon:5.1f})"
            f"       {child_pss:6.1f}"
        )
    for name in ("numpy only", "the real template"):
        template, fork = floors[name]
        total = args.engine_mib + template + args.models * fork
        print(
            f"  floor of the tree, {name}: engine {args.engine_mib:.0f} + template {template:.1f} + "
            f"{args.models} x {fork:.1f} = {total:.0f} MiB RSS (before any model is loaded)"
        )


if __name__ == "__main__":
    main()

"""What fault isolation costs: Naiad with model processes, Naiad with the model inside the engine, and
real Triton 2.51, side by side in one run.

1. Start-up: a repository of 17 single-instance Python models (copies of the reference ``add_sub``):
   seconds from starting the server to ``/v2/health/ready`` answering 200, and the memory of the whole
   process tree once ready: the sum of RSS (pages shared between processes counted in each), of PSS
   (shared pages split between the processes that share them), and the pages the tree maps counted
   once each (the union of its resident sets: what the tree really holds).
2. Per core: HTTP ``add_sub`` (the reference JSON body) at 16 connections, with the CPU time the
   server's whole process tree spent (user + system, from ``/proc``) divided by the requests it
   answered: requests per CPU-second is the throughput of one core, and stays meaningful on a shared
   machine, where a pinned core also runs other people's work.  Then one connection: p50 latency.
   With ``--pin`` each server (and its model processes) is also pinned to one core with ``taskset``
   and wrk to another; with ``--instances N`` the model has N instances (``instance_group`` count)
   in every server, and with ``--batching`` ``max_batch_size: 8`` and ``dynamic_batching`` (requests
   of one row, ``[1, 4]``).  Interleaved rounds; medians and ratios.

usage: python benchmarks/isolation/run.py [--duration 8] [--rounds 3] [--skip-startup] [--pin]
       [--instances 1] [--batching]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.common.references import SHARED, Served, naiad, triton
from benchmarks.common.scratch import scratch
from benchmarks.common.wrk import ADD_SUB_SCRIPT, wrk

MODELS = 17
IN_THE_ENGINE = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }\n'
BATCHING = "max_batch_size: 8\ndynamic_batching { }\n"
#: ``--batching``'s request: the reference body with a batch dimension.
BATCHED_BODY = (
    '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]},'
    '{"name":"INPUT1","datatype":"FP32","shape":[1,4],"data":[1,1,1,1]}]}'
)


def repository(count: int, in_engine: bool, instances: int = 1, batching: bool = False) -> Path:
    """``count`` copies of the reference ``add_sub`` (the first keeps its name), ``instances`` instances
    of each, batched dynamically with ``batching``."""
    folder = scratch("bench-isolation-")
    for index in range(count):
        name = "add_sub" if index == 0 else f"add_sub_{index}"
        target = folder / name
        shutil.copytree(SHARED / "models" / "add_sub", target)
        config = (target / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{name}"')
        if instances != 1:
            one = "instance_group [{ kind: KIND_CPU }]"
            assert one in config
            config = config.replace(one, f"instance_group [{{ count: {instances} kind: KIND_CPU }}]")
        config += (BATCHING if batching else "") + (IN_THE_ENGINE if in_engine else "")
        (target / "config.pbtxt").write_text(config)
    return folder


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                queue += [int(child) for child in children]
        except OSError:
            continue
    return found


def memory_mib(pid: int) -> tuple[float, float, float | None, int]:
    """Summed RSS and PSS (MiB) of the process tree under ``pid``, its resident pages each counted once
    (:func:`distinct_mib`), and how many processes it has."""
    rss = pss = 0
    pids = tree(pid)
    for member in pids:
        try:
            for line in Path(f"/proc/{member}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, pss / 1024, distinct_mib(pids), len(pids)


_PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT = np.uint64(1 << 63)
_FRAME = np.uint64((1 << 55) - 1)


def distinct_mib(pids: list[int]) -> float | None:
    """The memory the processes hold, each physical page once however many of them map it (the union of
    their resident sets, from the page frame numbers in ``/proc/<pid>/pagemap``): a page a forked
    process shares with its parent counts in the RSS of both, here once, as the kernel holds it.
    Pages of files that processes outside the tree also map (the C library) count whole, where PSS
    splits them with those processes.  None where frame numbers are hidden (they need
    CAP_SYS_ADMIN)."""
    frames: list[np.ndarray] = []
    for pid in pids:
        try:
            spans = []
            for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
                fields = line.split()
                if "-" in fields[0] and not fields[0].endswith(":"):
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                elif fields[0] == "Rss:" and int(fields[1]) > 0:
                    spans.append((start, end))
            with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
                for start, end in spans:
                    pagemap.seek(start // _PAGE * 8)
                    entries = np.frombuffer(pagemap.read((end - start) // _PAGE * 8), dtype=np.uint64)
                    frames.append(entries[(entries & _PRESENT) != 0] & _FRAME)
        except OSError:
            continue
    found = np.unique(np.concatenate(frames)) if frames else np.empty(0, np.uint64)
    if found.size and not found.any():
        return None
    return found.size * _PAGE / 2**20


def pinned(server: Served, cpu: int) -> Served:
    server.command = ["taskset", "-c", str(cpu), *server.command]
    return server


_CGROUPS = Path("/sys/fs/cgroup/memory")


class Charged:
    """A memory cgroup (v1) that the server's process tree runs in: what the kernel charges the tree,
    each page once, the figure a container's limit, its OOM kill and the kubelet's working set are
    computed from.  The page cache is dropped before the server starts, so that the files each server
    reads (its libraries, its models) are charged to it and not to whoever read them first."""

    def __init__(self, name: str) -> None:
        self.path = _CGROUPS / f"naiad-bench-{name.replace(' ', '-')}-{os.getpid()}"

    @staticmethod
    def available() -> bool:
        return os.access(_CGROUPS, os.W_OK) and os.access("/proc/sys/vm/drop_caches", os.W_OK)

    def around(self, server: Served) -> Served:
        self.path.mkdir()
        join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        server.command = ["sh", "-c", join, str(self.path), *server.command]
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return server

    def read(self) -> tuple[float, float, float, float]:
        """(charged, working set, anonymous, page cache incl. shared memory) in MiB."""
        usage = int((self.path / "memory.usage_in_bytes").read_text())
        stat = dict(line.split() for line in (self.path / "memory.stat").read_text().splitlines())
        working = usage - int(stat["total_inactive_file"])
        return tuple(x / 2**20 for x in (usage, working, int(stat["total_rss"]), int(stat["total_cache"])))  # type: ignore[return-value]

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:  # the last processes are still exiting
                time.sleep(0.1)


def startup(name: str, server: Served) -> None:
    charged = Charged(name) if Charged.available() else None
    if charged is not None:
        charged.around(server)
    started = time.monotonic()
    try:
        with server:
            ready = time.monotonic() - started
            time.sleep(1.0)  # let the last model processes settle
            assert server.process is not None
            rss, pss, distinct, processes = memory_mib(server.process.pid)
            cgroup = charged.read() if charged is not None else None
    finally:
        if charged is not None:
            charged.remove()
    held = f"{distinct:7.1f} MiB" if distinct is not None else "    n/a    "
    print(
        f"  {name:<22} ready {ready:6.2f} s   RSS {rss:7.1f} MiB   PSS {pss:7.1f} MiB   "
        f"pages held once {held}   {processes} processes"
    )
    if cgroup is not None:
        usage, working, anonymous, cache = cgroup
        print(
            f"  {'':<22} cgroup: charged {usage:6.1f} MiB, working set {working:6.1f} MiB "
            f"(anonymous {anonymous:6.1f}, page cache and shared memory {cache:6.1f})"
        )


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the live members of the process tree under ``pid``."""
    total = 0
    for member in tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / _TICK


def load(
    server: Served, duration: int, client_cpu: int | None, script: Path, shape: list[int]
) -> tuple[float, float, float, float, float, float]:
    """(req/s at 16 connections, CPU µs per request meanwhile, p50 ms at 1 connection, gRPC p50 ms
    of one client calling in a loop, and the server's CPU meanwhile in cores for each of the last
    two: what watching for the next request costs while one client calls); wrk sends ``script``'s
    body, gRPC inputs of ``shape``."""
    url = f"{server.http_url}/v2/models/add_sub/infer"
    assert server.process is not None
    pid = server.process.pid
    before = cpu_seconds(pid)
    busy = _wrk_on(client_cpu, url, duration, 16, script)
    spent = cpu_seconds(pid) - before
    before, started = cpu_seconds(pid), time.monotonic()
    idle = _wrk_on(client_cpu, url, duration, 1, script)
    idle_cores = (cpu_seconds(pid) - before) / (time.monotonic() - started)
    before, started = cpu_seconds(pid), time.monotonic()
    grpc = grpc_p50(server, duration, shape)
    grpc_cores = (cpu_seconds(pid) - before) / (time.monotonic() - started)
    return busy["rps"], spent / (busy["rps"] * duration) * 1e6, idle["p50"], grpc, idle_cores, grpc_cores


def grpc_p50(server: Served, duration: int, shape: list[int]) -> float:
    """p50 (ms) of sequential gRPC ``add_sub`` calls with tritonclient for ``duration`` seconds."""
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, shape, "FP32")
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(shape))
        inputs.append(tensor)
    times = []
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
        for _ in range(200):  # warm-up
            client.infer("add_sub", inputs)
        end = time.monotonic() + duration
        while time.monotonic() < end:
            started = time.perf_counter()
            client.infer("add_sub", inputs)
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def _wrk_on(cpu: int | None, url: str, duration: int, connections: int, script: Path) -> dict[str, float]:
    if cpu is None:
        return wrk(url, script, duration, connections)
    os.sched_setaffinity(0, {cpu})  # wrk inherits it
    try:
        return wrk(url, script, duration, connections)
    finally:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument(
        "--pin", action="store_true", help="pin each server to --server-cpu, wrk to --client-cpu"
    )
    parser.add_argument("--instances", type=int, default=1, help="instances of add_sub in the load part")
    parser.add_argument("--batching", action="store_true", help="add_sub batched dynamically (load part)")
    parser.add_argument("--server-cpu", type=int, default=1)
    parser.add_argument("--client-cpu", type=int, default=0)
    args = parser.parse_args()
    print(f"load before: {_uptime()}")

    if not args.skip_startup:
        print(f"start-up with {MODELS} single-instance Python models (add_sub copies):")
        startup("naiad model processes", naiad(repository(MODELS, False)))
        startup("naiad in the engine", naiad(repository(MODELS, True)))
        startup("triton 2.51", triton(repository(MODELS, False)))

    servers = {
        "naiad model processes": naiad(repository(1, False, args.instances, args.batching)),
        "naiad in the engine": naiad(repository(1, True, args.instances, args.batching)),
        "triton 2.51": triton(repository(1, False, args.instances, args.batching)),
    }
    script, shape = ADD_SUB_SCRIPT, [4]
    if args.batching:
        script, shape = scratch("bench-isolation-") / "batched.lua", [1, 4]
        headers = 'wrk.headers["Content-Type"] = "application/json"'
        script.write_text(f"wrk.method = \"POST\"\n{headers}\nwrk.body = '{BATCHED_BODY}'\n")
    client_cpu = args.client_cpu if args.pin else None
    if args.pin:
        for server in servers.values():
            pinned(server, args.server_cpu)
    results: dict[str, list[tuple[float, float, float, float, float, float]]] = {name: [] for name in servers}
    started: list[Served] = []
    try:
        for server in servers.values():
            started.append(server.__enter__())
        for server in started:  # warm-up
            _wrk_on(client_cpu, f"{server.http_url}/v2/models/add_sub/infer", 2, 16, script)
        for _ in range(args.rounds):
            for name, server in servers.items():
                results[name].append(load(server, args.duration, client_cpu, script, shape))
    finally:
        for server in started:
            server.__exit__(None, None, None)

    where = (
        f"servers pinned to cpu {args.server_cpu}, wrk to cpu {args.client_cpu}" if args.pin else "unpinned"
    )
    instances = f", {args.instances} instances" if args.instances != 1 else ""
    instances += ", dynamic batching" if args.batching else ""
    print(f"HTTP add_sub ({where}{instances}), medians of {args.rounds} rounds:")
    medians = {
        name: [statistics.median(row[i] for row in rows) for i in range(6)] for name, rows in results.items()
    }
    triton_cpu = medians["triton 2.51"][1]
    _, _, engine_p50, engine_grpc, _, _ = medians["naiad in the engine"]
    for name, (rps, cpu_us, p50, grpc_ms, http_cores, grpc_cores) in medians.items():
        print(
            f"  {name:<22} c=16 {rps:6.0f} req/s, {cpu_us:4.0f} CPU-us/req = {1e6 / cpu_us:5.0f} per core "
            f"({triton_cpu / cpu_us:4.2f}x triton) | c=1 p50 HTTP {p50 * 1000:4.0f} us "
            f"({(p50 - engine_p50) * 1000:+4.0f}), gRPC {grpc_ms * 1000:4.0f} us "
            f"({(grpc_ms - engine_grpc) * 1000:+4.0f}) | c=1 server CPU HTTP {http_cores:.2f}, "
            f"gRPC {grpc_cores:.2f} cores"
        )
    print("  (+N: microseconds more than naiad in the engine)")
    print(f"load after: {_uptime()}")


if __name__ == "__main__":
    main()

"""More models than memory (issue #25): 200 models whose total is 3x the fleet's memory budget, served by
3 server pods on the simulated cluster, under Zipf-distributed requests.

One run measures, side by side:

* **reference**: one ``naiad serve`` holding every model (``--model-control-mode=none``, no budget), the
  full request mix.  Its repository index gives each model's measured footprint (the median of its
  kind); their total sets the pods' budget (total / ratio / pods: the models are ``--ratio`` times the
  fleet's budget).
* **cluster**: KMock + the operator (its own process) + the simulated kubelet of tests/operator
  (real ``naiad serve`` pod processes), the repository synced from SeaweedFS S3, one InferenceService
  of 3 replicas listing all 200 models with ``placement: onDemand`` and ``--model-memory-budget``.
  The operator writes the peers file, so a pod forwards requests for a model another pod holds.
  The three phases run in interleaved rounds (``--rounds``): reference, warm-only, mixed.
  1. *warm-only*: the hottest models that fit half the fleet's budget are loaded first, then requests
     Zipf-distributed over those alone (no loads should happen: the run prints how many did);
  2. *mixed*: the full Zipf mix over all 200 models, loads and evictions included.

A request is **cold** when a load of its model finished (on any pod, from the pods' logs) between the
moment it was sent and its answer: it waited for that load (its own, or one it shared).  Every other
request is **warm**.  A warm request is **local** when the pod that received it held the model all the
while it was outstanding (from that pod's own log: loads finished, evictions begun, unloads finished),
**forwarded** when it did not (it went on to a peer: one more hop), and **unknown** when that pod began
or finished evicting the model meanwhile.  Local warm requests are the ones that say whether other
models' loads slow warm requests down; the run also shows them beside what the pods were doing (a load
or eviction on their own pod, on others only, on none) and by backend.  Hit rate, loads and evictions
come from the pods' ``naiad_*`` metrics (deltas over the phase).  Latencies are client-side, from
tritonclient processes (half HTTP, half gRPC) each pacing itself to a fixed rate and spreading requests
over the pods round robin, as a Service would.

usage: python benchmarks/density/run.py [--rate 60] [--clients 6] [--rounds 4] [--reference-secs 15]
                                        [--warm-secs 15] [--mixed-secs 40] [--zipf 1.1] [--ratio 3]
                                        [--pods 3] [--min-residency 0] [--eviction-policy gdsf]
                                        [--hot-fraction 0.5] [--server-arg=ARG ...]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common.references import Served, naiad  # noqa: E402
from benchmarks.density.load import Client, Record, drive, zipf_weights  # noqa: E402
from benchmarks.density.models import DEFAULT_MIX, Kind, write_repository  # noqa: E402
from tests.operator.cluster import NS, Api, FakeCluster, ServerPod  # noqa: E402
from tests.operator.harness import BUCKET, create_s3_repository  # noqa: E402
from tests.support.kmock_k8s import ApiServer  # noqa: E402
from tests.support.object_store import SeaweedS3, upload_tree  # noqa: E402
from tests.support.server import free_port  # noqa: E402

GROUP = f"/apis/serving.naiad.dev/v1alpha1/namespaces/{NS}"
SERVICE = "density"
MIB = 1 << 20


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def footprints(http_url: str) -> dict[str, int]:
    """model -> memory_bytes of its READY version, from the server's own index."""
    return {
        e["name"]: int(e.get("memory_bytes") or 0)
        for e in post(f"{http_url}/v2/repository/index", {"memory_bytes": True})
        if e.get("state") == "READY"
    }


def infer(http_url: str, model: str) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}
    post(f"{http_url}/v2/models/{model}/infer", body)


# ---- what the servers say: metrics and load events -------------------------------------------------

_SAMPLE = re.compile(r"^(naiad_[a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$")


def scrape(metrics_ports: list[int]) -> Counter[str]:
    """Sums over the pods of the counters this benchmark reads, keyed ``name`` or ``name{label=value}``;
    the forwarded counter also per pod (``name{pod=index}``, in ``metrics_ports``' order)."""
    totals: Counter[str] = Counter()
    for pod, port in enumerate(metrics_ports):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            text = r.read().decode()
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if not match:
                continue
            name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
            if name == "naiad_on_demand_requests_total":
                totals[f"{name}{{{_label(labels, 'result')}}}"] += value
            elif name == "naiad_model_loads_total":
                totals[f"{name}{{{_label(labels, 'reason')}}}"] += value
            elif name == "naiad_model_evictions_total":
                totals[name] += value
            elif name == "naiad_forwarded_requests_total":
                totals[name] += value
                totals[f"{name}{{pod={pod}}}"] += value
    return totals


def _label(labels: str, key: str) -> str:
    match = re.search(rf'{key}="([^"]*)"', labels)
    return f"{key}={match.group(1) if match else ''}"


#: A pod finished loading a model, began evicting one (it stops serving it then), or finished unloading.
_LOADED = re.compile(
    r"^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) .*(successfully loaded|evicting model|successfully unloaded)"
    r" '([^']+)'"
)

_WHAT = {"successfully loaded": "loaded", "evicting model": "evicting", "successfully unloaded": "unloaded"}


def _events(log: Path) -> list[tuple[float, str, str]]:
    """(wall-clock time, what: loaded | evicting | unloaded, model) of each load a pod finished, each
    eviction it began and each unload it finished, in order (glog lines carry local time)."""
    year = datetime.now().year
    found = []
    for line in log.read_text(errors="replace").splitlines():
        match = _LOADED.match(line)
        if match:
            mo, d, h, mi, s, us, what, model = match.groups()
            when = datetime(year, int(mo), int(d), int(h), int(mi), int(s), int(us.ljust(6, "0")[:6]))
            found.append((when.timestamp(), _WHAT[what], model))
    return found


def load_events(logs: list[Path]) -> dict[str, list[float]]:
    """model -> wall-clock times at which a pod finished loading it."""
    events: dict[str, list[float]] = defaultdict(list)
    for log in logs:
        for when, what, model in _events(log):
            if what == "loaded":
                events[model].append(when)
    return {model: sorted(times) for model, times in events.items()}


#: (pod index, model) -> (times, held after each): when the pod finished loading, began evicting (it
#: stops serving the model then) or finished unloading it.
Residency = dict[tuple[int, str], tuple[list[float], list[bool]]]


def residency(logs: list[Path]) -> Residency:
    """Which pod held which model when, from each pod's own log (``logs`` in the clients' order of
    servers)."""
    held: Residency = {}
    for index, log in enumerate(logs):
        for when, what, model in _events(log):
            times, states = held.setdefault((index, model), ([], []))
            times.append(when)
            states.append(what == "loaded")
    return held


def split_cold(records: list[Record], loads: dict[str, list[float]]) -> tuple[list[Record], list[Record]]:
    """The successful warm and cold requests (cold: a load of its model finished, on any pod, while
    it was outstanding)."""
    warm: list[Record] = []
    cold: list[Record] = []
    for record in records:
        model, sent, answered, error, _ = record
        if error:
            continue
        times = loads.get(model, [])
        i = bisect.bisect_left(times, sent)
        (cold if i < len(times) and times[i] <= answered else warm).append(record)
    return warm, cold


def held_through(held: Residency, pod: int, model: str, sent: float, answered: float) -> bool | None:
    """Whether ``pod`` held ``model`` from ``sent`` to ``answered``; ``None`` when its state changed in
    between: the request reached the pod at some unknown moment of that span, so it may have found
    either state."""
    times, states = held.get((pod, model), ([], []))
    i = bisect.bisect_right(times, sent)
    state = bool(i and states[i - 1])
    if any(changed != state for changed in states[i : bisect.bisect_right(times, answered)]):
        return None
    return state


def split_local(warm: list[Record], held: Residency) -> tuple[list[Record], list[Record], list[Record]]:
    """Warm requests the receiving pod answered itself (it held the model while the request was
    outstanding), those it forwarded to a peer (it did not hold it: never loaded there, or unloaded
    since), and those whose pod began or finished evicting the model meanwhile (unknown, not guessed).
    Only local requests say whether other models' loads slow a warm request down; forwarded ones also
    pay a hop."""
    local: list[Record] = []
    forwarded: list[Record] = []
    unknown: list[Record] = []
    for record in warm:
        model, sent, answered, _, pod = record
        state = held_through(held, pod, model, sent, answered)
        (unknown if state is None else local if state else forwarded).append(record)
    return local, forwarded, unknown


#: Per pod: the spans in which it was loading or evicting a model, (start, end, what) by start, where
#: what is "loading <backend>" or "evicting"; and the longest span.
Activity = list[tuple[list[tuple[float, float, str]], float]]


def activity(logs: list[Path], cold: list[Record], kinds: dict[str, Kind]) -> Activity:
    """When each pod was busy with a load or an eviction.  A load is logged only as it finishes; it is
    taken to have begun when the first request that waited for it was sent (the earliest cold request
    for the model sent to that pod since the pod's previous event for it and answered after the load;
    any pod's when none went to that pod; queueing for the load pool included).  An eviction runs from
    its "evicting" line to the model's "successfully unloaded"."""
    waiting: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for model, sent, answered, _, pod in cold:
        waiting[model].append((sent, answered, pod))
    for requests in waiting.values():
        requests.sort()
    busy: Activity = []
    for index, log in enumerate(logs):
        spans: list[tuple[float, float, str]] = []
        evicting: dict[str, float] = {}
        last: dict[str, float] = {}
        for when, what, model in _events(log):
            if what == "loaded":
                requests = waiting.get(model, [])
                since = requests[bisect.bisect_right(requests, (last.get(model, 0.0), float("inf"), 0)) :]
                waited = [(sent, pod) for sent, answered, pod in since if sent <= when <= answered]
                here = [sent for sent, pod in waited if pod == index]
                begun = min(here or [sent for sent, _ in waited] or [when])
                spans.append((begun, when, f"loading {kinds[model].backend}"))
            elif what == "evicting":
                evicting[model] = when
            else:
                spans.append((evicting.pop(model, when), when, "evicting"))
            last[model] = when
        spans.extend((when, when, "evicting") for when in evicting.values())
        spans.sort()
        busy.append((spans, max((b - a for a, b, _ in spans), default=0.0)))
    return busy


def busy_at(pod: tuple[list[tuple[float, float, str]], float], when: float) -> set[str]:
    """What a pod was doing at ``when``: the kinds of its spans under way then."""
    spans, longest = pod
    first = bisect.bisect_left(spans, when - longest, key=lambda span: span[0])
    last = bisect.bisect_right(spans, when, key=lambda span: span[0])
    return {what for _, end, what in spans[first:last] if end >= when}


def beside(records: list[Record], busy: Activity) -> dict[str, list[Record]]:
    """Requests by what the pods were doing as each was sent: a load or an eviction under way on the
    pod that received it (``same pod``, then each kind of work apart: a request may be in several of
    those rows), on other pods only, or on none.  The moment it was sent, not its whole span: a slow
    request would otherwise overlap more loads for being slow."""
    found: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        _, sent, _, _, pod = record
        here = busy_at(busy[pod], sent)
        if here:
            found["same pod"].append(record)
            for what in sorted(here):
                found[f"same pod: {what}"].append(record)
        elif any(busy_at(spans, sent) for i, spans in enumerate(busy) if i != pod):
            found["other pods only"].append(record)
        else:
            found["none"].append(record)
    return found


def not_held(records: list[Record], held: Residency, pods: int) -> list[int]:
    """Per pod: how many of ``records`` it received for a model it did not hold when they were sent."""
    counts = [0] * pods
    for model, sent, _, _, pod in records:
        times, states = held.get((pod, model), ([], []))
        i = bisect.bisect_right(times, sent)
        counts[pod] += not (i and states[i - 1])
    return counts


def latencies(records: list[Record]) -> list[float]:
    return [(answered - sent) * 1e3 for _, sent, answered, _, _ in records]


# ---- the simulated cluster ------------------------------------------------------------------------


def _metrics_port(pod: ServerPod) -> int:
    args = pod.process.args if isinstance(pod.process.args, list) else []
    ports = [int(str(a).split("=", 1)[1]) for a in args if str(a).startswith("--metrics-port=")]
    return ports[-1]  # the kubelet's appended flag wins, as it does for the server


@contextmanager
def infrastructure(repo: Path) -> Iterator[tuple[FakeCluster, Path]]:
    """SeaweedFS holding the repository, KMock, the kubelet and the operator (its own process); yields
    (the cluster, the operator's log) once the ModelRepository is synced."""
    store = SeaweedS3().start()
    api_server = ApiServer(sorted((ROOT / "crds").glob("*.yaml"))).start()
    fake = FakeCluster(Api(api_server.url), {"AWS_EC2_METADATA_DISABLED": "true"}).start()
    kube = Path(tempfile.mkdtemp(prefix="density-kube-"))
    kubeconfig = api_server.kubeconfig(kube / "config")
    env = dict(
        os.environ,
        KUBECONFIG=str(kubeconfig),
        NAIAD_OPERATOR_RECONCILE_INTERVAL="1",
        NAIAD_OPERATOR_SYNC_POLL_INTERVAL="0.5",
        NAIAD_OPERATOR_NAMESPACES=json.dumps([NS]),
        NAIAD_OPERATOR_METRICS_PORT=str(free_port()),
    )
    log = Path(tempfile.mkstemp(prefix="density-operator-", suffix=".log")[1])
    with log.open("wb") as out:
        operator = subprocess.Popen(
            [sys.executable, "-m", "naiad_operator", f"--liveness=http://127.0.0.1:{free_port()}/healthz"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        store.client().create_bucket(Bucket=BUCKET)
        upload_tree(store, BUCKET, "triton", repo)
        api = fake.api
        create_s3_repository(api, store, {"mode": "shared", "accessModes": ["ReadWriteMany"]})
        deadline = time.monotonic() + 300
        while ((api.get(f"{GROUP}/modelrepositories/models") or {}).get("status") or {}).get(
            "phase"
        ) != "Ready":
            if time.monotonic() > deadline:
                raise RuntimeError(f"repository not synced: {fake.errors} {log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield fake, log
    finally:
        os.killpg(operator.pid, signal.SIGTERM)
        operator.wait(30)
        fake.stop()
        api_server.stop()
        store.stop()
        shutil.rmtree(kube, ignore_errors=True)


def start_service(
    fake: FakeCluster,
    log: Path,
    pods: int,
    budget: int,
    min_residency: float,
    policy: str,
    models: list[str],
    extra_args: list[str],
) -> list[ServerPod]:
    """One InferenceService: ``pods`` replicas, every model ``placement: onDemand``, the budget as a
    server flag, the residency and eviction order as ``server.minResidencySeconds`` and
    ``server.evictionPolicy``; returns its pods once all are ready."""
    fake.api.create(
        f"{GROUP}/inferenceservices",
        {
            "apiVersion": "serving.naiad.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": SERVICE, "namespace": NS},
            "spec": {
                "repository": {"name": "models"},
                "replicas": pods,
                "server": {
                    "args": [f"--model-memory-budget={budget}", *extra_args],
                    "minResidencySeconds": min_residency,
                    "evictionPolicy": policy,
                },
                "models": [{"name": m, "placement": "onDemand"} for m in models],
            },
        },
    )
    deadline = time.monotonic() + 300
    while len(ready := [p for p in fake.pods.get(SERVICE, []) if p.ready]) < pods:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods not ready: {fake.errors} {log.read_text()[-3000:]}")
        time.sleep(0.5)
    return ready


# ---- phases ---------------------------------------------------------------------------------------


def clients(
    endpoints: list[tuple[int, int]],
    ranked: list[str],
    s: float,
    kinds: dict[str, Kind],
    duration: float,
    rate: float,
    count: int,
    seed: int,
) -> list[Client]:
    weights = tuple(zipf_weights(len(ranked), s))
    return [
        Client(
            "http" if i % 2 == 0 else "grpc",
            tuple(endpoints),
            tuple(ranked),
            weights,
            kinds,
            duration,
            rate / count,
            seed * 100 + i,
        )
        for i in range(count)
    ]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def summary(
    label: str, records: list[Record], loads: dict[str, list[float]], held: Residency, secs: float
) -> dict[str, Any]:
    warm_records, cold_records = split_cold(records, loads)
    local_records, forwarded_records, unknown_records = split_local(warm_records, held)
    warm, cold = latencies(warm_records), latencies(cold_records)
    local, forwarded = latencies(local_records), latencies(forwarded_records)
    unknown = latencies(unknown_records)
    failed = [r for r in records if r[3]]
    return {
        "label": label,
        "requests": len(records),
        "failed": len(failed),
        "errors": Counter(r[3].split(":")[0] + ": " + r[3][-120:] for r in failed).most_common(3),
        "warm": len(warm),
        "cold": len(cold),
        "warm_p50": pct(warm, 50),
        "warm_p99": pct(warm, 99),
        "local": len(local),
        "local_p50": pct(local, 50),
        "local_p99": pct(local, 99),
        "forwarded": len(forwarded),
        "forwarded_p50": pct(forwarded, 50),
        "forwarded_p99": pct(forwarded, 99),
        "unknown": len(unknown),
        "unknown_p99": pct(unknown, 99),
        "local_records": local_records,
        "forwarded_records": forwarded_records,
        "cold_records": cold_records,
        "cold_p50": pct(cold, 50),
        "cold_p99": pct(cold, 99),
        "rps": len(records) / secs,
    }


def delta(after: Counter[str], before: Counter[str]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=60.0, help="offered requests/s, all clients together")
    parser.add_argument("--clients", type=int, default=6, help="client processes (half HTTP, half gRPC)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of reference, warm-only, mixed")
    parser.add_argument("--reference-secs", type=float, default=15)
    parser.add_argument("--warm-secs", type=float, default=15)
    parser.add_argument("--mixed-secs", type=float, default=40)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--ratio", type=float, default=3.0, help="models' total / the fleet's budget")
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--min-residency", type=float, default=0.0, help="--min-residency-secs of the pods")
    parser.add_argument("--eviction-policy", choices=("lru", "gdsf"), default="gdsf", help="of the pods")
    parser.add_argument(
        "--server-arg", action="append", default=[], help="one more naiad serve argument for the pods"
    )
    parser.add_argument("--hot-fraction", type=float, default=0.5, help="of the fleet budget, warm-only set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--records", type=Path, help="write every request and the pods' logs' paths here (JSON)"
    )
    args = parser.parse_args(argv)

    print(f"cores: {os.cpu_count()}  uptime at start: {uptime()}", flush=True)
    print(
        f"pods: {args.pods}, eviction policy {args.eviction_policy},"
        f" minimum residency {args.min_residency:g} s, extra server args {args.server_arg or 'none'}",
        flush=True,
    )
    repo = Path(tempfile.mkdtemp(prefix="density-repo-"))
    t0 = time.monotonic()
    written = write_repository(repo, DEFAULT_MIX)
    kinds = dict(written)
    print(
        f"{len(written)} models written in {time.monotonic() - t0:.1f} s: "
        + ", ".join(f"{k.count} {k.backend} {k.mib} MiB" for k in DEFAULT_MIX),
        flush=True,
    )
    ranked = [name for name, _ in written]
    random.Random(args.seed).shuffle(ranked)  # rank 1 = hottest; sizes and backends mixed over ranks

    # -- reference: one server holding everything, no budget.  It loads its 200 models while the
    # cluster's infrastructure starts and syncs the repository (nothing is measured meanwhile).
    t0 = time.monotonic()
    ref = naiad(repo, "--model-control-mode=none")
    starting = threading.Thread(target=ref.__enter__, daemon=True)
    starting.start()
    try:
        return measure(args, repo, ranked, kinds, ref, starting, t0)
    finally:
        ref.__exit__(None, None, None)
        shutil.rmtree(repo, ignore_errors=True)  # 200 MiB of models


def measure(
    args: argparse.Namespace,
    repo: Path,
    ranked: list[str],
    kinds: dict[str, Kind],
    ref: Served,
    starting: threading.Thread,
    t0: float,
) -> int:
    with infrastructure(repo) as (fake, operator_log):
        print(f"cluster infrastructure up, repository synced in {time.monotonic() - t0:.0f} s", flush=True)
        starting.join()
        print(f"reference: every model loaded in {time.monotonic() - t0:.0f} s", flush=True)
        sizes = footprints(ref.http_url)
        missing = set(ranked) - set(sizes)
        if missing:
            raise RuntimeError(f"reference did not load {sorted(missing)[:5]}...")
        for name in ranked:  # every model's first inference done before measuring
            infer(ref.http_url, name)
        # Models of one kind are identical, so each is given its kind's median footprint: an in-engine
        # (ONNX) model's footprint is the server's RSS growth over its load, and with the reference's
        # concurrent startup loads one such model can be charged with others' growth (seen: an
        # identity model at 546 MiB).  Python models are measured exactly (their process's RSS).
        by_kind: dict[str, list[int]] = defaultdict(list)
        for name, size in sizes.items():
            by_kind[kinds[name].prefix].append(size)
        median = {prefix: int(statistics.median(values)) for prefix, values in by_kind.items()}
        raw = sum(sizes.values())
        sizes = {name: median[kinds[name].prefix] for name in sizes}
        total = sum(sizes.values())
        budget = int(total / args.ratio / args.pods)
        print(
            "footprints (median per kind, MiB): "
            + ", ".join(f"{prefix} {size / MIB:.1f}" for prefix, size in median.items())
            + f"; total {total / MIB:,.0f} MiB (the index's own sum: {raw / MIB:,.0f} MiB)",
            flush=True,
        )
        print(
            f"budget per pod: {budget / MIB:,.0f} MiB (fleet {args.pods * budget / MIB:,.0f} MiB, models "
            f"{total / (args.pods * budget):.2f}x of it; largest model {max(sizes.values()) / MIB:.0f} MiB)",
            flush=True,
        )
        hot: list[str] = []
        used = 0
        for name in ranked:
            if used + sizes[name] > args.hot_fraction * args.pods * budget:
                break
            hot.append(name)
            used += sizes[name]

        t1 = time.monotonic()
        pods = start_service(
            fake,
            operator_log,
            args.pods,
            budget,
            args.min_residency,
            args.eviction_policy,
            ranked,
            args.server_arg,
        )
        print(f"cluster: {len(pods)} pods ready in {time.monotonic() - t1:.0f} s", flush=True)
        endpoints = [(p.port, p.grpc_port) for p in pods]
        metrics = [_metrics_port(p) for p in pods]

        def load(where: list[tuple[int, int]], models: list[str], secs: float, seed: int) -> list[Record]:
            return drive(clients(where, models, args.zipf, kinds, secs, args.rate, args.clients, seed))

        # rounds interleave the three phases, so that each ratio compares measurements minutes apart at
        # most on a machine whose load moves (the reference server idles while the cluster is measured)
        rounds: list[dict[str, list[Record]]] = []
        counts: dict[str, Counter[str]] = {"warm-only": Counter(), "mixed": Counter()}
        for r in range(args.rounds):
            seed = args.seed + 10 * r
            reference = load([(ref.http_port, ref.grpc_port)], ranked, args.reference_secs, seed)
            # the hot set: one request each, spread over the pods, then the peers file catches up
            for i, name in enumerate(hot):
                infer(pods[i % len(pods)].url, name)
            time.sleep(4)
            before = scrape(metrics)
            warm_only = load(endpoints, hot, args.warm_secs, seed + 1)
            middle = scrape(metrics)
            mixed = load(endpoints, ranked, args.mixed_secs, seed + 2)
            after = scrape(metrics)
            counts["warm-only"].update(delta(middle, before))
            counts["mixed"].update(delta(after, middle))
            rounds.append({"reference": reference, "warm-only": warm_only, "mixed": mixed})
            print(f"round {r + 1} done; uptime: {uptime()}", flush=True)
        logs = [p.log for p in pods]
        loads = load_events(logs)
        held_when = residency(logs)
        held = {p.name: footprints(p.url) for p in pods}
    ref.__exit__(None, None, None)

    if args.records:
        args.records.write_text(json.dumps({"logs": [str(log) for log in logs], "rounds": rounds}))
    labels = {
        "reference": "reference (1 server, all 200 loaded, no budget)",
        "warm-only": f"cluster warm-only ({len(hot)} hot models)",
        "mixed": "cluster mixed (all 200 models)",
    }
    secs = {"reference": args.reference_secs, "warm-only": args.warm_secs, "mixed": args.mixed_secs}
    pooled = {
        phase: summary(
            labels[phase],
            [x for rnd in rounds for x in rnd[phase]],
            loads,
            held_when if phase != "reference" else {},
            secs[phase] * len(rounds),
        )
        for phase in labels
    }
    per_round = [
        {
            phase: summary(phase, rnd[phase], loads, held_when if phase != "reference" else {}, secs[phase])
            for phase in labels
        }
        for rnd in rounds
    ]

    print(f"\nall {len(rounds)} rounds pooled:")
    print(
        "| phase | requests | req/s | failed | warm | warm p50 ms | warm p99 ms | cold | cold p50 ms "
        "| cold p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in pooled.values():
        print(
            f"| {row['label']} | {row['requests']} | {row['rps']:.1f} | {row['failed']} | {row['warm']} | "
            f"{row['warm_p50']:.1f} | {row['warm_p99']:.1f} | {row['cold']} | {row['cold_p50']:.0f} | "
            f"{row['cold_p99']:.0f} |"
        )
    for row in pooled.values():
        if row["errors"]:
            print(f"  {row['label']} errors: {row['errors']}")
    print("\n| phase | hit rate | on-demand loads | loads/min | evictions | evictions/min | forwarded |")
    print("|---|---|---|---|---|---|---|")
    for phase in ("warm-only", "mixed"):
        d = counts[phase]
        minutes = secs[phase] * len(rounds) / 60
        hits = d.get("naiad_on_demand_requests_total{result=hit}", 0.0)
        misses = d.get("naiad_on_demand_requests_total{result=miss}", 0.0)
        rate = hits / (hits + misses) if hits + misses else float("nan")
        loads_n = d.get("naiad_model_loads_total{reason=on_demand}", 0.0)
        evictions = d.get("naiad_model_evictions_total", 0.0)
        print(
            f"| {phase} | {rate:.3f} ({hits:.0f} hit / {misses:.0f} miss) | {loads_n:.0f} | "
            f"{loads_n / minutes:.0f} | {evictions:.0f} | {evictions / minutes:.0f} | "
            f"{d.get('naiad_forwarded_requests_total', 0.0):.0f} |"
        )
    print("\nwarm p99 per round (ms) and ratios; the median of the rounds' ratios last:")
    print("| round | reference | warm-only | mixed | mixed / warm-only | mixed / reference |")
    print("|---|---|---|---|---|---|")
    by_warm, by_ref = [], []
    for i, row in enumerate(per_round, 1):
        ref99, warm99, mixed99 = (row[k]["warm_p99"] for k in ("reference", "warm-only", "mixed"))
        by_warm.append(mixed99 / warm99)
        by_ref.append(mixed99 / ref99)
        print(
            f"| {i} | {ref99:.1f} | {warm99:.1f} | {mixed99:.1f} | {by_warm[-1]:.2f}x | {by_ref[-1]:.2f}x |"
        )
    print(f"| median | | | | {statistics.median(by_warm):.2f}x | {statistics.median(by_ref):.2f}x |")
    print(
        "\nwarm requests the receiving pod answered itself (local), forwarded to a peer (it did not hold"
        " the model), or unknown (it began or finished evicting the model while the request was"
        " outstanding), from each pod's load/evict/unload log lines:"
    )
    print(
        "| round | phase | local | local p50 ms | local p99 ms | forwarded | forwarded p50 ms "
        "| forwarded p99 ms | unknown | all warm p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rows in [("pooled", pooled), *((str(i), row) for i, row in enumerate(per_round, 1))]:
        for phase in ("warm-only", "mixed"):
            row = rows[phase]
            print(
                f"| {name} | {phase} | {row['local']} | {row['local_p50']:.1f} | {row['local_p99']:.1f} | "
                f"{row['forwarded']} | {row['forwarded_p50']:.1f} | {row['forwarded_p99']:.1f} | "
                f"{row['unknown']} | {row['warm_p99']:.1f} |"
            )
    print(
        "\nforwarded requests: the pods' counter (delta over the phase) against the logs' warm forwarded"
        " requests, and the cold requests whose pod did not hold the model when they were sent (forwarded,"
        " or loaded there when no peer held it; the counter includes the first):"
    )
    print("| phase | pod | counter | warm forwarded (logs) | cold, not held when sent (logs) |")
    print("|---|---|---|---|---|")
    for phase in ("warm-only", "mixed"):
        row = pooled[phase]
        warm_fwd = not_held(row["forwarded_records"], held_when, len(pods))
        cold_fwd = not_held(row["cold_records"], held_when, len(pods))
        for i in range(len(pods)):
            counter = counts[phase].get(f"naiad_forwarded_requests_total{{pod={i}}}", 0.0)
            print(f"| {phase} | {i} | {counter:.0f} | {warm_fwd[i]} | {cold_fwd[i]} |")
        total = counts[phase].get("naiad_forwarded_requests_total", 0.0)
        print(f"| {phase} | all | {total:.0f} | {sum(warm_fwd)} | {sum(cold_fwd)} |")
    print("\nwarm p99 mixed / warm-only per round: local warm (do other models' loads slow a warm request?)")
    print("beside all warm and forwarded warm; the median of the rounds' ratios last:")
    print("| round | local p99 warm-only | local p99 mixed | local | all warm | forwarded |")
    print("|---|---|---|---|---|---|")
    by_local, by_all, by_forwarded = [], [], []
    for i, row in enumerate(per_round, 1):
        before, after = row["warm-only"], row["mixed"]
        by_local.append(after["local_p99"] / before["local_p99"])
        by_all.append(after["warm_p99"] / before["warm_p99"])
        by_forwarded.append(after["forwarded_p99"] / before["forwarded_p99"])
        print(
            f"| {i} | {before['local_p99']:.1f} | {after['local_p99']:.1f} | {by_local[-1]:.2f}x | "
            f"{by_all[-1]:.2f}x | {by_forwarded[-1]:.2f}x |"
        )
    print(
        f"| median | | | {statistics.median(by_local):.2f}x | {statistics.median(by_all):.2f}x | "
        f"{statistics.median(by_forwarded):.2f}x |"
    )

    # Why local warm requests are slow: what their pod, and the others, were doing meanwhile
    cold = [r for phase in ("warm-only", "mixed") for r in pooled[phase]["cold_records"]]
    busy = activity(logs, cold, kinds)
    spans = [end - start for pod, _ in busy for start, end, what in pod if what.startswith("loading")]
    waited = [x * 1e3 for x in spans if x > 0]
    print(
        "\nlocal warm requests by what the pods were doing as each was sent (a load from the first request"
        f" that waited for it to its log line: median {pct(waited, 50):.0f} ms, p90 {pct(waited, 90):.0f} ms"
        f" over {len(waited)} loads, {len(spans) - len(waited)} others with no request waiting (the hot"
        " set's, loaded before the phases) taken as instants; an eviction from its line to the unload's):"
    )
    print("| phase | a load or eviction on | requests | share | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for phase in ("warm-only", "mixed"):
        local_records = pooled[phase]["local_records"]
        for where, found in sorted(beside(local_records, busy).items()):
            values = latencies(found)
            print(
                f"| {phase} | {where} | {len(values)} | {len(values) / max(len(local_records), 1):.2f} | "
                f"{pct(values, 50):.1f} | {pct(values, 99):.1f} |"
            )
    mixed_local = pooled["mixed"]["local_records"]
    cut = pct(latencies(mixed_local), 99)
    slowest = [r for r in mixed_local if (r[2] - r[1]) * 1e3 >= cut]
    shares = {where: len(found) for where, found in sorted(beside(slowest, busy).items())}
    print(
        f"mixed, the slowest 1% of local warm requests (>= {cut:.1f} ms, {len(slowest)}): "
        + ", ".join(f"{where} {n}" for where, n in shares.items())
    )
    print("\nlocal warm requests by the model's backend:")
    print("| phase | backend | requests | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for phase in ("warm-only", "mixed"):
        by_backend: dict[str, list[Record]] = defaultdict(list)
        for record in pooled[phase]["local_records"]:
            by_backend[kinds[record[0]].backend].append(record)
        for backend, found in sorted(by_backend.items()):
            values = latencies(found)
            print(f"| {phase} | {backend} | {len(values)} | {pct(values, 50):.1f} | {pct(values, 99):.1f} |")
    print("\nheld at the end (pod: models, MiB measured):")
    for pod, models in held.items():
        print(
            f"  {pod}: {len(models)} models, {sum(models.values()) / MIB:,.0f} MiB "
            f"(budget {budget / MIB:,.0f} MiB)"
        )
    print(f"\nuptime at the end: {uptime()}", flush=True)
    return 1 if any(row["failed"] for row in pooled.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

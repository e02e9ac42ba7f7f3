"""``naiad repo sync`` against a plain boto3 download, and model load times.

Fills a local S3 server (SeaweedFS) with a 1,000-object, 1 GiB repository, then, in interleaved rounds:

* a full sync into an empty destination, and the same objects fetched by plain boto3
  (``download_file`` per object on a 16-thread pool, which is what a hand-written copy looks like; its
  transfer manager also splits large objects into parallel ranges);
* a no-change re-sync (everything listed, nothing downloaded).

Then it loads each example model into a server in EXPLICIT mode a few times (load, unload) and
reports the median load time.  Prints medians and writes them as JSON with ``--json FILE``.

usage: python benchmarks/sync/run.py [--rounds 3] [--objects 1000] [--size-mib 1024] [--parallel 16]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from naiad.repository.sync.engine import SyncOptions, sync

from tests.support.object_store import SeaweedS3
from tests.support.server import EXAMPLES, ROOT, ServerProcess

BUCKET = "bench-models"
#: Large objects (model weights) carry half the bytes; many small ones (configs, shards) the rest.
LARGE_OBJECTS = 4


def fill(store: SeaweedS3, objects: int, total: int) -> list[str]:
    """Upload a model-repository-shaped set of ``objects`` objects totalling ``total`` bytes."""
    client = store.client()
    client.create_bucket(Bucket=BUCKET)
    large = total // 2 // LARGE_OBJECTS
    small = (total - large * LARGE_OBJECTS) // (objects - LARGE_OBJECTS)
    plan: list[tuple[str, int]] = []
    for i in range(LARGE_OBJECTS):
        plan.append((f"repo/large_{i}/1/model.onnx", large))
    for i in range(objects - LARGE_OBJECTS):
        model = i // 50
        plan.append((f"repo/shards_{model:02d}/1/part_{i:04d}.bin", small))
    block = os.urandom(max(size for _, size in plan) + 4096)

    def put(item: tuple[str, int]) -> None:
        key, size = item
        offset = hash(key) % 4096
        client.put_object(Bucket=BUCKET, Key=key, Body=block[offset : offset + size])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, plan))
    for model in {key.split("/")[1] for key, _ in plan}:
        client.put_object(Bucket=BUCKET, Key=f"repo/{model}/config.pbtxt", Body=b'backend: "onnxruntime"\n')
    return [key for key, _ in plan]


def boto3_download(store: SeaweedS3, dest: Path, parallel: int) -> None:
    """The baseline: list, then ``download_file`` every object on a thread pool."""
    client = store.client()
    keys = [
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="repo/")
        for item in page.get("Contents", ())
    ]

    def fetch(key: str) -> None:
        path = dest / key
        path.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(BUCKET, key, str(path))

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(fetch, keys))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def load_times(rounds: int) -> dict[str, dict[str, float]]:
    """Seconds for the HTTP load call of each example model (EXPLICIT mode): the first load in the
    process (``first``, which also imports the backend) and the median of the later ones."""
    import tritonclient.http as httpclient

    build = ROOT / "scripts" / "build_examples.py"
    if build.exists():
        import subprocess

        subprocess.run([sys.executable, str(build)], check=True, capture_output=True)
    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "config.pbtxt").exists())
    times: dict[str, dict[str, float]] = {}
    with ServerProcess([EXAMPLES], ["--model-control-mode=explicit"]) as server:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
        for name in names:
            samples = []
            for _ in range(rounds + 1):
                seconds, _ = timed(lambda name=name: client.load_model(name))
                samples.append(seconds)
                client.unload_model(name)
            times[name] = {"first": samples[0], "median": statistics.median(samples[1:])}
        client.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--json", type=Path, help="write the medians here")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="naiad-bench-sync-"))
    results: dict[str, Any] = {
        "objects": args.objects,
        "bytes": args.size_mib << 20,
        "parallel": args.parallel,
    }
    try:
        (work / "seaweed").mkdir()
        with SeaweedS3(work / "seaweed") as store:
            os.environ.update(store.env())
            seconds, _ = timed(lambda: fill(store, args.objects, args.size_mib << 20))
            print(f"uploaded {args.objects} objects, {args.size_mib} MiB in {seconds:.1f}s")
            uri = store.uri(BUCKET, "repo")
            full, baseline, nochange = [], [], []
            for round_ in range(args.rounds):
                target = work / f"baseline-{round_}"
                seconds, _ = timed(lambda target=target: boto3_download(store, target, args.parallel))
                baseline.append(seconds)
                shutil.rmtree(target)
                dest = work / f"sync-{round_}"
                seconds, result = timed(
                    lambda dest=dest: sync(uri, dest, SyncOptions(parallel=args.parallel))
                )
                assert result.objects_copied == result.objects_listed
                full.append(seconds)
                seconds, again = timed(lambda dest=dest: sync(uri, dest, SyncOptions(parallel=args.parallel)))
                assert again.bytes_copied == 0 and again.objects_copied == 0
                nochange.append(seconds)
                shutil.rmtree(dest)
                print(
                    f"round {round_ + 1}: boto3 {baseline[-1]:.2f}s, sync {full[-1]:.2f}s, "
                    f"no-change re-sync {nochange[-1]:.2f}s"
                )
            results.update(
                boto3_seconds=statistics.median(baseline),
                sync_seconds=statistics.median(full),
                nochange_seconds=statistics.median(nochange),
                nochange_bytes=0,
            )
            results["speed_vs_boto3"] = results["boto3_seconds"] / results["sync_seconds"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load_seconds"] = load_times(args.rounds)
    mib = args.size_mib
    print(f"\nfull sync:          {results['sync_seconds']:.2f}s ({mib / results['sync_seconds']:.0f} MiB/s)")
    print(f"plain boto3:        {results['boto3_seconds']:.2f}s ({mib / results['boto3_seconds']:.0f} MiB/s)")
    print(f"sync speed / boto3: {results['speed_vs_boto3']:.2f}x")
    print(f"no-change re-sync:  {results['nochange_seconds']:.2f}s, 0 bytes downloaded")
    for name, seconds in results["load_seconds"].items():
        print(
            f"load {name:<20} first {seconds['first'] * 1000:.0f} ms, then {seconds['median'] * 1000:.0f} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

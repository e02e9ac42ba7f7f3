"""Run NVIDIA's own client examples, Python-backend examples and qa tests, unchanged, against ``naiad serve``.

    python conformance/run.py --client DIR --python-backend DIR --server DIR [--only SUBSTRING] [--work DIR]
                              [--frontend-workers N]

Each DIR is an extracted checkout of triton-inference-server/client, /python_backend or /server.  Prints
one line per script (per test case for test files) and, last, ``N passed, M failed, K skipped``; exits 1
when anything failed.  Scripts' output goes to ``<work>/scripts.log``, each server's to
``<work>/<suite>/server.log``.  ``--frontend-workers N`` serves every suite with N frontend workers
and one engine (issue 15: every mode answers as the single process does); by default the server picks
(one process on a machine with at most 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``conformance`` importable from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.cases import all_suites, skips
from conformance.runner import Checkouts, Verdict, in_private_network, isolate, run_suite, summary


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", type=Path, required=True, help="triton-inference-server/client checkout")
    parser.add_argument("--python-backend", type=Path, required=True, help="…/python_backend checkout")
    parser.add_argument("--server", type=Path, required=True, help="triton-inference-server/server checkout")
    parser.add_argument("--only", action="append", default=[], help="run suites/scripts whose name has this")
    parser.add_argument("--work", type=Path, help="where repositories and logs go (default: a temp folder)")
    parser.add_argument("--no-isolate", action="store_true", help="stay in this network namespace")
    parser.add_argument(
        "--frontend-workers", metavar="N", help="naiad serve --frontend-workers N for every suite"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    if not args.no_isolate and not in_private_network():
        status = isolate([sys.executable, str(Path(__file__).resolve()), *raw])
        if status is not None:
            return status
    checkouts = Checkouts(args.client.resolve(), args.python_backend.resolve(), args.server.resolve())
    for path in (checkouts.client_examples, checkouts.pb_examples, checkouts.qa):
        if not path.is_dir():
            print(f"not a checkout: {path} is missing", file=sys.stderr)
            return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="naiad-conformance-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"# work folder (logs, repositories): {work}", flush=True)
    suites = all_suites(checkouts)
    if args.frontend_workers is not None:
        mode = (f"--frontend-workers={args.frontend_workers}",)
        suites = [replace(suite, server_args=(*suite.server_args, *mode)) for suite in suites]
    verdicts: list[Verdict] = []
    with (work / "scripts.log").open("w") as log:
        for suite in suites:
            wanted = tuple(s for s in suite.scripts if _selected(args.only, suite.name, s.name))
            if wanted:
                verdicts += run_suite(replace(suite, scripts=wanted), work, sys.stdout, log)
    for skip in skips(checkouts, suites):
        if _selected(args.only, "", skip.name):
            verdict = Verdict(skip.name, "SKIP", skip.reason)
            verdicts.append(verdict)
            print(verdict.line(), flush=True)
    print(summary(verdicts), flush=True)
    return 1 if any(v.outcome == "FAIL" for v in verdicts) else 0


def _selected(only: Sequence[str], suite: str, script: str) -> bool:
    return not only or any(part in suite or part in script for part in only)


if __name__ == "__main__":
    sys.exit(main())

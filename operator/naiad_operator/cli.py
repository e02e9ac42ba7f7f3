"""``naiad-operator``: run the operator (kopf) with the handlers of this package.

Which namespaces to watch comes from ``NAIAD_OPERATOR_NAMESPACES`` like every other setting, so the
container needs no arguments; kopf's peering is off (one replica, ``strategy: Recreate``), because kopf
peering is not leader election and equal-priority peers freeze each other.
"""

from __future__ import annotations

import argparse
import sys

import kopf

from naiad_operator.settings import load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="naiad-operator", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="log every API call and handler step")
    parser.add_argument(
        "--liveness",
        metavar="URL",
        default="http://0.0.0.0:8080/healthz",
        help="kopf liveness endpoint (default %(default)s)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    import naiad_operator.handlers  # noqa: F401  (registers the handlers)

    settings = load()
    kopf.configure(verbose=args.verbose)
    kopf.run(
        standalone=True,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=args.liveness,
        memo=kopf.Memo(liveness=args.liveness),  # a standby answers it while it waits for the Lease
    )
    return 0

"""The Prometheus text format (0.0.4) exactly as Triton writes it.

``prometheus_client.generate_latest`` renames every counter family to ``<name>_total`` in its
``# TYPE`` line, so a scraper would no longer see ``nv_inference_request_success`` as a counter and
every Triton dashboard and alert would break.  This writer prints families as they are named, with
labels sorted and integral values without a trailing ``.0``, as Triton does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PROMETHEUS_TYPES = {"unknown": "untyped"}


class Prerendered(Metric):
    """A family whose sample lines are already written (by :func:`render_samples`).

    A collector with many series that rarely change keeps their text and hands it back while their
    values stay the same, instead of rebuilding and reformatting every sample on each scrape."""

    def __init__(self, name: str, documentation: str, typ: str, text: str) -> None:
        super().__init__(name, documentation, typ)
        self.text = text


def render(families: Iterable[Metric]) -> bytes:
    """``families`` (a registry's ``collect()``) as one exposition document."""
    out: list[str] = []
    for family in families:
        name = family.name
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {_PROMETHEUS_TYPES.get(family.type, family.type)}\n")
        out.append(family.text if isinstance(family, Prerendered) else render_samples(family))
    return "".join(out).encode()


def render_samples(family: Metric) -> str:
    """The sample lines of ``family``, without its ``# HELP`` and ``# TYPE`` lines."""
    out: list[str] = []
    for sample in family.samples:
        if sample.labels:
            pairs = sorted(sample.labels.items(), key=_order)
            labels = ",".join(f'{key}="{_escape(value)}"' for key, value in pairs)
            out.append(f"{sample.name}{{{labels}}} {_number(sample.value)}\n")
        else:
            out.append(f"{sample.name} {_number(sample.value)}\n")
    return "".join(out)


def _order(label: tuple[str, str]) -> tuple[bool, str]:
    """Labels sorted by name, a histogram's ``le`` last (as Triton prints them)."""
    return label[0] == "le", label[0]


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)

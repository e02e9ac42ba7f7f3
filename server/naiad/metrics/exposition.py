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
    """A family whose sample lines are already written, in this format.

    A collector with many series that rarely change keeps their text and hands it back while their
    values stay the same, instead of rebuilding and reformatting every sample on each scrape."""

    def __init__(self, name: str, documentation: str, typ: str, text: str) -> None:
        super().__init__(name, documentation, typ)
        self.text = text


class Exposition:
    """Writes families as one document, remembering each label set's text between scrapes.

    Sorting and escaping the labels of every sample was most of a scrape's cost (a server with a few
    hundred model versions has thousands of series, and the operator and Prometheus read them every
    few seconds, on the event loop).  The same label sets come back on every scrape, so their text is
    kept, keyed by the labels as given; the memory is dropped whole when it reaches :attr:`LIMIT`
    entries (label sets of models long gone)."""

    LIMIT = 100_000

    def __init__(self) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}

    def render(self, families: Iterable[Metric]) -> bytes:
        """``families`` (a registry's ``collect()``) as one exposition document."""
        if len(self._labels) > self.LIMIT:
            self._labels.clear()
        return render(families, self._labels)


def render(families: Iterable[Metric], labels: dict[tuple[tuple[str, str], ...], str] | None = None) -> bytes:
    """``families`` as one exposition document; ``labels``: label texts to reuse and fill in."""
    known = {} if labels is None else labels
    out: list[str] = []
    for family in families:
        name = family.name
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {_PROMETHEUS_TYPES.get(family.type, family.type)}\n")
        out.append(family.text if isinstance(family, Prerendered) else _samples(family, known))
    return "".join(out).encode()


def _samples(family: Metric, known: dict[tuple[tuple[str, str], ...], str]) -> str:
    """The sample lines of ``family``; ``known``: label texts by labels, reused and filled in."""
    out: list[str] = []
    for sample in family.samples:
        shown = format_value(sample.value)
        if sample.labels:
            key = tuple(sample.labels.items())
            text = known.get(key)
            if text is None:
                text = known[key] = _label_text(sample.labels)
            out.append(f"{sample.name}{{{text}}} {shown}\n")
        else:
            out.append(f"{sample.name} {shown}\n")
    return "".join(out)


def _label_text(labels: dict[str, str]) -> str:
    pairs = sorted(labels.items(), key=_order)
    return ",".join(f'{key}="{escape_label(value)}"' for key, value in pairs)


def _order(label: tuple[str, str]) -> tuple[bool, str]:
    """Labels sorted by name, a histogram's ``le`` last (as Triton prints them)."""
    return label[0] == "le", label[0]


def escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)

"""Each model's request rate, and the copies a ``{copies, maxCopies}`` model holds for it.

The rate comes from the pods' own counters (``nv_inference_request_success`` + ``_failure``, every
version): a count means nothing alone, so a pass keeps a :class:`RequestSample` (the handler holds it
between passes) and the rate is the growth between the sample that opened the window and the pass's
own, over the time between them. A window is closed only once it is at least ``window`` seconds long,
so passes that a burst of watch events brings close together do not measure a rate over milliseconds;
in between, status keeps the last rate. A pod's growth is counted only where both samples saw the pod
(one that appeared meanwhile may have counted for longer than the window), and a count that went down
(the server restarted, the model was reloaded) restarts from zero, as Prometheus' ``rate`` does.

Copies follow the rate like the HPA follows its metric: the load asks for ``ceil(rate / target)``
copies, clamped to ``[copies, maxCopies]``; more copies are taken at once, fewer only after no window
in the last ``scaleDownDelaySeconds`` asked for the current number (status records when one last did).
A model's extra copies are the next pods in its rendezvous ranking (:func:`.placement.chosen`), so
growing and shrinking moves no other copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from naiad_operator.api.inferenceservice import InferenceServiceStatus, ModelSpec, ModelStatus
from naiad_operator.api.observed import PodCounters
from naiad_operator.reconcile import retry
from naiad_operator.reconcile.syncjob import format_time

#: Decimal places the rate keeps in status (finer means nothing; a rate that changes still writes status
#: once per window, and an idle model's 0 writes nothing).
DIGITS = 3


@dataclass(frozen=True, slots=True)
class RequestSample:
    """Every pod's cumulative request count per model (all versions, answered and failed) at ``at``."""

    at: datetime
    counts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """pod -> model -> requests; a pod whose ``/metrics`` did not answer is absent."""


def sample(counters: Mapping[str, PodCounters], at: datetime) -> RequestSample:
    """The counts of one scrape (pod -> (model, version) -> counters), summed over versions."""
    counts: dict[str, dict[str, float]] = {}
    for pod, found in counters.items():
        models = counts.setdefault(pod, {})
        for (model, _), c in found.items():
            models[model] = models.get(model, 0.0) + c.success + c.failure
    return RequestSample(at, counts)


def rates(before: RequestSample, after: RequestSample) -> dict[str, float]:
    """model -> requests per second between the two samples, summed over the pods both saw."""
    seconds = (after.at - before.at).total_seconds()
    if seconds <= 0:
        return {}
    grown: dict[str, float] = {}
    for pod, models in after.counts.items():
        earlier = before.counts.get(pod)
        if earlier is None:
            continue
        for model, count in models.items():
            prior = earlier.get(model, 0.0)  # loaded during the window: its counters started at zero
            grown[model] = grown.get(model, 0.0) + (count - prior if count >= prior else count)
    return {model: requests / seconds for model, requests in grown.items()}


def advance(
    opened: RequestSample | None, current: RequestSample, window: float
) -> tuple[RequestSample, dict[str, float] | None]:
    """(the sample the next window opens with, the rates of the window this pass closed or None).

    No earlier sample: this one opens the first window. A window shorter than ``window`` seconds stays
    open (no rate yet); a sample from the future (a clock that stepped back) starts over."""
    if opened is None or current.at < opened.at:
        return current, None
    if (current.at - opened.at).total_seconds() < window:
        return opened, None
    return current, rates(opened, current)


def wanted(spec: ModelSpec, rate: float) -> int | None:
    """The copies ``rate`` asks for, within the spec's bounds; None for a model whose copies do not
    follow the load."""
    scaling = spec.scaling
    if scaling is None:
        return None
    assert scaling.max_copies is not None and scaling.target_requests_per_second is not None
    # a rate a rounding error above a multiple of the target asks for no extra copy
    asked = math.ceil(rate / scaling.target_requests_per_second - 1e-9)
    return min(max(asked, scaling.copies), scaling.max_copies)


@dataclass(frozen=True, slots=True)
class Scale:
    """The copies one model holds after a pass, and when the load last needed that many."""

    copies: int
    needed_at: str | None


def scale(spec: ModelSpec, record: ModelStatus | None, rate: float | None, now: datetime) -> Scale | None:
    """This pass's number of copies of a ``{copies, maxCopies}`` model (None for others).

    ``rate`` is the window this pass closed (None: none closed, so the count holds). Up at once; down,
    to what the rate asks for, once the current count was last needed ``scaleDownDelaySeconds`` ago.
    An operator that finds no record of when it was last needed starts the delay now, never sooner."""
    scaling = spec.scaling
    if scaling is None:
        return None
    assert scaling.max_copies is not None
    floor, ceiling = scaling.copies, scaling.max_copies
    held = record.target_copies if record is not None and record.target_copies is not None else floor
    held = min(max(held, floor), ceiling)  # the bounds may have changed since
    last = record.copies_needed_at if record is not None else None
    since = retry.parse_time(last) if last else None
    if rate is not None:
        asked = wanted(spec, rate)
        assert asked is not None
        if asked >= held:
            held, since = asked, now
        elif since is None:
            since = now
        elif now - since >= timedelta(seconds=scaling.scale_down_delay_seconds):
            held, since = asked, now
    if held == floor:
        return Scale(held, None)  # nothing below to wait for
    return Scale(held, format_time(since) if since is not None else format_time(now))


def scales(
    models: Sequence[ModelSpec],
    records: Mapping[str, ModelStatus],
    window_rates: Mapping[str, float] | None,
    now: datetime,
) -> dict[str, Scale]:
    """:func:`scale` of every model whose copies follow its load. A model missing from the rates of a
    closed window had no requests counted anywhere: its rate is 0."""
    found: dict[str, Scale] = {}
    for spec in models:
        rate = None if window_rates is None else window_rates.get(spec.name, 0.0)
        held = scale(spec, records.get(spec.name), rate, now)
        if held is not None:
            found[spec.name] = held
    return found


def record(
    status: InferenceServiceStatus,
    models: Sequence[ModelSpec],
    window_rates: Mapping[str, float] | None,
    scales: Mapping[str, Scale],
) -> InferenceServiceStatus:
    """``status`` with each model's rate (when this pass closed a window; else the last one stays) and
    the copies a scaling model holds (fields of models that stopped scaling are cleared)."""
    listed = {m.name for m in models}
    updated = []
    for entry in status.models:
        if entry.name not in listed:
            updated.append(entry)
            continue
        update: dict[str, object] = {}
        if window_rates is not None:
            update["requests_per_second"] = round(window_rates.get(entry.name, 0.0), DIGITS)
        held = scales.get(entry.name)
        update["target_copies"] = held.copies if held is not None else None
        update["copies_needed_at"] = held.needed_at if held is not None else None
        updated.append(entry.model_copy(update=update))
    return status.model_copy(update={"models": updated})

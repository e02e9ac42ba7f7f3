"""The model registry on its own: publish/retire, the read-only view, and the routing rules it applies.

Real :class:`Model` and :class:`ModelVersion` objects (versions READY without instances: resolution
never touches a scheduler).  The servers' behaviour is in ``test_routing.py``; here are the rules a
server test cannot pin down, such as a sequence's version being the same in another process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from naiad.core.errors import NotFoundError, UnavailableError
from naiad.core.request import InferRequest
from naiad.repository.model import Model, ModelState, ModelVersion
from naiad.repository.registry import ModelRegistry
from naiad.repository.routing import Mirror, choose


def model(
    name: str, *versions: int, weights: dict[int, int] | None = None, pinned: int | None = None
) -> Model:
    return Model(
        name,
        Path(name),
        versions={v: ModelVersion(v, ModelState.READY, model_name=name) for v in versions},
        version_weights=weights,
        default_version=pinned,
    )


def test_publish_replaces_at_once_and_retire_forgets() -> None:
    registry = ModelRegistry()
    first = model("m", 1)
    registry.publish(first)
    assert registry.resolve("m", "")[1] is first.versions[1]
    second = model("m", 1, 2)
    registry.publish(second)
    assert registry.resolve("m", "") == (second, second.versions[2])
    registry.retire("m")
    with pytest.raises(NotFoundError):
        registry.resolve("m", "")
    registry.retire("m")  # retiring an unknown name is a no-op


def test_the_view_is_live_and_read_only() -> None:
    registry = ModelRegistry()
    view = registry.models()
    registry.publish(model("m", 1))
    assert list(view) == ["m"]
    with pytest.raises(TypeError):
        view["n"] = model("n", 1)  # type: ignore[index]


def test_weights_choose_among_ready_versions_and_resolve_names_the_heaviest() -> None:
    registry = ModelRegistry()
    canary = model("m", 1, 2, 3, weights={1: 3, 2: 1, 3: 0}, pinned=3)
    registry.publish(canary)
    seen = Counter(registry.route(InferRequest("m"))[1].version for _ in range(2000))
    assert set(seen) == {1, 2}  # weight 0 and the pin do not count while weights are set
    assert 0.18 <= seen[2] / 2000 <= 0.32
    assert registry.resolve("m", "")[1].version == 1
    assert registry.route(InferRequest("m", "3"))[1].version == 3  # a named version is untouched
    canary.versions[1].state = ModelState.UNAVAILABLE
    assert {registry.route(InferRequest("m"))[1].version for _ in range(50)} == {2}
    canary.versions[2].state = ModelState.UNLOADING
    with pytest.raises(UnavailableError, match="no version with a routing weight at ready state"):
        registry.route(InferRequest("m"))


def test_mirror_takes_its_share_only_of_requests_naming_no_version_outside_sequences() -> None:
    registry = ModelRegistry()
    shadowed = model("m", 1, 2, pinned=1)
    shadowed.mirror = Mirror(2, 30.0)
    registry.publish(shadowed)
    primary = shadowed.versions[1]
    copies = sum(registry.mirror(shadowed, primary, InferRequest("m")) is not None for _ in range(2000))
    assert 450 <= copies <= 750
    assert all(registry.mirror(shadowed, primary, InferRequest("m", "1")) is None for _ in range(100))
    assert all(
        registry.mirror(shadowed, primary, InferRequest("m", sequence_id=5)) is None for _ in range(100)
    )
    assert registry.mirror(shadowed, shadowed.versions[2], InferRequest("m")) is None  # not onto itself


CHOICES = (
    "from naiad.repository.routing import choose; print([choose({1: 1, 2: 1, 3: 2}, {1, 2, 3}, c) for c in "
)


def test_a_sequence_gets_the_same_version_in_every_process() -> None:
    ids: list[int | str] = [*range(1, 40), "session-a", "session-b", "ü"]
    here = [choose({1: 1, 2: 1, 3: 2}, {1, 2, 3}, c) for c in ids]
    assert set(here) == {1, 2, 3}
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", CHOICES + repr(ids) + "])"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == repr(here)

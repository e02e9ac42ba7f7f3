"""Leader election decided as data (``reconcile.leadership``): who may hold the Lease and what it says;
and a standby's liveness, asked of a real operator process the way the kubelet's probe asks it.

The end-to-end half (two operator processes, the leader SIGKILLed) is scenario 7 of ``test_chaos.py``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from naiad_operator.reconcile import leadership

from tests.operator.chaos import OperatorProcess
from tests.operator.cluster import NS, Api
from tests.operator.harness import eventually
from tests.support.kmock_k8s import ApiServer

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def test_a_free_or_own_lease_may_be_held() -> None:
    assert leadership.may_hold(leadership.parse(None), "a", NOW)
    own = leadership.parse({"holderIdentity": "a", "renewTime": "2026-01-01T12:00:00.000000Z"})
    assert leadership.may_hold(own, "a", NOW)
    released = leadership.parse({"holderIdentity": "", "leaseDurationSeconds": 1})
    assert leadership.may_hold(released, "b", NOW)


def test_another_holders_lease_is_taken_only_once_it_ran_out() -> None:
    spec = {"holderIdentity": "a", "renewTime": "2026-01-01T12:00:00.000000Z", "leaseDurationSeconds": 15}
    record = leadership.parse(spec)
    assert not leadership.may_hold(record, "b", NOW + timedelta(seconds=15))
    assert leadership.may_hold(record, "b", NOW + timedelta(seconds=15.1))


def test_held_spec_counts_transitions_and_keeps_the_acquire_time_on_renewal() -> None:
    first = leadership.held_spec(leadership.parse(None), "a", NOW, 15)
    assert first == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-01T12:00:00.000000Z",
        "renewTime": "2026-01-01T12:00:00.000000Z",
        "leaseTransitions": 0,
    }
    renewed = leadership.held_spec(leadership.parse(first), "a", NOW + timedelta(seconds=2), 15)
    assert renewed["acquireTime"] == first["acquireTime"] and renewed["leaseTransitions"] == 0
    assert renewed["renewTime"] == "2026-01-01T12:00:02.000000Z"
    taken = leadership.held_spec(leadership.parse(renewed), "b", NOW + timedelta(seconds=20), 15)
    assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1
    assert taken["acquireTime"] == "2026-01-01T12:00:20.000000Z"


def _probe(url: str) -> tuple[int, Any]:
    """What a kubelet httpGet probe sees: the status code (0: nothing answers) and the body."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None


def test_a_standby_answers_its_liveness_probe_and_hands_the_port_to_kopf(
    api_server: ApiServer, tmp_path: Path
) -> None:
    """kopf serves ``--liveness`` only after startup, where a standby waits for the Lease: without its
    own answer the kubelet would restart a healthy standby again and again."""
    api = Api(api_server.url)
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    held = leadership.held_spec(leadership.parse(None), "other", datetime.now(UTC), 3600)
    api.create(leases, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": "naiad-operator", "namespace": NS}, "spec": held})  # fmt: skip
    standby = OperatorProcess(api_server.kubeconfig(tmp_path / "config"), tmp_path, "standby").start()
    try:
        eventually(lambda: "waiting for Lease" in standby.output(), 60, "the standby waits")
        code, body = eventually(lambda: (p := _probe(standby.liveness))[0] and p, 30, "a liveness answer")
        assert code == 200 and "waiting for Lease naiad-operator" in body["standby"], body
        assert "leading as" not in standby.output() and standby.alive
        # the holder hands the Lease over: the standby leads, and kopf's own endpoint answers the probe
        api.patch(f"{leases}/naiad-operator", {"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}})
        eventually(lambda: "leading as standby" in standby.output(), 60, "the standby leads")
        code, body = eventually(
            lambda: (p := _probe(standby.liveness))[0] == 200 and "standby" not in (p[1] or {}) and p,
            30,
            "kopf's liveness endpoint",
        )
        assert isinstance(body, dict) and standby.alive
    finally:
        standby.stop()

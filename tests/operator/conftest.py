"""Operator test settings: short intervals, so level-triggered passes happen within a test's patience.

They are set before anything imports the operator's handlers (timer intervals are fixed when handlers
register), and only the operator reads ``NAIAD_OPERATOR_*``.
"""

from __future__ import annotations

import os

os.environ.setdefault("NAIAD_OPERATOR_RECONCILE_INTERVAL", "1")
os.environ.setdefault("NAIAD_OPERATOR_SYNC_POLL_INTERVAL", "0.5")
os.environ.setdefault("NAIAD_OPERATOR_SYNC_RETRY_SECONDS", "3600")

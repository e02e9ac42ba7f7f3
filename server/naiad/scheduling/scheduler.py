"""The scheduler contract between the data plane and a model version's instances."""

from __future__ import annotations

from typing import Protocol

from naiad.core.request import InferRequest, InferResponse


class Scheduler(Protocol):
    """Accepts validated requests for one model version and answers each with its response."""

    async def submit(self, request: InferRequest) -> InferResponse:
        """Run ``request`` on some instance; raise ``InferenceServerError`` on failure."""
        ...

    def close(self) -> None:
        """Stop after in-flight work and release every instance."""
        ...

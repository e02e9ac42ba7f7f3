"""gRPC calls for a model another server holds, made again on that server and answered with its answer.

gRPC names the model inside the message, so no proxy in front of the pods can route by model: the
server that receives the call does.  When the data plane says a peer holds the model
(:meth:`naiad.dataplane.DataPlane.peer`), the request's bytes go unchanged to the same method on the
peer's gRPC port, with the caller's metadata, its deadline and ``naiad-forwarded: 1``; the peer's
response bytes (or, for a stream request, each of its responses) come back unchanged, and a status the
peer ends the call with becomes this call's status with the same message.  One channel per peer is kept
open.  A peer that cannot be reached is UNAVAILABLE, naming the model and the peer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import grpc

from naiad.core.errors import ErrorCode, InferenceServerError, UnavailableError
from naiad.frontends.grpc.errors import STATUS
from naiad.repository.peers import FORWARDED_HEADER, Peer

_SERVICE = "/inference.GRPCInferenceService/"
_CODES = {status: code for code, status in STATUS.items()}
#: Metadata that belongs to one call's transport, never passed on.
_TRANSPORT = frozenset({"user-agent", "content-type", "te", "host", FORWARDED_HEADER})

Metadata = list[tuple[str, str | bytes]]


def relayed_metadata(metadata: Iterable[tuple[str, Any]]) -> Metadata:
    """The caller's metadata to send on, with the loop guard."""
    sent: Metadata = [
        (key, value)
        for key, value in metadata
        if not key.startswith((":", "grpc-")) and key.lower() not in _TRANSPORT
    ]
    sent.append((FORWARDED_HEADER, "1"))
    return sent


def forwarded(headers: Mapping[str, str]) -> bool:
    """Whether the call came from a peer (so it is not forwarded again)."""
    return headers.get(FORWARDED_HEADER) == "1"


class GrpcRelay:
    """Calls peers' gRPC ports; ``await close()`` at exit."""

    def __init__(self, options: list[tuple[str, Any]]) -> None:
        """``options``: the channel options (message size limits as the server's)."""
        self._options = options
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _channel(self, peer: Peer) -> grpc.aio.Channel:
        address = peer.grpc_address
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address, options=self._options)
        return channel

    async def unary(
        self, peer: Peer, model: str, method: str, data: bytes, metadata: Metadata, timeout: float | None
    ) -> bytes:
        """The peer's response to ``method`` (a unary RPC of the inference service) with ``data``."""
        call = self._channel(peer).unary_unary(_SERVICE + method)
        try:
            answer: bytes = await call(data, metadata=metadata, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise _error(error, peer, model) from None
        return answer

    async def stream(
        self, peer: Peer, model: str, data: bytes, metadata: Metadata, timeout: float | None = None
    ) -> AsyncIterator[bytes]:
        """Every response of the peer to one ModelStreamInfer request, in order."""
        call = self._channel(peer).stream_stream(_SERVICE + "ModelStreamInfer")
        responses = call(iter((data,)), metadata=metadata, timeout=timeout)
        try:
            async for answer in responses:
                yield answer
        except grpc.aio.AioRpcError as error:
            raise _error(error, peer, model) from None
        finally:
            responses.cancel()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


def _error(error: grpc.aio.AioRpcError, peer: Peer, model: str) -> InferenceServerError:
    """The peer's status as this call's; a peer that cannot be reached said so clearly."""
    details = error.details() or ""
    if error.code() is grpc.StatusCode.UNAVAILABLE and "connect" in details.lower():
        return UnavailableError(
            f"model '{model}' is served by peer {peer.grpc_address}, which cannot be reached: {details}"
        )
    return InferenceServerError(details, _CODES.get(error.code(), ErrorCode.UNKNOWN))

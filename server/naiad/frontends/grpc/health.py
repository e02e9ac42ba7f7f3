"""``grpc.health.v1.Health/Check``, answered from server readiness as Triton does.

Like Triton, the requested service name is not looked at: the server is SERVING exactly when
``/v2/health/ready`` would say ready.  ``Watch`` is not offered (Triton does not offer it either).
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from naiad.codecs import grpc_v2
from naiad.dataplane import DataPlane
from naiad.frontends.grpc import errors
from naiad.frontends.grpc.errors import Context

SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"]


class HealthServicer:
    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    async def Check(self, data: bytes, context: Context) -> Any:
        grpc_v2.parse(health_pb2.HealthCheckRequest, data)
        response = health_pb2.HealthCheckResponse
        return response(status=response.SERVING if self.dataplane.ready() else response.NOT_SERVING)


def health_handler(servicer: HealthServicer) -> grpc.GenericRpcHandler:
    check = grpc.unary_unary_rpc_method_handler(
        errors.unary(servicer.Check, "Health/Check"),
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(SERVICE.full_name, {"Check": check})

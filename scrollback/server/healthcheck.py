"""`python -m scrollback.server.healthcheck ADDRESS [SERVICE]`: exit 0 when the server reports SERVING.

Used by docker-compose healthchecks, so images need no grpcurl or probe binary.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(address: str, service: str = "", timeout: float = 3.0) -> bool:
    """True when the health service at `address` answers SERVING for `service`."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


def main(argv: list[str]) -> int:
    """Run the check; 0 when serving, 1 otherwise, 2 on bad usage."""
    if not 1 <= len(argv) <= 2:
        print("usage: python -m scrollback.server.healthcheck ADDRESS [SERVICE]", file=sys.stderr)
        return 2
    address = argv[0]
    service = argv[1] if len(argv) == 2 else ""
    return 0 if check(address, service) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

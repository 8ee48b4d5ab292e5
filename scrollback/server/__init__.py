"""Server plumbing both gRPC services share.

`grpc_support` (health, reflection, bind rule, the error table), `interceptors`
(the chain around every RPC: auth, request checks, limits, RPC logs, stalls),
`auth` (token file, principals), `service_cli` / `service_config` (flags and
config rules common to both),
`metrics`, `memory` (allocator settings) and `healthcheck` (the probe compose
uses). Services import from here; nothing here imports a service.
"""

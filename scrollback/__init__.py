"""Scrollback's base package: what both services and the client stand on.

- `scrollback.ref.v1`, `scrollback.history.v1`, `scrollback.media.v1`: code
  generated from `protos/` by `tools/codegen.py` (never edited by hand).
- `scrollback.contract`: the rules both services apply identically (reference
  codec, image enumeration, textual stripping, extraction); no grpc.
- `scrollback.transcripts`: the one place a session id becomes a jailed path.
- `scrollback.state`: the state database schema and its migrations.
- `scrollback.server`: plumbing both servers share (health, reflection, bind
  rule, error table, auth, interceptors, metrics, service flags and config).

Nothing here imports a service, the client or an application; see
docs/architecture.md for the layers and the import check that keeps them.
"""

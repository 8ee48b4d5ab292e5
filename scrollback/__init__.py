"""Scrollback's shared package: the generated proto code and the contract code.

`scrollback.ref.v1`, `scrollback.history.v1` and `scrollback.media.v1` are
generated from `protos/` by `tools/codegen.py`. `scrollback.contract` holds the
rules both services must apply identically (reference codec, image
enumeration, textual stripping, extraction); it imports no grpc.
"""

"""The contract code both services import: one copy, no grpc.

- `refs`: the codec and validation of both reference forms (docs/contract.md §4).
- `enumeration`: the image-enumeration rule (docs/contract.md §2).
- `stripping`: the textual line stripper (docs/contract.md §3).
- `extraction`: one image's exact bytes and pin from one line, through the
  same enumeration and stripping code.
- `marker`: the stripped-media marker, read from the proto option.
- `blocks`: where a probed line's objects are in its text (`scrollback slim`).
- `image_header`: an image's format and pixel size from a bounded header read.
- `sniff`: the content type of media from its magic numbers (docs/contract.md §10), also
  what the CLI checks before sending a file as an image.
- `proto_json`: the one JSON shape of messages (the canonical proto3 JSON mapping).
"""

"""The stripper's size limits (docs/contract.md §3), in a module that imports nothing.

`scrollback.contract.stripping` uses them and exports them; the services'
configuration modules read them from here, so that a workers' parent, which
loads only its configuration, does not load the stripper, its libraries and
the protobuf runtime its marker comes from.
"""

from __future__ import annotations

# A base64 string value at least this long (raw text) is cut out of a served line.
DEFAULT_INLINE_LIMIT = 32 * 1024
# The smallest inline limit a request may ask for (and the extractor's own).
MIN_INLINE_LIMIT = 1024
# A line still longer than this once stripped is served as the oversize stub.
DEFAULT_MAX_LINE_SIZE = 16 * 1024 * 1024

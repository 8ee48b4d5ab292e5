"""opencode's sessions, read from its SQLite database (docs/contract.md §1, "opencode").

`db` opens the database read-only and maps its errors, `view` presents one
session as the bytes of a JSONL transcript built from the rows' own bytes,
`source` is the TranscriptSource over the database, and `combined` serves it
beside the transcripts of a directory or a bucket.
"""

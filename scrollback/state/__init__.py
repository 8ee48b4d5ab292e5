"""The embedded state store both services share: one SQLite database in the state dir.

It holds the acceptance record of messages (history service) and the
content-addressed blob metadata (media service). `AcceptMessage` writes its
`blob_ref` rows in the same transaction as the message, so both tables live in
one database. Schema changes are versioned migrations, applied once each, in order.
"""

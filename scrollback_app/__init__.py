"""The application layer: the `scrollback` command, benchmarks and the load test.

`cli` parses the command line (`up`, `bench`, `loadtest` and the client
commands in `cli_client`), `bench` measures every figure beside its baseline,
`loadtest` drives both services. It sits on top of everything: it may import
the services and the client; nothing imports it.
"""

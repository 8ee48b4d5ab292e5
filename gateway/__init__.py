"""The HTTP gateway: a browser's way to Scrollback (`python -m gateway`, `scrollback gateway`).

An ASGI app (Starlette, served by uvicorn) that is a gRPC *client* of the
history and media services through `client.aio`: it serves JSON windows whose
photo references carry signed URLs, streams photos from ReadMedia with caching
and sandboxing headers, relays WatchSession as Server-Sent Events, and serves
a dependency-free viewer page. It never reads transcript files.
"""

# One image for every Scrollback service; docker-compose.yml picks the command.
#
# PYTHON_IMAGE is any image with Python >= 3.11 and its venv module (the tests
# pass a Debian bookworm base they build offline, see tests/integration/deploy).
# An optional wheelhouse/ directory in the build context (the dependencies and
# build requirements as wheels, from `pip wheel` or `pip download`) makes the
# install offline: pip then reads it alone, with no index.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/scrollback/bin:$PATH

# .dockerignore keeps the context to the packages, pyproject.toml and README.md
# (and wheelhouse/): a new top-level package needs a line there, not here.
COPY . /src/
# The venv gives every base image the same `python` (Debian's has only python3).
# /state is writable by any user, sticky like /tmp: compose's `user:` may be the
# owner of the mounted transcripts rather than the image's user.
RUN set -eu; \
    if ls /src/wheelhouse/*.whl >/dev/null 2>&1; then \
        set -- --no-index --find-links /src/wheelhouse; \
    fi; \
    python3 -m venv /opt/scrollback; \
    /opt/scrollback/bin/pip install --no-cache-dir "$@" /src; \
    rm -rf /src; \
    useradd --system --uid 10001 --no-create-home scrollback; \
    mkdir -p /state; \
    chmod 1777 /state

USER 10001
WORKDIR /
# The default command serves /transcripts (mount the host's ~/.claude/projects there) on
# 0.0.0.0, so that `docker run -p 127.0.0.1:50051:50051 -p 127.0.0.1:50052:50052` reaches it:
# with auth when a token file is mounted at /run/secrets/scrollback-tokens, else without
# (--insecure), which its log says. docker-compose.yml gives each service its own command.
ENV SCROLLBACK_TRANSCRIPTS=/transcripts \
    SCROLLBACK_STATE=/state
EXPOSE 50051 50052
CMD ["scrollback", "up", "--container"]

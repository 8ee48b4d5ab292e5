# One image for both services; docker-compose.yml picks the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY scrollback ./scrollback
COPY history_service ./history_service
COPY media_service ./media_service
COPY client ./client
COPY gateway ./gateway
RUN pip install --no-cache-dir . && useradd --system --uid 10001 scrollback \
    && mkdir -p /state && chown scrollback /state

USER scrollback
EXPOSE 50051 50052
CMD ["scrollback", "up"]

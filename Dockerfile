# The agentloop image: the `agentloop` worker (default command) and, with another command, the
# example service and the codec server (see docker-compose.yml). Everything is installed while building; at run time
# the container needs no network beyond Temporal, PostgreSQL, the example service and the model
# APIs, and downloads nothing.
#
#   docker build -t agentloop:1.0.0 .
#   docker run --rm -e TEMPORAL_ADDRESS=host:7233 -e AGENTLOOP_CODEC_KEYS=k1:... \
#       -e AGENTLOOP_APPROVER_KEYS=NAME=ed25519:... agentloop:1.0.0        # a worker

# The interpreter CI tests on (pyproject: requires-python >= 3.11); the slim Debian image keeps
# the runtime small, and the psycopg/temporalio wheels bring their own native libraries.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: install the project (no dev extras) into a self-contained virtualenv ----------
FROM ${PYTHON_IMAGE} AS build

# Bytecode is compiled here, once: the runtime's virtualenv is read-only to its user.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/agentloop

WORKDIR /src
COPY pyproject.toml README.md ./
COPY agentloop ./agentloop
RUN /opt/agentloop/bin/pip install ".[otel]" \
    && /opt/agentloop/bin/agentloop --help >/dev/null

# ---- runtime: the virtualenv, a non-root user, nothing else ---------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="agentloop" \
      org.opencontainers.image.description="A durable AI-agent tool-calling loop that runs as a Temporal service"

# Production unless told otherwise: a worker refuses to start without approver keys, codec keys
# and the workers' stream key (AGENTLOOP_APPROVER_KEYS, AGENTLOOP_CODEC_KEYS,
# AGENTLOOP_STREAM_KEY, or their *_FILE secrets).
ENV PATH=/opt/agentloop/bin:$PATH \
    AGENTLOOP_ENV=production \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_INDEX=1

# A fixed uid/gid so volume ownership is predictable. /data is where the example service keeps
# its SQLite file; a new named volume mounted there inherits this ownership.
RUN groupadd --system --gid 10001 agentloop \
    && useradd --system --uid 10001 --gid agentloop --create-home \
       --home-dir /home/agentloop --shell /usr/sbin/nologin agentloop \
    && install -d -o agentloop -g agentloop /data

COPY --from=build /opt/agentloop /opt/agentloop

# Numeric, so a runtime that must prove "not root" (Kubernetes runAsNonRoot) can.
USER 10001:10001
WORKDIR /home/agentloop

# Configuration comes from the environment (agentloop/config.py): TEMPORAL_ADDRESS,
# TEMPORAL_NAMESPACE, AGENT_LOOP_TASK_QUEUE, AGENTLOOP_STORE_URL, AGENTLOOP_EXAMPLE_SERVICE_URL,
# OPENAI_API_KEY, ANTHROPIC_API_KEY, ... The worker stops cleanly on SIGTERM.
CMD ["agentloop", "worker"]

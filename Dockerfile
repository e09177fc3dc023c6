# The Sokovan image: one image for every command (`sokovan manager`, `agent`, `proxy`,
# `db upgrade`, `admin bootstrap`, the client commands). docker-compose.yml builds and runs it.
#
#   docker build -t sokovan:local .
#   docker run --rm sokovan:local --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The daemons run as this user. /var/lib/sokovan holds an agent's work dir and state file (a volume
# in docker-compose.yml); kernels must be able to traverse its parents, hence 0755.
RUN useradd --system --create-home --home-dir /home/sokovan --uid 10001 --user-group sokovan \
    && install -d -o sokovan -g sokovan -m 0755 /var/lib/sokovan

# `sokovan images build` makes the default kernel images from this machine's own files: busybox
# (the `shell` image) and Debian's python3 with its libraries (`python:3`).
RUN apt-get update \
    && apt-get install -y --no-install-recommends busybox-static python3 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/sokovan
COPY pyproject.toml alembic.ini ./
COPY migrations ./migrations
COPY src ./src
# Editable on purpose: `sokovan db upgrade` finds alembic.ini and migrations/ next to src/, as in a
# checkout (sokovan.db.migrate), which a plain site-packages install would not have.
RUN pip install -e .

USER sokovan
WORKDIR /home/sokovan
ENTRYPOINT ["sokovan"]
CMD ["--help"]

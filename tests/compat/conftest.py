"""The compat tests run over the REST tests' app: `api` (real PostgreSQL/Redis/etcd, two agents,
an admin and the users alice and bob) and its `ctx`."""

from tests.api.conftest import api, ctx, publisher

__all__ = ["api", "ctx", "publisher"]

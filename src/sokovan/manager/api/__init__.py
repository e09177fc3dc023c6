"""REST v2: `create_app(ctx)` builds the aiohttp application the manager serves."""

from sokovan.manager.api.app import create_app

__all__ = ["create_app"]

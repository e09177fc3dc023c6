"""`GET /v2/fair-share` (admin): each domain's, project's and user's standing under the
`fair_share` scheduler (CONTRACT section 16), as the placement lane sees it.

The view is the one the scheduler orders by (`state.fair_share_usage`, settings from etcd
`<prefix>/config/manager/fair_share`), read afresh at the request's time (the placement lane
reuses its own for a few seconds): it is cluster-wide and shown whether or not a scaling group
uses `fair_share`.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from aiohttp import web
from pydantic import BaseModel, Field

from sokovan.manager.api.auth import CTX_KEY, require_admin
from sokovan.manager.api.common import json_response
from sokovan.manager.api.config import CLUSTER_CONFIG_KEY
from sokovan.manager.api.openapi import Route
from sokovan.state.fair_share_usage import read_fair_share

PLACES = 6  # what is shown of each number


class FairShareItem(BaseModel):
    level: Literal["domain", "project", "user"]
    name: str = Field(description="the domain's, project's or user's name")
    path: list[str] = Field(description="[domain], [domain, project] or [domain, project, user]")
    usage: float = Field(description="decayed usage as a fraction of the cluster's decayed capacity")
    share: float = Field(description="entitled share among its siblings: its weight / theirs")
    factor: float = Field(description="2^(-usage/share): 1 = unused; higher goes first")


class FairShareList(BaseModel):
    """Tree order: each domain, then each of its projects followed by that project's users."""

    items: list[FairShareItem]


async def get_fair_share(request: web.Request) -> web.Response:
    require_admin(request)
    config = request.app[CLUSTER_CONFIG_KEY].fair_share
    async with request.app[CTX_KEY].engine.connect() as conn:
        read = await read_fair_share(conn, config, dt.datetime.now(dt.UTC))
    items = [
        FairShareItem(
            level=share.level,
            name=path[-1],
            path=path,
            usage=round(share.usage, PLACES),
            share=round(share.share, PLACES),
            factor=round(share.factor, PLACES),
        )
        for share in read.view.items()
        for path in [read.named(share.path)]
    ]
    items.sort(key=lambda i: i.path)  # tree order, by name
    return json_response(FairShareList(items=items))


ROUTES = [
    Route(
        "GET",
        "/v2/fair-share",
        get_fair_share,
        "Each domain's, project's and user's decayed usage, entitled share and fair-share factor",
        {200: FairShareList},
        admin=True,
    ),
]

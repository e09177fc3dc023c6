"""Backend.AI's own client against Sokovan (issue 35): the wire protocol of `backend.ai-client`
26.9 (the `backend.ai` CLI and `ai.backend.client`), mounted beside `/v2` on the same app, sharing its
controllers, authorization and problem documents.

- `signature`: requests signed with a keypair's secret key (`Authorization: BackendAI ...`), their
  date window and replay guard; the auth middleware hands such requests here.
- `root`: `GET /` (the API version the client reads first) and `GET /manager/announcement`.
- `sessions`: `POST /session`, `GET|DELETE /session/{name or id}`, `GET /session/{x}/logs`.
- `events`: `GET /events/session`, Sokovan's events as the client's server-sent events.
- `gql`: `POST /admin/gql`, the three GraphQL roots the client reads (graphql-core).
- `mapping`: Sokovan's statuses and results as the client's.
- `routes`: all of them, for the app to mount (a module of its own: `auth` imports `signature`, so
  this package imports nothing when it loads).
"""

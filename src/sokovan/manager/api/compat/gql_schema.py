"""The GraphQL schema that Backend.AI's client reads at `POST /admin/gql`, as SDL, with its scalars.

Three roots: `keypair` (the caller's keypair), `compute_session_list` and `compute_session`, with
the fields and arguments of Backend.AI's own schema that its client selects (`backend.ai ps`,
`session info`, `admin keypair info`). A field Sokovan has no value for is null (or an empty list
where the client's formatter needs a list). `JSONString` fields carry JSON encoded in a string, as
Backend.AI's graphene `JSONString` does; the resolvers are attached by `gql_resolvers`.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from graphql import GraphQLScalarType, GraphQLSchema, StringValueNode, ValueNode, build_schema

SDL = """
scalar UUID
scalar DateTime
scalar JSONString

type Query {
  keypair(domain_name: String, access_key: String): KeyPair
  compute_session_list(
    limit: Int!
    offset: Int!
    filter: String
    order: String
    domain_name: String
    group_id: String
    access_key: String
    status: String
  ): ComputeSessionList
  compute_session(id: UUID!): ComputeSession
}

type UserInfo {
  email: String
  full_name: String
}

type KeyPair {
  user_id: String
  full_name: String
  user_info: UserInfo
  user: UUID
  projects: [String]
  access_key: String
  secret_key: String
  is_active: Boolean
  is_admin: Boolean
  created_at: DateTime
  modified_at: DateTime
  last_used: DateTime
  resource_policy: String
  rate_limit: Int
  num_queries: Int
  concurrency_used: Int
  ssh_public_key: String
  ssh_private_key: String
  dotfiles: String
  bootstrap_script: String
}

type ComputeSessionList {
  items: [ComputeSession]!
  total_count: Int!
}

type ComputeSession {
  id: UUID
  session_id: UUID
  main_kernel_id: UUID
  tag: String
  name: String
  type: String
  main_kernel_role: String
  priority: Int
  image: String
  architecture: String
  registry: String
  cluster_template: String
  cluster_mode: String
  cluster_size: Int
  domain_name: String
  group_name: String
  group_id: UUID
  user_email: String
  full_name: String
  user_id: UUID
  access_key: String
  created_user_email: String
  created_user_id: UUID
  status: String
  status_changed: DateTime
  status_info: String
  status_data: JSONString
  status_history: JSONString
  created_at: DateTime
  terminated_at: DateTime
  starts_at: DateTime
  scheduled_at: DateTime
  startup_command: String
  result: String
  commit_status: String
  abusing_reports: [JSONString]
  idle_checks: JSONString
  agent_ids: [String]
  agents: [String]
  resource_opts: JSONString
  scaling_group: String
  service_ports: JSONString
  mounts: [String]
  vfolder_mounts: [String]
  occupying_slots: JSONString
  occupied_slots: JSONString
  requested_slots: JSONString
  num_queries: Int
  containers: [ComputeContainer]
  dependencies: [ComputeSession]
}

type ComputeContainer {
  id: UUID
  kernel_id: UUID
  idx: Int
  role: String
  hostname: String
  cluster_idx: Int
  cluster_role: String
  cluster_hostname: String
  session_id: UUID
  image: String
  architecture: String
  registry: String
  status: String
  status_changed: DateTime
  status_info: String
  status_data: JSONString
  created_at: DateTime
  terminated_at: DateTime
  starts_at: DateTime
  scheduled_at: DateTime
  agent: String
  container_id: String
  resource_opts: JSONString
  occupied_slots: JSONString
  preopen_ports: [Int]
  live_stat: JSONString
  last_stat: JSONString
}
"""


def _uuid_out(value: Any) -> str:
    return str(value)


def _uuid_in(value: Any) -> uuid.UUID:
    if not isinstance(value, str):
        raise ValueError("a UUID must be a string")
    return uuid.UUID(value)  # a ValueError: GraphQL answers "got invalid value"


def _uuid_literal(node: ValueNode, _variables: Any = None) -> uuid.UUID:
    if not isinstance(node, StringValueNode):
        raise ValueError("a UUID must be a string")
    return _uuid_in(node.value)


def _datetime_out(value: Any) -> str:
    """ISO 8601 in UTC (`...Z`); the session reads already give their times so."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return str(value)


def _json_out(value: Any) -> str:
    return json.dumps(value)


def _output_only(value: Any, _variables: Any = None) -> Any:
    raise ValueError("this scalar is not accepted as an argument")


# What a scalar's behaviour is made of: graphql-core 3.2 reads the first three, 3.3 the others
# (filled from the first three by its constructor).
_BEHAVIOUR = (
    "serialize",
    "parse_value",
    "parse_literal",
    "coerce_output_value",
    "coerce_input_value",
    "coerce_input_literal",
)


def build() -> GraphQLSchema:
    """The schema, its custom scalars serialized as Backend.AI's graphene scalars are."""
    schema = build_schema(SDL)
    scalars = [
        GraphQLScalarType("UUID", _uuid_out, _uuid_in, _uuid_literal),
        GraphQLScalarType("DateTime", _datetime_out, _output_only, _output_only),
        GraphQLScalarType("JSONString", _json_out, _output_only, _output_only),
    ]
    for made in scalars:
        built = schema.type_map[made.name]
        for attr in _BEHAVIOUR:
            if hasattr(made, attr):
                setattr(built, attr, getattr(made, attr))
    return schema

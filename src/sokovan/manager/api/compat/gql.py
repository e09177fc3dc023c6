"""`POST /admin/gql`: the GraphQL that Backend.AI's client sends (`{"query", "variables"}`), run by
graphql-core over `gql_schema` and `gql_resolvers`.

The answer is GraphQL's own: 200 with `data` (the fields in the order the query selects them:
the client's tables pair columns with values by position) and, when something went wrong in the
query, `errors` (the client raises on those). A body that is not a JSON object is a 400 problem
document, one without a `query` string a 422, as for every route. A query is bounded before it
runs: at most `MAX_TOKENS` tokens and `MAX_DEPTH` levels of fields (a session's `dependencies`
are sessions again), introspection aside. An unexpected failure inside a resolver is not folded
into `errors`: it goes on to the API's middlewares (a 503 when the database is away).
"""

from __future__ import annotations

from inspect import isawaitable
from typing import Any

from aiohttp import web
from graphql import (
    DocumentNode,
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    execute,
    parse,
    validate,
)
from pydantic import BaseModel, ConfigDict, Field

from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.compat.gql_resolvers import GqlContext, attach
from sokovan.manager.api.compat.gql_schema import build
from sokovan.manager.api.openapi import Route
from sokovan.manager.api.problems import parse_body

SCHEMA = attach(build())
MAX_TOKENS = 2000  # the client's longest query (`ps -f` with every field) has under 150
MAX_DEPTH = 6  # compute_session_list { items { dependencies { containers { id } } } } is 5


class GqlRequest(BaseModel):
    """A GraphQL request, as Backend.AI's client sends it."""

    model_config = ConfigDict(populate_by_name=True)

    query: str = Field(max_length=100_000)
    variables: dict[str, Any] | None = None
    operation_name: str | None = Field(default=None, alias="operationName")


class GqlAnswer(BaseModel):
    """A GraphQL response: `data` (absent when the query could not run) and any `errors`."""

    data: dict[str, Any] | None = None
    errors: list[dict[str, Any]] | None = None


def _depth(
    selections: SelectionSetNode | None,
    fragments: dict[str, FragmentDefinitionNode],
    visiting: frozenset[str] = frozenset(),
) -> int:
    """How many levels of fields `selections` nests, through its fragments (a fragment cycle is
    left to validation, which refuses it); introspection (`__schema`, `__type`) counts one level."""
    deepest = 0
    for node in selections.selections if selections else ():
        if isinstance(node, FieldNode):
            below = 0 if node.name.value.startswith("__") else _depth(node.selection_set, fragments, visiting)
            deepest = max(deepest, 1 + below)
        elif isinstance(node, InlineFragmentNode):
            deepest = max(deepest, _depth(node.selection_set, fragments, visiting))
        elif isinstance(node, FragmentSpreadNode):
            name = node.name.value
            fragment = fragments.get(name)
            if fragment is not None and name not in visiting:
                deepest = max(deepest, _depth(fragment.selection_set, fragments, visiting | {name}))
    return deepest


def query_depth(document: DocumentNode) -> int:
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    return max((_depth(op.selection_set, fragments) for op in operations), default=0)


def _checked(query: str) -> DocumentNode | list[GraphQLError]:
    """The parsed query, or why it will not run."""
    try:
        document = parse(query, max_tokens=MAX_TOKENS)
        if query_depth(document) > MAX_DEPTH:
            return [GraphQLError(f"the query nests fields deeper than {MAX_DEPTH} levels")]
        return validate(SCHEMA, document) or document
    except GraphQLError as exc:
        return [exc]
    except RecursionError:
        return [GraphQLError(f"the query nests fields deeper than {MAX_DEPTH} levels")]


def _raise_unexpected(result: ExecutionResult) -> None:
    """A resolver's own failure (not a GraphQLError it raised on purpose) goes on to the API's
    middlewares; argument and variable errors stay GraphQL errors."""
    for error in result.errors or ():
        original = error.original_error
        if error.path is not None and original is not None and not isinstance(original, GraphQLError):
            raise original


def _answer(payload: dict[str, Any]) -> web.Response:
    return web.json_response(payload)


async def admin_gql(request: web.Request) -> web.Response:
    principal = principal_of(request)
    body = await parse_body(request, GqlRequest)
    checked = _checked(body.query)
    if isinstance(checked, list):
        return _answer({"errors": [e.formatted for e in checked]})
    context = GqlContext(request.app[CTX_KEY].engine, principal)
    outcome = execute(
        SCHEMA,
        checked,
        context_value=context,
        variable_values=body.variables,
        operation_name=body.operation_name,
    )
    result = await outcome if isawaitable(outcome) else outcome
    _raise_unexpected(result)
    return _answer(dict(result.formatted))


ROUTES = [
    Route(
        "POST",
        "/admin/gql",
        admin_gql,
        "Backend.AI's GraphQL for its client: keypair, compute_session_list and compute_session",
        {200: GqlAnswer},
        request=GqlRequest,
    ),
]

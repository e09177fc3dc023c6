"""A refused request reads as the validator wrote it: no pydantic "Value error, " in front."""

from __future__ import annotations

from tests.api.conftest import Api


async def test_a_batch_session_without_a_command_is_refused_in_words(api: Api) -> None:
    resp = await api.create(api.alice, command=None)
    assert resp.status == 422
    body = await resp.json()
    assert body["detail"] == "command: a batch session needs a command", body
    assert [e["message"] for e in body["errors"]] == ["a batch session needs a command"]
    assert "Value error" not in await resp.text()

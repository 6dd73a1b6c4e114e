"""What the schemathesis run over the served OpenAPI found (tests/reliability/test_openapi_fuzz.py),
each kept as the failing case: every one of these answered 500 or an answer the schema did not
document before the fix (the PostgreSQL roles finding is in test_pg_roles.py)."""

from __future__ import annotations

import pytest

from shared.settings import Settings
from tests.helpers.console_server import console_client, first_admin
from tests.reliability.hostile import HTTP_HOSTILE

JSON = {"content-type": "application/json"}
HOLD = "/v1/tasks/T-none/hold"  # an operator verb with a {reason} body, parsed by FastAPI


@pytest.mark.parametrize("label", ["estimate NaN", "estimate Infinity", "label NaN", "name with NUL",
                                   "name lone surrogate", "env value lone surrogate", "nested 100,000 deep",
                                   "binary", "unclosed nesting"])  # fmt: skip
async def test_a_hostile_json_body_on_a_route_fastapi_parses_is_a_422_in_the_validation_shape(
    fresh_settings: Settings, label: str
) -> None:
    """Was 500 (NaN or an unpaired surrogate echoed into the 422 broke its JSON encoding; a binary
    body's bytes could not be encoded) or an undocumented 400 (deep nesting)."""
    async with console_client(fresh_settings, await first_admin(fresh_settings)) as client:
        answer = await client.post(HOLD, content=HTTP_HOSTILE[label], headers=JSON)
    assert answer.status_code == 422, answer.text
    assert all(set(error) == {"loc", "msg", "type"} and error["loc"][0] == "body" for error in answer.json()["detail"])


async def test_a_body_that_is_not_json_is_a_415_on_every_route(fresh_settings: Settings) -> None:
    async with console_client(fresh_settings, await first_admin(fresh_settings)) as client:
        plain = await client.post(HOLD, content=b'{"reason": "x"}', headers={"content-type": "text/plain"})
        binary = await client.post("/v1/tokens", content=bytes(range(256)), headers={"content-type": "application/octet-stream"})
    assert plain.status_code == binary.status_code == 415, (plain.text, binary.text)
    assert "application/json" in plain.json()["detail"]


@pytest.mark.parametrize("url", ["/v1/tasks?project=%00", "/v1/lookup/task?ref=a%00b", "/v1/audit/why/%00",
                                 "/v1/rounds/%ED%A0%80", "/v1/tasks?name=%ED%A0%80"])  # fmt: skip
async def test_text_postgresql_cannot_store_in_a_path_or_query_is_a_422(fresh_settings: Settings, url: str) -> None:
    """Was 500: the NUL reached PostgreSQL."""
    async with console_client(fresh_settings, await first_admin(fresh_settings)) as client:
        answer = await client.get(url)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"][0] in ("path", "query")


@pytest.mark.parametrize("deadletter_id", ["NaN", "6025848-94161109232745491224", "x" * 5000])
async def test_a_deadletter_id_that_is_no_stream_id_is_a_422_not_a_redis_error(fresh_settings: Settings, deadletter_id: str) -> None:
    async with console_client(fresh_settings, await first_admin(fresh_settings)) as client:
        shown = await client.get(f"/v1/deadletters/{deadletter_id}")
        replayed = await client.post(f"/v1/deadletters/{deadletter_id}/replay", json={"reason": "fuzz"})
        purged = await client.post("/v1/deadletters/purge", json={"reason": "fuzz", "ids": [deadletter_id]})
    assert shown.status_code == replayed.status_code == purged.status_code == 422, (shown.text, replayed.text, purged.text)


async def test_a_board_snapshot_reason_with_a_control_character_or_chinese_is_stored(fresh_settings: Settings) -> None:
    """Was 500: the reason went into S3 metadata (an HTTP header) as it was."""
    async with console_client(fresh_settings, await first_admin(fresh_settings)) as client:
        answer = await client.post("/v1/board/snapshot", json={"reason": "\u00e1\u0012S 为周会准备"})
    assert answer.status_code == 201, answer.text


async def test_a_route_refusing_a_value_itself_answers_in_the_documented_422_shape(fresh_settings: Settings) -> None:
    """Was `{"detail": "<sentence>"}` where the OpenAPI promises HTTPValidationError."""
    async with console_client(fresh_settings, await first_admin(fresh_settings)) as client:
        answer = await client.get("/v1/ledger", params={"since": "2026-12-01T00:00:00Z", "until": "2026-11-01T00:00:00Z"})
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == ["query", "until"] and "must be after since" in error["msg"]


async def test_the_openapi_documents_the_answers_every_v1_operation_may_give(fresh_settings: Settings) -> None:
    """Was: 401, 403, 404 (unknown ids and names), 413 and 415 answered but not documented."""
    async with console_client(fresh_settings) as client:
        schema = (await client.get("/openapi.json")).json()
    paths = schema["paths"]
    assert {"401", "403", "413", "415", "422"} <= set(paths["/v1/tasks/{task_id}/hold"]["post"]["responses"])
    assert "404" in paths["/v1/tasks/{task_id}/hold"]["post"]["responses"]
    assert "404" in paths["/v1/config/show"]["get"]["responses"] and "404" in paths["/v1/review"]["get"]["responses"]
    assert "401" not in paths["/v1/labels"]["get"]["responses"]  # the one /v1 route open to all

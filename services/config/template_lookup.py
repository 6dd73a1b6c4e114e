"""The templates a batch of submissions names, loaded in two queries, for intake's pure screening.

    lookup = await load_template_lookup(conn, [request.raw for request in requests])
    decisions = screen(requests, new_id, lookup)     # pure: resolve_submission(raw, lookup)

Only the templates the batch names are read: their latest version numbers, then the content of
each (name, version) needed. A version never changes once written, so parsed documents are kept
in a small process-wide cache keyed by (name, version).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import asyncpg

from services.config.store import SCHEMA
from shared.config import FoundTemplate, TemplateCall, TemplateDocument, TemplateLookup, template_document, validate_document
from shared.config.submission_templates import TEMPLATE_FIELD, parse_call, unknown_template
from shared.submission import Problem

_CACHE_SIZE = 512
_parsed: OrderedDict[tuple[str, int], TemplateDocument] = OrderedDict()


async def load_template_lookup(conn: asyncpg.Connection, raws: Iterable[Any]) -> TemplateLookup:
    """A lookup over the templates that `raws` (raw submission bodies) name."""
    calls = [call for call in map(_call_of, raws) if call is not None]
    if not calls or not await conn.fetchval(f"SELECT to_regclass('{SCHEMA}.versions') IS NOT NULL"):
        return _lookup({}, {})
    names = sorted({call.name for call in calls})
    rows = await conn.fetch(
        f"SELECT name, max(version) AS latest FROM {SCHEMA}.versions WHERE name = ANY($1::text[]) GROUP BY name",
        [template_document(name).name for name in names],
    )
    latest = {row["name"].removeprefix("templates/"): row["latest"] for row in rows}
    wanted = {(c.name, c.version or latest[c.name]) for c in calls if c.name in latest}
    wanted = {(name, version) for name, version in wanted if version <= latest[name]}
    await _load_missing(conn, wanted - set(_parsed))
    return _lookup(latest, {key: _parsed[key] for key in wanted if key in _parsed})


def _call_of(raw: Any) -> TemplateCall | None:
    if isinstance(raw, (bytes, str)):  # an HTTP body: decoded (and checked) again by screening
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return None
    if not isinstance(raw, dict) or raw.get(TEMPLATE_FIELD) is None:
        return None
    call = parse_call(raw[TEMPLATE_FIELD])
    return call if isinstance(call, TemplateCall) else None


async def _load_missing(conn: asyncpg.Connection, keys: set[tuple[str, int]]) -> None:
    if not keys:
        return
    ordered = sorted(keys)
    rows = await conn.fetch(
        f"SELECT v.name, v.version, v.content FROM {SCHEMA}.versions AS v"
        " JOIN unnest($1::text[], $2::int[]) AS k(name, version) ON v.name = k.name AND v.version = k.version",
        [template_document(name).name for name, _ in ordered], [version for _, version in ordered],
    )  # fmt: skip
    for row in rows:
        name = row["name"].removeprefix("templates/")
        _parsed[(name, row["version"])] = validate_document(template_document(name), row["content"]).model
        _parsed.move_to_end((name, row["version"]))
    while len(_parsed) > _CACHE_SIZE:
        _parsed.popitem(last=False)


def _lookup(latest: dict[str, int], documents: dict[tuple[str, int], TemplateDocument]) -> TemplateLookup:
    def lookup(call: TemplateCall) -> FoundTemplate | Problem:
        versions = latest.get(call.name, 0)
        version = call.version if call.version is not None else versions
        document = documents.get((call.name, version))
        if document is None:
            return unknown_template(call, versions)
        return FoundTemplate(call.name, version, document)

    return lookup

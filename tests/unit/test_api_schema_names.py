"""Every request body in the console's OpenAPI document has a schema name chosen in the code: a name
FastAPI makes up for an embedded body (`Body_delete_agent_v1_agents__agent_id__delete`) is what
clients generated from the document would call their types."""

from __future__ import annotations

from services.console.app import create_app
from shared.settings import Settings

# The document needs no database: the app is built but its lifespan (which connects) never runs.
SETTINGS = Settings(database_url="postgresql://unused@127.0.0.1:1/unused")  # type: ignore[arg-type]


def test_no_request_body_schema_has_a_generated_name() -> None:
    schemas = create_app(SETTINGS).openapi()["components"]["schemas"]
    generated = sorted(name for name in schemas if name.startswith("Body_"))
    assert generated == [], f"name these request bodies with a model of their own: {generated}"

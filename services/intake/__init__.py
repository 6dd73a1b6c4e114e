"""The intake service: `cf:ingest` entries and HTTP submissions become tasks (see README.md)."""

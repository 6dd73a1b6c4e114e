"""The gate: forwards each service's own event stream to `cf:events` once its owner is checked (see README.md)."""

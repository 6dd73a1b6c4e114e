-- When the latest report a lease was renewed on reached `cf:reports` (Redis's clock, from the entry id):
-- a finished run is charged no earlier than this (`shared.leasing.work.run_end`), where before it was
-- charged no earlier than the renewal was APPLIED — so a heartbeat read late (the dispatcher behind on
-- the stream, e.g. after a Redis outage) billed the run past its end. NULL on leases stored before:
-- `run_end` then falls back to `last_renewed_at`, as before.
ALTER TABLE leases ADD COLUMN last_heard_at timestamptz;

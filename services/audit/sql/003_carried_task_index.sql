-- A task's usage is archived inside `usage.batch_recorded` carriers (one per ledger batch and project, a slice
-- per lease), which name no one task in `task_id`. `audit.carried_task_ids(body)` lists the tasks a carrier's
-- slices name, and a GIN index over it, partial to the carriers (about one per hundred tasks), finds a task's
-- carriers without reading the others: `services.audit.reading.task_events` (`cardflow audit why`) asked
-- `strpos(body, ...)` of every carrier archived since the task's first event before (linear in the archive).
-- An expression index is built from the rows already archived, so the append-only table is not updated.
CREATE FUNCTION carried_task_ids(body text) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT ARRAY(SELECT DISTINCT piece ->> 'task_id'
                       FROM jsonb_array_elements(body::jsonb -> 'data' -> 'slices') AS piece) $$;

CREATE INDEX events_carried_tasks ON events USING gin (carried_task_ids(body)) WHERE type = 'usage.batch_recorded';

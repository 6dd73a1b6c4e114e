-- Intake's tables (applied with search_path = intake).

-- Every accepted submission: the task exists from here on.
CREATE TABLE tasks (
    task_id         text        PRIMARY KEY,                 -- ULID assigned by intake
    -- The submission's own key; NULL = none given. UNIQUE keeps NULLs distinct (PostgreSQL's
    -- default; `NULLS DISTINCT` is not spelled out because PostgreSQL 14 lacks the syntax).
    idempotency_key text        UNIQUE,
    name            text        NOT NULL,
    project         text        NOT NULL,
    template        text,                                    -- name@version, stored as given (not applied yet)
    submission      jsonb       NOT NULL,                    -- the validated submission (schema v1)
    submitted_at    timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL,                    -- who submitted: upstream:..., user:...
    source          text        NOT NULL                     -- 'http', or 'ingest:<entry id>' of cf:ingest
);
CREATE INDEX tasks_project ON tasks (project, submitted_at);

-- Submissions that failed validation; each attempt got an id, so it can be looked up.
CREATE TABLE rejections (
    task_id         text        PRIMARY KEY,
    idempotency_key text,                                    -- not unique: a fixed resubmission may reuse it
    name            text,                                    -- when the submission had a readable one
    project         text,
    raw             jsonb,                                   -- the body as received (NULL when not JSON)
    problems        jsonb       NOT NULL,                    -- [{field, value, expected}, ...]
    rejected_at     timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL,
    source          text        NOT NULL
);
CREATE INDEX rejections_idempotency_key ON rejections (idempotency_key);

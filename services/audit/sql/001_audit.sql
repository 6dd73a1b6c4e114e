-- The audit archive (applied with search_path = audit; written by the ledger service's archiver).
-- Append-only twice over: a trigger refuses UPDATE, DELETE and TRUNCATE for everyone (owner
-- included), and the writer role `cardflow_audit_writer` the archiver switches to holds only
-- SELECT and INSERT.

-- This archive's id (random, made once): object keys in the archive and reports buckets start
-- with it, so two installations (or two test databases) can share a bucket.
CREATE TABLE archive (
    id         integer     PRIMARY KEY CHECK (id = 1),
    archive_id text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO archive (id, archive_id) VALUES (1, replace(gen_random_uuid()::text, '-', ''));

-- Every event of cf:events, in archive order, with its link in the hash chain:
-- hash = sha256(prev_hash || body), prev_hash of seq 1 = 64 zeros (hex text throughout).
CREATE TABLE events (
    seq          bigint      PRIMARY KEY CHECK (seq >= 1),
    event_id     text        NOT NULL UNIQUE,
    type         text        NOT NULL,
    subject      text        NOT NULL,
    subject_seq  bigint      NOT NULL,
    producer     text        NOT NULL,
    actor        text        NOT NULL,
    occurred_at  timestamptz NOT NULL,
    task_id      text,                                  -- data.task_id when the event has one
    entry_id     text,                                  -- the cf:events entry it was read from
    body         text        NOT NULL,                  -- canonical JSON of the event, as hashed
    prev_hash    text        NOT NULL CHECK (length(prev_hash) = 64),
    hash         text        NOT NULL CHECK (length(hash) = 64),
    archived_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_task ON events (task_id, seq) WHERE task_id IS NOT NULL;
CREATE INDEX events_subject ON events (subject, seq);
CREATE INDEX events_type_time ON events (type, occurred_at);
CREATE INDEX events_actor_time ON events (actor, occurred_at);
CREATE INDEX events_time ON events (occurred_at);

-- Segments rolled to the archive bucket: gzip'd JSON lines (one canonical event per line, seq
-- first_seq..last_seq in order) plus a manifest object. One row per segment, written once.
CREATE TABLE segments (
    segment_no       bigint      PRIMARY KEY CHECK (segment_no >= 1),
    first_seq        bigint      NOT NULL UNIQUE,
    last_seq         bigint      NOT NULL UNIQUE CHECK (last_seq >= first_seq),
    events           integer     NOT NULL CHECK (events >= 1),
    prev_hash        text        NOT NULL,              -- hash of the event before first_seq
    last_hash        text        NOT NULL,              -- hash of last_seq
    first_at         timestamptz NOT NULL,              -- occurred_at of the first and last events
    last_at          timestamptz NOT NULL,
    object_key       text        NOT NULL,
    object_version   text,
    object_sha256    text        NOT NULL,              -- of the compressed object
    object_bytes     bigint      NOT NULL,
    manifest_key     text        NOT NULL,
    manifest_version text,
    rolled_at        timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit.% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'the audit archive is never changed; a correction is a new event';
END
$$;

CREATE TRIGGER archive_append_only BEFORE UPDATE OR DELETE ON archive
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();
CREATE TRIGGER segments_append_only BEFORE UPDATE OR DELETE ON segments
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
CREATE TRIGGER segments_no_truncate BEFORE TRUNCATE ON segments
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();

REVOKE UPDATE, DELETE, TRUNCATE ON archive, events, segments FROM PUBLIC;

-- The writer role (cluster-wide, shared by every database of the server): created when the
-- connecting user may create roles; otherwise the trigger alone guards the tables.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cardflow_audit_writer') THEN
        BEGIN
            CREATE ROLE cardflow_audit_writer NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation OR insufficient_privilege THEN
            NULL;  -- created meanwhile by another database's migration, or not ours to create
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cardflow_audit_writer') THEN
        BEGIN
            GRANT USAGE ON SCHEMA audit TO cardflow_audit_writer;
            GRANT SELECT ON archive TO cardflow_audit_writer;
            GRANT SELECT, INSERT ON events, segments TO cardflow_audit_writer;
            REVOKE UPDATE, DELETE, TRUNCATE ON events, segments FROM cardflow_audit_writer;
            GRANT cardflow_audit_writer TO CURRENT_USER;
        EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN
            NULL;  -- the archiver then writes as the connecting user (the trigger still holds)
        END;
    END IF;
END
$$;

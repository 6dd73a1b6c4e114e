-- Enrolled agents (applied with search_path = identity): one row per agent id, written in the same
-- transaction as its agent.enrolled / agent.unenrolled event. Redis holds the user itself; this row
-- is what cardflow recorded, so an unenrolment whose record was lost (the Redis user deleted, the
-- transaction not committed) can be recorded when it is asked again. Never a password.
CREATE TABLE agents (
    agent_id       text        PRIMARY KEY,
    redis_user     text        NOT NULL,                 -- agent.<id>
    enrolled_at    timestamptz NOT NULL,
    enrolled_by    text        NOT NULL,                 -- actor of the last agent.enrolled
    enrol_reason   text        NOT NULL,
    enrol_event_id text        NOT NULL,
    unenrolled_at  timestamptz,                          -- NULL while enrolled
    unenrolled_by  text,
    unenrol_reason text,
    unenrol_event_id text
);

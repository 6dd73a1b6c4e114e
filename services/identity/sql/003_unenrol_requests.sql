-- Unenrolments asked for and not yet recorded (applied with search_path = identity). A row is
-- committed BEFORE the agent's Redis user is deleted and removed in the transaction that records
-- agent.unenrolled: Redis and PostgreSQL share no transaction, so if that transaction fails after
-- the deletion, this row still says who asked and why, and `finish_unenrolments` records it later
-- with that actor and reason (the user gone) or drops it (the user still there: nothing happened).
CREATE TABLE unenrol_requests (
    agent_id     text        PRIMARY KEY,
    requested_at timestamptz NOT NULL,
    requested_by text        NOT NULL,   -- the actor of the agent.unenrolled to record
    reason       text        NOT NULL
);

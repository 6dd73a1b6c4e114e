-- Successes the dispatcher did not take at the agent's word (issue 15 item 2: `task.succeeded`
-- with `flags` — implausibly_early_success, output_out_of_bounds). Their run's output lives here,
-- NOT in task_output, so no total, round report or cost per output unit counts it; the review and
-- `cardflow review` list them. The run's earlier checkpoint output is moved here with it.
CREATE TABLE flagged_output (
    task_id              text        NOT NULL,
    lease_id             text        NOT NULL,
    output_units         numeric     CHECK (output_units >= 0),           -- within the policy's bound; not counted
    claimed_output_units numeric     CHECK (claimed_output_units >= 0),   -- refused as out of bounds (never counted)
    flags                text[]      NOT NULL,
    detail               text        NOT NULL,
    reported_at          timestamptz NOT NULL,
    event_id             text        NOT NULL,                             -- the task.succeeded event
    PRIMARY KEY (task_id, lease_id)
);
CREATE INDEX flagged_output_reported ON flagged_output (reported_at);

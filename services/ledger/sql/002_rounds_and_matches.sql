-- Rounds, their notes and report lines; what the match review needs from each task.

-- From task.submitted: what the round report groups by and the review reads.
ALTER TABLE tasks ADD COLUMN scenario text;       -- the submission's `scenario` label
ALTER TABLE tasks ADD COLUMN profile  text;       -- compute / memory / balanced
ALTER TABLE tasks ADD COLUMN gpus     integer;    -- GPUs the task asked for

-- The latest match of each task (task.matched): the ranked card types with their estimates.
CREATE TABLE task_matches (
    task_id         text        PRIMARY KEY,
    chosen          text        NOT NULL,
    ranking         jsonb       NOT NULL,   -- [{card_type, est_runtime_s, est_cost}], best first
    oversized       boolean     NOT NULL,
    reason          text        NOT NULL,
    catalog_version text,
    matched_at      timestamptz NOT NULL,
    event_id        text        NOT NULL
);

-- Closed rounds: a period, its report (JSON, also in the reports bucket), the current note.
CREATE TABLE rounds (
    round_id     text        PRIMARY KEY,              -- R0001, R0002, ...
    number       integer     NOT NULL UNIQUE CHECK (number >= 1),
    starts_at    timestamptz NOT NULL,
    ends_at      timestamptz NOT NULL CHECK (ends_at > starts_at),
    closed_at    timestamptz NOT NULL,
    closed_by    text        NOT NULL,                 -- actor: user:<name>, or system:rounds at a period's end
    how          text        NOT NULL CHECK (how IN ('by_hand', 'period_end')),
    note         text        NOT NULL,                 -- the latest version (history in round_notes)
    gpu_seconds  numeric     NOT NULL,
    cost         numeric     NOT NULL,
    output_units numeric     NOT NULL,
    report       jsonb       NOT NULL,
    report_uri   text,                                 -- s3://bucket/prefix/ of report.{json,csv,html}
    report_versions jsonb    NOT NULL DEFAULT '{}',    -- file -> object version ids, newest last
    event_id     text        NOT NULL                  -- the round.closed event
);
CREATE UNIQUE INDEX rounds_one_per_start ON rounds (starts_at);

-- Every version of a round's note: 1 = the note it was closed with.
CREATE TABLE round_notes (
    round_id  text        NOT NULL REFERENCES rounds (round_id),
    version   integer     NOT NULL CHECK (version >= 1),
    note      text        NOT NULL,
    actor     text        NOT NULL,
    reason    text        NOT NULL DEFAULT '',
    noted_at  timestamptz NOT NULL,
    event_id  text        NOT NULL,
    PRIMARY KEY (round_id, version)
);

-- The report's spend-against-output rows, queryable across rounds.
CREATE TABLE round_lines (
    round_id             text    NOT NULL REFERENCES rounds (round_id),
    grouping             text    NOT NULL CHECK (grouping IN ('task', 'project', 'scenario', 'card')),
    key                  text    NOT NULL,
    tasks                integer NOT NULL,
    gpu_hours            numeric NOT NULL,
    cost                 numeric NOT NULL,
    output_units         numeric NOT NULL,
    output_unit          text,
    cost_per_output_unit numeric,
    PRIMARY KEY (round_id, grouping, key)
);

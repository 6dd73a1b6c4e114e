-- The matcher's tables (applied with search_path = matcher).

-- The fleet as node.registered / node.lost describe it; live card types = alive rows.
CREATE TABLE fleet (
    node_id    text        PRIMARY KEY,
    agent_id   text        NOT NULL,
    card_type  text        NOT NULL,
    gpus       integer     NOT NULL CHECK (gpus >= 1),
    alive      boolean     NOT NULL,
    changed_at timestamptz NOT NULL              -- occurred_at of the event that set this state
);

-- Every task the matcher has seen: its request, where it stands, its latest match.
CREATE TABLE tasks (
    task_id       text        PRIMARY KEY,
    project       text        NOT NULL,
    request       jsonb       NOT NULL,          -- services.matcher.request.request_to_json
    status        text        NOT NULL CHECK (status IN ('matched', 'waiting', 'unmatchable', 'cancelled')),
    last_match_id text        NOT NULL,
    last_detail   text        NOT NULL,          -- the latest reason sentence (re-matches emit only on change)
    updated_at    timestamptz NOT NULL DEFAULT now()
);
-- 'waiting' = unmatchable for lack of a fitting card type in the fleet: matched again on registration.
CREATE INDEX tasks_waiting ON tasks (task_id) WHERE status = 'waiting';

-- Every match the matcher made, complete enough to be joined later with the ledger's actual usage.
CREATE TABLE matches (
    match_id           text        PRIMARY KEY,   -- ULID
    task_id            text        NOT NULL,
    trigger            text        NOT NULL,      -- 'submitted' or 'fleet_changed'
    request            jsonb       NOT NULL,
    ranking            jsonb       NOT NULL,      -- every card type: rank (null = inadequate), runtime_s, cost, fleet_gpus, why_not
    matched            boolean     NOT NULL,
    chosen             text,                      -- null when unmatchable
    oversized          boolean     NOT NULL,
    unmatchable_reason text,                      -- UnmatchableReason when unmatchable
    reason             text        NOT NULL,      -- the sentence sent with the event
    fleet              jsonb       NOT NULL,      -- live GPUs per card type at decision time
    fleet_card_types   text[]      NOT NULL,
    catalog_version    text        NOT NULL,
    catalog_hash       text        NOT NULL,
    event_id           text        NOT NULL,      -- the task.matched / task.unmatchable event emitted
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX matches_task ON matches (task_id, created_at);

-- Each node's alive spans, as the ledger folds them from `node.registered` / `node.lost` itself
-- (`services.ledger.capacity`): a round's capacity counts from here. Before, the round's close read those
-- events from `audit.events`, which the archiver may not have written yet when the round closes: a
-- `node.lost` not archived yet counted its node alive to the round's end.
CREATE TABLE node_spans (
    node_id             text        NOT NULL,
    card_type           text,                    -- NULL when registered_at is
    gpus                int         CHECK (gpus >= 1),
    registered_at       timestamptz,             -- NULL: a loss whose registration the ledger never saw (before this migration)
    registered_event_id text        UNIQUE,
    lost_at             timestamptz,             -- NULL: alive
    lost_event_id       text        UNIQUE,
    CHECK (registered_at IS NOT NULL OR lost_at IS NOT NULL),
    CHECK ((registered_at IS NULL) = (registered_event_id IS NULL) AND (lost_at IS NULL) = (lost_event_id IS NULL))
);
-- At most one open span per node (the fold's rule, which the database holds too).
CREATE UNIQUE INDEX node_spans_open ON node_spans (node_id) WHERE lost_at IS NULL;

-- Since when the ledger keeps spans: node events that occurred before, and that no span holds (the ledger
-- consumed them before this migration), are still read from `audit.events` (`round_inputs.load_capacity`).
CREATE TABLE node_spans_kept (
    since timestamptz NOT NULL
);
INSERT INTO node_spans_kept (since) VALUES (now());

-- Delivery tables of one service schema (applied with search_path = that schema).

-- Events a handler emitted, written in the handler's transaction, published by the relay.
CREATE TABLE outbox (
    position     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- publication order
    event_id     text        NOT NULL UNIQUE,
    type         text        NOT NULL,
    subject      text        NOT NULL,
    stream       text        NOT NULL,                              -- target Redis stream
    body         text        NOT NULL,                              -- canonical JSON of the event
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,                                       -- NULL = not yet published
    entry_id     text                                               -- Redis entry id once published
);
CREATE INDEX outbox_pending ON outbox (position) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Event ids already consumed, per consumer (group); inserted in the same transaction as the effect.
CREATE TABLE inbox (
    consumer    text        NOT NULL,
    event_id    text        NOT NULL,
    consumed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_consumed_at ON inbox (consumed_at);

-- Last subject_seq handed out per subject; the row lock makes the sequence gap-free.
CREATE TABLE subject_seq (
    subject  text   PRIMARY KEY,
    last_seq bigint NOT NULL CHECK (last_seq >= 1)
);

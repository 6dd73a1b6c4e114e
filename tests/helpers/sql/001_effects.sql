-- Tables of the test workers: one row per applied effect, one per inbox dedupe hit.
CREATE TABLE effects (
    event_id   text PRIMARY KEY,
    n          integer NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE duplicates (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id text NOT NULL,
    seen_at  timestamptz NOT NULL DEFAULT now()
);

-- API tokens (applied with search_path = identity). Only the SHA-256 of each secret is stored.
CREATE TABLE tokens (
    token_id      text        PRIMARY KEY,                 -- a ULID; shown by `cardflow token list`
    name          text        NOT NULL,                    -- the holder: actions are recorded as user:<name>
    role          text        NOT NULL CHECK (role IN ('submitter', 'operator', 'reviewer', 'auditor', 'admin')),
    project       text,                                    -- the only project it may act on; NULL = every project
    secret_sha256 text        NOT NULL UNIQUE,
    hint          text        NOT NULL,                    -- the secret's first characters, for listings
    created_at    timestamptz NOT NULL,
    created_by    text        NOT NULL,                    -- actor that created it
    reason        text        NOT NULL DEFAULT '',
    event_id      text        NOT NULL,                    -- its token.created event
    revoked_at    timestamptz,
    revoked_by    text,
    revoke_reason text,
    CHECK (role <> 'admin' OR project IS NULL)
);
CREATE INDEX tokens_by_name ON tokens (name);

-- The config store's index (applied with search_path = config). The documents themselves are
-- objects in the versioned S3 bucket `cardflow-config`; each row records one version of one
-- document that is (or was) in force, with the same text, so services reload without S3.

-- One row per version of a document. The row is the commit point of a change: an S3 object
-- version without a row was never in force (a change that crashed or lost a race after its put).
-- The primary key makes two changes on the same base version exclusive: exactly one inserts
-- version base+1, the other is refused as stale.
CREATE TABLE versions (
    name           text        NOT NULL,            -- policy | cards | templates/<name>
    version        integer     NOT NULL CHECK (version >= 1),
    base_version   integer     CHECK (base_version IS NULL OR base_version = version - 1),
    action         text        NOT NULL CHECK (action IN ('seeded', 'applied', 'set', 'rolled_back')),
    rolled_back_to integer,                          -- rolled_back: the version whose content this is
    content        text        NOT NULL,            -- the YAML text, exactly as in the S3 object
    sha256         text        NOT NULL,
    s3_key         text        NOT NULL,
    s3_version_id  text        NOT NULL,
    actor          text        NOT NULL,            -- user:<token name>, service:<name>, system:<part>
    reason         text        NOT NULL,
    event_id       text        NOT NULL,            -- the config.changed / template.changed announcing it
    at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version),
    CHECK ((version = 1) = (base_version IS NULL))
);
CREATE UNIQUE INDEX versions_by_s3_version ON versions (s3_version_id);

-- Every export of the task list and demand plan written to the reports bucket.
CREATE TABLE exports (
    export_id   text        PRIMARY KEY,             -- ULID
    day         date        NOT NULL,                -- the UTC day the export belongs to
    trigger     text        NOT NULL CHECK (trigger IN ('daily', 'manual')),
    actor       text        NOT NULL,
    objects     jsonb       NOT NULL,                -- [{key, version_id, bytes, sha256}, ...]
    tasks       integer     NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX exports_by_day ON exports (day, at);
-- At most one daily export per day, whichever config service instance gets there first.
CREATE UNIQUE INDEX exports_one_daily_per_day ON exports (day) WHERE trigger = 'daily';

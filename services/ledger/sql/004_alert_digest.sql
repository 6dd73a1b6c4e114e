-- The daily alert digest (services.ledger.alerting.send_digest_if_due): one row per local day it
-- was sent for (the primary key makes it at most once a day, across restarts and ledger
-- instances), and one delivery per webhook sink, retried with back-off and dead-lettered like an
-- alert's (status 'dead', with the last error) after max_attempts.
CREATE TABLE alert_digests (
    day         date        PRIMARY KEY,        -- the local day (in `timezone`) the digest is for
    timezone    text        NOT NULL,
    sent_at     timestamptz NOT NULL,
    since       timestamptz NOT NULL,           -- the alerts raised in [since, until)
    until       timestamptz NOT NULL,
    alerts      integer     NOT NULL,
    counts      jsonb       NOT NULL            -- alerts per kind
);

CREATE TABLE digest_deliveries (
    day             date             NOT NULL REFERENCES alert_digests (day),
    url             text             NOT NULL,
    body            jsonb            NOT NULL,  -- the JSON POSTed (the alerts this sink wants)
    status          text             NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer          NOT NULL DEFAULT 0,
    max_attempts    integer          NOT NULL,
    backoff_s       double precision NOT NULL,
    timeout_s       double precision NOT NULL,
    next_attempt_at timestamptz      NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    last_error      text,
    PRIMARY KEY (day, url)
);
CREATE INDEX digest_deliveries_due ON digest_deliveries (next_attempt_at) WHERE status = 'pending';

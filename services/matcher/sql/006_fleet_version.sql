-- The fleet's version: bumped in the transaction that writes `fleet` (under the exclusive fleet
-- lock), so a matcher instance keeps the fleet it loaded and reads one number per batch instead of
-- every node (services.matcher.store.KeptFleet). At 10,000 nodes that is one row instead of 10,000.
CREATE TABLE fleet_version (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version  bigint  NOT NULL
);
INSERT INTO fleet_version (version) VALUES (0);

-- The version of the `policy` document each grant was planned with (NULL: the env preset, before
-- the config service seeded the document), so every grant can be reproduced later.
ALTER TABLE leases ADD COLUMN policy_version integer;

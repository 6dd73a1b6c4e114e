"""The ledger service: GPU usage and cost per lease, output per task, quota accounts and their alerts.

`accounting` is the pure arithmetic (GPU-seconds x price), `batch` folds a batch of events into
the ledger's effects, `store` reads and writes the `ledger` schema, `quotas` grants accounts and
raises their alerts, `reports` answers `cardflow ledger` / `cardflow quota list`, `service` wires it
into the runtime (`SPEC`). See README.md and docs/ledger.md.
"""

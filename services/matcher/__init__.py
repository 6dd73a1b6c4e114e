"""The matcher service: ranks card types for each submitted task over the fleet's live card types.

`request` builds the matching request from a submission, `decide` is the pure fleet-aware
decision, `batch` folds a batch of events into matches and emissions, `store` reads and writes the
`matcher` schema, `service` wires it into the runtime (`SPEC`). See README.md.
"""

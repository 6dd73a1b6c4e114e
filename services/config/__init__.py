"""The config store and the `config` service: versioned documents in S3, rows in schema `config`,
`config.changed` / `template.changed` through the outbox, seeding, hot-reload holders, exports."""

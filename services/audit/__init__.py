"""The audit archive and what auditors do with it.

- `chain`: the hash chain over archived events (pure);
- `archive`: the ledger's archiver, every `cf:events` entry into `audit.events`;
- `segments`: runs of the archive rolled to the archive bucket, and their checks.
"""

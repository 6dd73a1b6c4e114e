"""The dispatcher: keeps the queue, runs `plan()`, grants leases with fencing tokens, checks agent reports."""

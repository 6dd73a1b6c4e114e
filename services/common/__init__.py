"""What every cardflow service process shares: the runtime (connections, migrations, relay, loops)."""

"""cardflow's processes: the five services, the agent daemon, the console and the CLI."""

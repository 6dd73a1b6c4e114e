"""The `cardflow` command line (typer + rich)."""

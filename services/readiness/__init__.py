"""The readiness service: gates tasks on their input data (see README.md)."""

"""Test helpers: subprocess workers for the crash tests and shared delivery test support."""

"""Operator commands: dead letters (list, show, replay, purge), nodes; each action an event with actor and reason."""

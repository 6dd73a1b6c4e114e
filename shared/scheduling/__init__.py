"""The pure scheduling core: `plan(snapshot, queue, policy, now) -> Plan` and the value types it uses.

Nothing in this package performs I/O, reads a clock or draws random numbers; a test enforces it.
The live dispatcher and the simulator both call exactly this code.
"""

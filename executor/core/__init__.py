"""The core that decides: steps and placeholders, the config walker, canonical encoding, identity,
the graph, the plan, and the status/record formats. Pure: no I/O, no clock, no environment
reads; the engine and the tools build on it, and it imports neither.
"""

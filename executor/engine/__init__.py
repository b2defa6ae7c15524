"""The machinery that runs a plan: the run loop, leases and fenced commits, the
coordination stores, the runners (Ray, in-process), step-output access, progress
and reporting. Imports the core; never the tools.
"""

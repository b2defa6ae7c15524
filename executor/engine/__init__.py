"""The machinery that runs a plan: the run loop, leases and fenced commits, the
coordination stores, the runners (Ray, inline), step-output access, progress
and reporting. Imports the core; never the tools.
"""

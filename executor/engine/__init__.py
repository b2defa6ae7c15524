"""The machinery that runs a plan. Imports the core; never the tools. Its folders, by role: run/
(the run loop, leases and fenced commits, what a run records), transfers/ (copies between locations
and reuse across prefixes), prefix/ (opening locations, the prefix and its read model), worker/
(what runs beside a step's function), store/ (the coordination stores: local, memory, GCS, S3,
retrying), runner/ (where steps run: inline, Ray; the only package importing ray); events.py, at the
top, is what a plan or run reports to its subscribers.
"""

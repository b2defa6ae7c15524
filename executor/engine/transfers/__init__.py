"""Moving outputs and inputs between locations, and reusing outputs across prefixes: which steps a
plan copies from a --cache-from prefix instead of running them (cache_from) and the copy job the run
loop submits for each (cache_copy, copy_output: checked byte by byte); mirrored inputs, where a run
copies them from and the job that copies each once under a lease (mirror, mirror_copy); the one
transfer budget a run's copies count against (budget); and reads that cross regions, with where this
runner is (regions, runner_region).
"""

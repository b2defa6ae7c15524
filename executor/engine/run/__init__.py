"""The run loop and what it keeps: plan -> lease -> submit -> fenced commit (execute), the jobs it
schedules behind one interface and the board they share (jobs; a step's job in step_job), the leases
and their fencing (lease), the status snapshot planning decides from (snapshot), early cutoff and
the carrying over of outputs made under older ids (cutoff, legacy_carry), the run file and the
per-step timeline (run_file, timeline), what a record says about how an output was made (provenance,
fingerprint), and the process edges of a run: signals that stop it cleanly and the garbage collector
paused while it plans (signals, collector). The copy jobs (copies from other prefixes, mirrored
inputs) are in executor/engine/transfers/.
"""

"""A prefix and the locations a run touches: opening a path or URL with the storage options that
apply to it, and the step's own storage while it runs (location); the prefix a run or command uses,
resolved in one place and opened once as an OpenedPrefix value (prefixes, project: the default
cache/ of the experiment's project); paths, JSON files and manifests of step outputs (outputs); the
typed read model every command reads a prefix through (prefix_view); and a step's returned value as
JSON data in its record, and back (results).
"""

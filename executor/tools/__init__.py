"""The tools that explain and maintain: why an id changed, ids files and the CI check, adopt,
verify, gc, drift warnings, the plan picture, and the handlers behind `python -m executor`.
They read what the core computes and what the engine stored.
"""

"""Names of the types that identities hold, independent of how their module was loaded.

A class defined in an experiment file is `__main__.X` when the file is run as a script and
`hello.X` or `experiments.hello.X` when another file imports it. Identities name it by its file
instead: the dotted path of the module file from the directory above its outermost package (the
name `python -m` would run it under), so all three spellings give `experiments.hello.X`. Names are
only ever lengthened to that form, never otherwise changed, so installed libraries (namespace
packages included) keep the names they declare. A class defined where there is no file (a
notebook cell, `python -c`) keeps the name `__main__`.
"""

from __future__ import annotations

import os
import sys

_module_names: dict[str, str] = {}  # module name -> canonical name (never for __main__, which changes)


def module_name_of_file(path: str) -> str:
    """`<root>/experiments/hello.py` -> 'experiments.hello' when experiments/ holds an __init__.py."""
    directory, file = os.path.split(os.path.abspath(path))
    stem = os.path.splitext(file)[0]
    parts = [] if stem == "__init__" else [stem]
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        directory, package = os.path.split(directory)
        parts.append(package)
        if not package:  # reached the filesystem root
            break
    return ".".join(reversed(parts))


def canonical_module_name(module: str) -> str:
    """The name a module's types carry in identities (see the module docstring)."""
    known = _module_names.get(module)
    if known is not None:
        return known
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    name = module
    if path:
        by_file = module_name_of_file(path)
        if module == "__main__" or by_file.endswith("." + module):
            name = by_file
    if module != "__main__":  # __main__ is a different module for each experiment loaded in-process
        _module_names[module] = name
    return name


def qualified_name(cls: type) -> str:
    return f"{canonical_module_name(cls.__module__)}.{cls.__qualname__}"

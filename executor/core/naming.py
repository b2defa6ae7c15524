"""Where a class lives, named independently of how its module was loaded (provenance, not identity).

A class defined in an experiment file is `__main__.X` when the file is run as a script and
`hello.X` or `experiments.hello.X` when another file imports it. This names it by its file
instead: the dotted path of the module file from the directory above its outermost package (the
name `python -m` would run it under), so all three spellings give `experiments.hello.X`. Names are
only ever lengthened to that form, never otherwise changed, so installed libraries (namespace
packages included) keep the names they declare. A class defined where there is no file (a
notebook cell, `python -c`) keeps the name `__main__`. Records name a step's result type so
(engine/prefix/results.py). Ids do not use it since issue 44 (a class is named by its qualname there):
only legacy_ids.py does, to find outputs made under the ids of before.
"""

from __future__ import annotations

import os
import sys

_module_names: dict[str, str] = {}  # module name -> canonical name (__main__ is named per class)

# An experiment file loaded by the tools without running it (executor/tools/loading.py) is a module
# named under this prefix; its types are named by its file, as when it runs as a script.
LOADED_SCRIPT_PREFIX = "__stepgraph_script__."


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
    path = getattr(sys.modules.get(module), "__file__", None)
    name = module
    if path:
        by_file = module_name_of_file(path)
        if by_file.endswith("." + module) or module.startswith(LOADED_SCRIPT_PREFIX):
            name = by_file
    _module_names[module] = name
    return name


def main_module_name(cls: type) -> str:
    """The module name of a class defined in the script being run (`__module__ == "__main__"`).

    The script is the `__main__` module's file when that module holds the class, as under
    `python exp.py`, `python -m pkg.exp` and runpy; otherwise `sys.argv[0]`, which tools that run a
    script inside their own `__main__` (`python -m cProfile exp.py`, pdb, coverage) point at it.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None:  # a notebook or `python -c`: there is no file to name it by
        return "__main__"
    top = cls.__qualname__.split(".", 1)[0]
    if getattr(main, top, None) is not cls and sys.argv and sys.argv[0].endswith(".py") \
            and os.path.isfile(sys.argv[0]):
        path = sys.argv[0]
    return module_name_of_file(path)


def qualified_name(cls: type) -> str:
    module = cls.__module__
    name = main_module_name(cls) if module == "__main__" else canonical_module_name(module)
    return f"{name}.{cls.__qualname__}"

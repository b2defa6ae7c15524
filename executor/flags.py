"""A thin normalising layer in front of draccus, so both flag habits work.

    --dry-run  --no-dry-run  --dry-run=false  --dry_run true  --ray-address X  --ray-address=X

all become draccus's `--name value` form; '-' and '_' are interchangeable in names.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from executor.core.errors import ExecutorError

BOOL_WORDS = {"true", "false", "yes", "no", "1", "0", "on", "off"}


def bool_fields(config_class: type | None, prefix: str = "") -> set[str]:
    """Dotted names of every bool field, nested dataclasses included."""
    if config_class is None:
        return set()
    names: set[str] = set()
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        hint = hints.get(f.name, f.type)
        if hint is bool or hint == typing.Optional[bool]:
            names.add(prefix + f.name)
        elif dataclasses.is_dataclass(hint):
            names |= bool_fields(hint, f"{prefix}{f.name}.")
    return names


def top_level_fields(config_class: type | None) -> set[str]:
    return {f.name for f in dataclasses.fields(config_class)} if config_class else set()


def normalize(argv: list[str], booleans: set[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--") or arg == "--":
            out.append(arg)
            continue
        name, has_value, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if not has_value and name.startswith("no_") and name[3:] in booleans:
            out += [f"--{name[3:]}", "false"]
        elif has_value:
            out += [f"--{name}", value]
        elif name in booleans:
            if i < len(argv) and argv[i].lower() in BOOL_WORDS:
                out += [f"--{name}", argv[i]]
                i += 1
            else:
                out += [f"--{name}", "true"]
        else:
            out.append(f"--{name}")
    return out


def split(normalized: list[str], names: set[str]) -> tuple[list[str], list[str]]:
    """Separate the flags whose top-level name is in `names` (with their values) from the rest."""
    mine: list[str] = []
    rest: list[str] = []
    target = rest
    for arg in normalized:
        if arg.startswith("--"):
            target = mine if arg[2:].split(".", 1)[0] in names else rest
        target.append(arg)
    return mine, rest


def parse(config_class: type, args: list[str], defaults: Any = None) -> Any:
    """draccus.parse, starting from `defaults` (an instance) when given."""
    import draccus
    from draccus.utils import DecodingError, ParsingError

    try:
        parsed = draccus.parse(config_class=config_class, args=args)
    except DecodingError as e:  # a value of the wrong type: name the flag, not draccus's internals
        flag = "--" + ".".join(str(k) for k in e.key_path).replace("_", "-") if e.key_path else "a flag"
        raise ExecutorError(f"{flag}: {e.message}; run with --help for the flags and their types") from None
    except ParsingError as e:
        raise ExecutorError(f"could not parse the flags {' '.join(args)!r}: {e}; run with --help") from None
    if defaults is None:
        return parsed
    # draccus parses onto a class; flags then override the experiment's own default instance.
    explicit = {a[2:].split(".", 1)[0] for a in args if a.startswith("--")}
    return dataclasses.replace(defaults, **{n: getattr(parsed, n) for n in explicit
                                            if n in top_level_fields(config_class)})

"""An experiment's flags: both spellings people use, each value parsed by its declared type.

    --dry-run  --no-dry-run  --dry-run=false  --dry_run true  --ray-address X  --ray-address=X

'-' and '_' are interchangeable in names. A value is parsed by the field's type, never as YAML:
`--greeting yes` is the text "yes", `--only '*a'` the regex "*a". Only containers (lists, tuples,
dicts, sets) take a YAML/JSON value (`--widths '[32, 64]'`) or, for scalars, a comma list
(`--widths 32,64`). An unknown flag names its nearest known spelling.
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import types
import typing
from typing import Any

from executor.core.errors import ExecutorError

BOOL_WORDS = {"true": True, "yes": True, "1": True, "on": True,
              "false": False, "no": False, "0": False, "off": False}
_NONE_WORDS = {"none", "null", "~"}
MISSING_VALUE = "\0(no value)"  # normalize()'s stand-in for a flag written without its value


def _hints(config_class: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(config_class)
    except Exception:  # noqa: BLE001 - unresolvable string annotations: fall back to the raw ones
        return {f.name: f.type for f in dataclasses.fields(config_class)}


def _optional_of(hint: Any) -> Any | None:
    """X for Optional[X] / X | None, else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
    return None


def field_types(config_class: type | None, prefix: str = "") -> dict[str, Any]:
    """Dotted flag name -> declared type, for every field (nested dataclasses flattened)."""
    if config_class is None:
        return {}
    out: dict[str, Any] = {}
    hints = _hints(config_class)
    for f in dataclasses.fields(config_class):
        hint = hints.get(f.name, f.type)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            out.update(field_types(hint, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = hint
    return out


def bool_fields(config_class: type | None) -> set[str]:
    """Dotted names of every bool field, nested dataclasses included."""
    return {n for n, t in field_types(config_class).items() if t is bool or _optional_of(t) is bool}


def top_level_fields(config_class: type | None) -> set[str]:
    return {f.name for f in dataclasses.fields(config_class)} if config_class else set()


def spelled(name: str) -> str:
    """How a flag is written on the command line (and in the docs): --dry-run, --model.d-model."""
    return "--" + name.replace("_", "-")


def normalize(argv: list[str], booleans: set[str]) -> list[str]:
    """argv -> ['--name', 'value', ...] with '_' names; bare booleans get 'true'."""
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
        elif i < len(argv) and not (argv[i].startswith("--") and len(argv[i]) > 2):
            out += [f"--{name}", argv[i]]  # the next word is the value, whatever else it looks like
            i += 1
        else:
            out += [f"--{name}", MISSING_VALUE]  # parse() says which flag lacks its value
    return out


def split(normalized: list[str], names: set[str]) -> tuple[list[str], list[str]]:
    """Separate the flags whose top-level name is in `names` (with their values) from the rest."""
    mine: list[str] = []
    rest: list[str] = []
    target = rest
    expect_value = False
    for arg in normalized:  # flags and values alternate: a value that looks like a flag is a value
        if arg.startswith("--") and not expect_value:
            target = mine if arg[2:].split(".", 1)[0] in names else rest
            expect_value = True
        else:
            expect_value = False
        target.append(arg)
    return mine, rest


def did_you_mean(name: str, known: typing.Iterable[str]) -> str:
    import difflib  # here: only a misspelt flag needs it

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {spelled(close[0])}?" if close else ""


def unknown_flag(arg: str, known: typing.Iterable[str]) -> ExecutorError:
    if not arg.startswith("--"):
        return ExecutorError(f"unexpected argument {arg!r} (flags start with --); run with --help for the flags")
    name = arg[2:]
    return ExecutorError(f"unknown flag {spelled(name)}{did_you_mean(name, known)} "
                         f"(run with --help for every flag)")


def type_name(hint: Any) -> str:
    inner = _optional_of(hint)
    if inner is not None:
        return type_name(inner)
    if typing.get_origin(hint) is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "|".join(m.name for m in hint)
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__name__
    return str(hint).replace("typing.", "")


def parse_value(flag: str, raw: str, hint: Any) -> Any:
    """One flag value, parsed by its declared type. Raises ExecutorError naming flag, value and fix."""
    def bad(expected: str) -> ExecutorError:
        return ExecutorError(f"{spelled(flag)}: {raw!r} is not {expected}; run with --help for the flags "
                             f"and their types")

    inner = _optional_of(hint)
    if inner is not None:
        if inner is not str and raw.strip().lower() in _NONE_WORDS:
            return None  # an int or a bool cannot be spelled "none": no ambiguity
        return parse_value(flag, raw, inner)
    if hint is str or hint is typing.Any:
        return raw
    if hint is bool:
        if raw.lower() not in BOOL_WORDS:
            raise bad("a boolean (true/false, yes/no, 1/0, on/off)")
        return BOOL_WORDS[raw.lower()]
    if hint is int:
        try:
            return int(raw.replace("_", ""))
        except ValueError:
            try:  # 1e3 is a common way to write an integer
                value = float(raw)
            except ValueError:
                raise bad("an integer") from None
            if not value.is_integer():
                raise bad("an integer") from None
            return int(value)
    if hint is float:
        try:
            return float(raw.replace("_", ""))
        except ValueError:
            raise bad("a number") from None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        for member in hint:
            if raw in (member.name, str(member.value)) or raw.lower() == member.name.lower():
                return member
        raise bad("one of " + ", ".join(m.name for m in hint))
    if isinstance(hint, type) and issubclass(hint, pathlib.PurePath):
        return hint(raw)
    if typing.get_origin(hint) is typing.Literal:
        for choice in typing.get_args(hint):
            if raw == str(choice):
                return choice
        raise bad("one of " + ", ".join(str(c) for c in typing.get_args(hint)))
    return _parse_container(flag, raw, hint, bad)


def _parse_container(flag: str, raw: str, hint: Any, bad: Any) -> Any:
    """Lists, tuples, sets, dicts and anything else: a YAML/JSON value, or a comma list of scalars."""
    import draccus
    import yaml

    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (list, tuple, set, frozenset) and args and not raw.lstrip().startswith("["):
        parts = [part.strip() for part in raw.split(",") if part.strip()]
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):  # tuple[int, str]: by position
            if len(parts) != len(args):
                raise bad(f"{len(args)} comma-separated values ({type_name(hint)})")
            return tuple(parse_value(flag, p, t) for p, t in zip(parts, args))
        return origin(parse_value(flag, p, args[0]) for p in parts)
    try:
        loaded = yaml.safe_load(raw)
        return draccus.decode(hint, loaded)
    except Exception as e:  # noqa: BLE001 - draccus raises many kinds; all mean "not this type"
        raise bad(f"a {type_name(hint)} ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None


def parse(config_class: type, args: list[str], defaults: Any = None) -> Any:
    """Normalized `args` (['--name', 'value', ...]) applied over `defaults` (an instance), or over
    the class's own defaults. Unknown flags, missing values and wrongly typed values are errors."""
    types_ = field_types(config_class)
    overrides: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg[2:] if arg.startswith("--") else None
        if name is None or name not in types_:
            raise unknown_flag(arg, types_)
        if i + 1 >= len(args) or args[i + 1] == MISSING_VALUE:
            raise ExecutorError(f"{spelled(name)} needs a value ({type_name(types_[name])}); "
                                f"run with --help for the flags")
        overrides[name] = parse_value(name, args[i + 1], types_[name])
        i += 2
    return build(config_class, defaults, overrides)


def build(config_class: type, base: Any, overrides: dict[str, Any], prefix: str = "") -> Any:
    """An instance of config_class: `base` (or the field defaults) with dotted `overrides` applied."""
    hints = _hints(config_class)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config_class):
        dotted = prefix + f.name
        hint = hints.get(f.name, f.type)
        nested = {k: v for k, v in overrides.items() if k.startswith(dotted + ".")}
        if dotted in overrides:
            values[f.name] = overrides[dotted]
        elif nested and isinstance(hint, type) and dataclasses.is_dataclass(hint):
            inner = getattr(base, f.name) if base is not None else _default(f)
            values[f.name] = build(hint, None if inner is dataclasses.MISSING else inner, overrides, dotted + ".")
        elif base is not None:
            continue
        elif _default(f) is dataclasses.MISSING:
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                values[f.name] = build(hint, None, overrides, dotted + ".")
            elif f.init:
                raise ExecutorError(f"{spelled(dotted)} is required ({type_name(hint)}); "
                                    f"run with --help for the flags")
    if base is not None:
        return dataclasses.replace(base, **values)
    return config_class(**{k: v for k, v in values.items()})


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def field_help(config_class: type) -> list[tuple[str, str, str]]:
    """(flag spelling, type, help) per flag: the help is the field's comment (as draccus reads it)
    or its metadata["help"]; the default is appended."""
    from draccus.wrappers.docstring import get_attribute_docstring

    rows: list[tuple[str, str, str]] = []

    def walk(cls: type, prefix: str, instance: Any) -> None:
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints.get(f.name, f.type)
            value = getattr(instance, f.name) if instance is not None else _default(f)
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                walk(hint, f"{prefix}{f.name}.", None if value is dataclasses.MISSING else value)
                continue
            text = f.metadata.get("help") if f.metadata else None
            if not text:
                try:
                    doc = get_attribute_docstring(cls, f.name)
                    text = doc.comment_inline or doc.comment_above or doc.docstring_below or ""
                except Exception:  # noqa: BLE001 - no source (e.g. built in a REPL): no help text
                    text = ""
            shown = "required" if value is dataclasses.MISSING else f"default: {value!r}" if value is not None else ""
            rows.append((spelled(prefix + f.name), type_name(hint),
                         (text.strip() + (f" [{shown}]" if shown else "")).strip()))
    walk(config_class if isinstance(config_class, type) else type(config_class), "",
         None if isinstance(config_class, type) else config_class)
    return rows

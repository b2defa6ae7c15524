"""Structural diff of two identity documents (pure), with readable paths and values.

Identity documents are the canonical encodings of executor/core/canonical.py: a dataclass is
{"dataclass": type, "fields": {...}}, a dependency {"dependency": digest, "sub": ...}, and floats,
tuples, dicts, sets, enums, paths and bytes are tagged. The diff walks both trees at once and
reports leaf changes (`config.tokenizer.vocab_size: 4096 -> 8192`) and dependency digest changes
separately, so callers can follow a dependency to its own root cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ABSENT = object()  # a field or item present on one side only
_SCALAR_TAGS = ("float", "enum", "bytes", "path", "this_output", "prefix_path")


@dataclass(frozen=True)
class FieldChange:
    """A hashed value that differs (or exists on one side only)."""

    path: str
    old: str  # rendered; "<absent>" when the field did not exist
    new: str

    def render(self) -> str:
        return f"{self.path}: {self.old} -> {self.new}"


@dataclass(frozen=True)
class DependencyChange:
    """A dependency placeholder whose step digest differs: the dependency was re-addressed."""

    path: str
    old_digest: str
    new_digest: str
    sub: str | None

    def render(self, name: str | None = None) -> str:
        who = name or "?"
        return f"dependency {who} ({self.path}): {short(self.old_digest)}… -> {short(self.new_digest)}…"


@dataclass(frozen=True)
class TagMoved(FieldChange):
    """An output_of_tag(...) whose tag now points at another digest (`stepgraph tag --force`)."""

    tag: str = ""

    def render(self) -> str:
        return f"tag {self.tag} moved from {self.old}… to {self.new}… ({self.path})"


Change = FieldChange | DependencyChange


def short(digest: str) -> str:
    return digest[:12]


def diff_documents(old: Any, new: Any) -> list[Change]:
    """Every difference between two identity documents (or any two encoded trees), in order."""
    changes: list[Change] = []
    _diff(old, new, "", changes)
    return changes


def _join(path: str, part: str | int, kind: str) -> str:
    if kind == "index":
        return f"{path}[{part}]"
    if kind == "key":
        return f"{path}[{part!r}]"
    return f"{path}.{part}" if path else str(part)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        if "tag" in value and "digest" in value:  # output_of_tag(...)
            return "tagged"
        for tag in ("dataclass", "dependency", "tuple", "dict", "set", *_SCALAR_TAGS):
            if tag in value:
                return tag
        return "mapping"  # the top level of an identity document
    if isinstance(value, list):
        return "list"
    return "scalar"


def _diff(old: Any, new: Any, path: str, out: list[Change]) -> None:
    if old == new:
        return
    kind_old, kind_new = _kind(old), _kind(new)
    if old is ABSENT or new is ABSENT or kind_old != kind_new:
        out.append(FieldChange(path or "<document>", render_value(old), render_value(new)))
        return
    kind = kind_old
    if kind == "tagged" and old["tag"] == new["tag"] and old["digest"] != new["digest"]:
        out.append(TagMoved(path, short(old["digest"]), short(new["digest"]), tag=new["tag"]))
        _diff(old.get("sub"), new.get("sub"), _join(path, "sub", "field"), out)
    elif kind == "tagged":
        out.append(FieldChange(path, render_value(old), render_value(new)))
    elif kind == "dependency":
        if old["dependency"] != new["dependency"]:
            out.append(DependencyChange(path, old["dependency"], new["dependency"], new.get("sub")))
        if old.get("sub") != new.get("sub"):
            out.append(FieldChange(_join(path, "sub", "field") + " (dependency subpath)",
                                   render_value(old.get("sub")), render_value(new.get("sub"))))
    elif kind == "dataclass":
        if old["dataclass"] != new["dataclass"]:
            out.append(FieldChange(f"{path} (type)", old["dataclass"], new["dataclass"]))
        _diff_mapping(old["fields"], new["fields"], path, "field", out)
    elif kind == "mapping":
        _diff_mapping(old, new, path, "field", out)
    elif kind == "dict":
        _diff_mapping(old["dict"], new["dict"], path, "key", out)
    elif kind in ("list", "tuple"):
        a, b = (old, new) if kind == "list" else (old["tuple"], new["tuple"])
        for i in range(max(len(a), len(b))):
            _diff(a[i] if i < len(a) else ABSENT, b[i] if i < len(b) else ABSENT, _join(path, i, "index"), out)
    elif kind == "set":
        removed = [x for x in old["set"] if x not in new["set"]]
        added = [x for x in new["set"] if x not in old["set"]]
        out.append(FieldChange(path, "{" + ", ".join(render_value(x) for x in removed) + "} removed",
                               "{" + ", ".join(render_value(x) for x in added) + "} added"))
    else:
        out.append(FieldChange(path, render_value(old), render_value(new)))


def _diff_mapping(old: dict, new: dict, path: str, kind: str, out: list[Change]) -> None:
    for key in sorted(set(old) | set(new)):
        _diff(old.get(key, ABSENT), new.get(key, ABSENT), _join(path, key, kind), out)


def render_value(value: Any, limit: int = 80) -> str:
    """A tagged canonical value as Python-looking text: 0.1, (1, 2), Color.RED, Path('x')."""
    text = _render(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _render(value: Any) -> str:
    if value is ABSENT:
        return "<absent>"
    kind = _kind(value)
    if kind == "scalar":
        return repr(value)
    if kind == "list":
        return "[" + ", ".join(_render(x) for x in value) + "]"
    if kind == "float":
        return value["float"]
    if kind == "enum":
        return f"{value['enum'].rsplit('.', 1)[-1]}.{value['name']}"
    if kind == "bytes":
        return f"bytes.fromhex({value['bytes']!r})"
    if kind == "path":
        return f"Path({value['path']!r})"
    if kind == "this_output":
        return "this_output_path(" + (repr(value["this_output"]) if value["this_output"] else "") + ")"
    if kind == "prefix_path":
        return f"prefix_path({value['prefix_path']!r})"
    if kind == "dependency":
        sub = f", {value['sub']!r}" if value.get("sub") else ""
        return f"output_path_of({short(value['dependency'])}…{sub})"
    if kind == "tagged":
        sub = f", {value['sub']!r}" if value.get("sub") else ""
        return f"output_of_tag({value['tag']!r}{sub})"
    if kind == "tuple":
        items = [_render(x) for x in value["tuple"]]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_render(v)}" for k, v in sorted(value["dict"].items())) + "}"
    if kind == "set":
        return "{" + ", ".join(_render(x) for x in value["set"]) + "}" if value["set"] else "set()"
    if kind == "dataclass":
        name = value["dataclass"].rsplit(".", 1)[-1]
        return f"{name}(" + ", ".join(f"{k}={_render(v)}" for k, v in value["fields"].items()) + ")"
    return repr(value)


def cascade_summary(steps_readdressed: int, roots: list[tuple[str, list[str]]]) -> str:
    """'37 steps re-addressed by 1 change in tokenize: config.vocab_size' (roots: name, paths)."""
    changes = sum(max(1, len(paths)) for _, paths in roots)
    where = "; ".join(f"in {name}: {', '.join(paths) or 'new step'}" for name, paths in roots)
    plural = "s" if steps_readdressed != 1 else ""
    return f"{steps_readdressed} step{plural} re-addressed by {changes} change{'s' if changes != 1 else ''} {where}"

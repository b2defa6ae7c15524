"""The house's three parts (README "Layout"): imports only go down core <- engine <- tools.

The core imports neither the engine nor the tools; the engine never imports the tools or the
command line; and no two executor modules import each other, even only for type checking.
Steps and experiments use only the public surface, `from executor import ...` (executor.__all__),
Ray is imported behind the runner seam (executor/engine/runner/) only, and presentation lives in
the tools: the core and the engine never import rich (they emit events carrying data; the console
renderers in executor/tools/ draw them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import executor

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "executor"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every executor module a file imports, anywhere in it (functions and TYPE_CHECKING too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name.split(".")[0] == "executor"}


MODULES = {module_name(p): imported_modules(p) for p in sorted(PACKAGE.rglob("*.py"))}
KNOWN = set(MODULES)


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ("core", "engine", "tools") else "top"


@pytest.mark.parametrize("layer, forbidden", [
    ("core", ("engine", "tools", "top")),
    ("engine", ("tools", "top")),
])
def test_imports_only_go_down(layer, forbidden):
    bad = sorted(f"{mod} imports {imp}" for mod, imps in MODULES.items() if _layer(mod) == layer
                 for imp in imps if imp in KNOWN and imp != "executor" and _layer(imp) in forbidden)
    assert not bad, "layering broken:\n" + "\n".join(bad)


def test_no_import_cycles_between_modules():
    graph = {m: {i for i in imps if i in KNOWN and i != m and not m.startswith(i + ".")}
             for m, imps in MODULES.items() if not m.endswith("__init__")}
    graph = {m: {i for i in deps if not i == "executor"} for m, deps in graph.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def private_imports(path: Path) -> list[str]:
    """The executor modules below the package root that a file imports (`from executor import X`
    imports names of the public surface, not modules)."""
    public = {f"executor.{name}" for name in executor.__all__}
    return sorted(name for name in imported_modules(path) if name != "executor" and name not in public)


def test_steps_and_experiments_use_only_the_public_surface():
    files = sorted([*(REPO / "steps").rglob("*.py"), *(REPO / "experiments").rglob("*.py")])
    assert len(files) > 20
    bad = [f"{path.relative_to(REPO)} imports {', '.join(names)}" for path in files
           if (names := private_imports(path))]
    assert not bad, "steps import `from executor import ...` only (add what they need to executor.__all__):\n" + \
        "\n".join(bad)


def test_the_public_surface_check_sees_every_import_form(tmp_path):
    step = tmp_path / "step.py"
    step.write_text("import executor\nfrom executor import map_shards\nimport executor.engine.prefix.outputs\n"
                    "def f():\n    from executor.core.step import secret\n    from executor.engine import events\n")
    assert private_imports(step) == ["executor.core.step", "executor.core.step.secret", "executor.engine",
                                     "executor.engine.events", "executor.engine.prefix.outputs"]


def imports_of(path: Path) -> set[str]:
    """Every top-level package a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_ray_is_imported_only_behind_the_runner_seam():
    seam = PACKAGE / "engine" / "runner"
    files = [p for p in sorted([*PACKAGE.rglob("*.py"), *(REPO / "steps").rglob("*.py"),
                                *(REPO / "experiments").rglob("*.py")]) if seam not in p.parents]
    assert any(seam in p.parents for p in PACKAGE.rglob("*.py") if "ray" in imports_of(p))  # the check sees Ray
    outside = [str(p.relative_to(REPO)) for p in files if "ray" in imports_of(p)]
    assert not outside, f"only executor/engine/runner/ imports ray: {outside}"


def test_the_core_and_the_engine_never_import_rich():
    inside = [p for p in sorted(PACKAGE.rglob("*.py")) if _layer(module_name(p)) in ("core", "engine")]
    assert len(inside) > 40
    assert any("rich" in imports_of(p) for p in (PACKAGE / "tools").rglob("*.py"))  # the check sees rich
    drawing = [str(p.relative_to(REPO)) for p in inside if "rich" in imports_of(p)]
    assert not drawing, f"presentation belongs in executor/tools/ (console_reporter.py, console_live.py): {drawing}"

"""The package as a whole: importing it changes nothing in the process, and its rooms import only
downward (no circles)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "repr_jax"


def test_import_has_no_process_wide_side_effects():
    """``import repr_jax`` (and its training package) leaves malloc alone; the CLI opts in."""
    probe = ("import repr_jax, repr_jax.train, repr_jax.host_memory as h; "
             "print(h.kept)")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[-1] == "False"


def _module_imports() -> dict[str, set[str]]:
    """``{module: {repr_jax modules it imports}}`` from the source (top-level and lazy imports)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                deps.add(base)
                deps.update(f"{base}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d.startswith("repr_jax")}
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def test_no_import_circles_between_modules():
    graph = _module_imports()
    # A package's __init__ re-exports its modules; the circles that matter are between modules.
    edges = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for d in sorted(edges[m]):
            if state.get(d) == "open":
                raise AssertionError("import circle: " + " -> ".join(path[path.index(d):] + [d]))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = "done"
    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_config_is_the_bottom_floor():
    """config.py imports no other room (only the bottom floor's files.py and sections.py); the
    rooms below train/ import neither train nor scaling."""
    graph = _module_imports()
    assert graph["repr_jax.config"] <= {"repr_jax", "repr_jax.files", "repr_jax.sections"}
    assert graph["repr_jax.sections"] == set()  # its hooks are imported by name, on first use
    assert graph["repr_jax.files"] == set() and graph["repr_jax.backend"] == set()
    for room in ("repr_jax.encoders", "repr_jax.objectives", "repr_jax.methods", "repr_jax.eval",
                 "repr_jax.data"):
        for m, deps in graph.items():
            if m == room or m.startswith(room + "."):
                bad = {d for d in deps if d.startswith(("repr_jax.train", "repr_jax.scaling",
                                                        "repr_jax.cli"))}
                assert not bad, (m, bad)

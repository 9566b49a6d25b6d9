"""The control plane's floors (docs/architecture.md): each module imports only
modules of its own floor or of floors below it, there is no import circle,
and no project import hides inside a function (where an optional dependency
is imported late, the line says `# optional:` and why)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from satbed_testlib import REPO

# Bottom to top. A module belongs to the first floor whose prefix it has.
FLOORS = (
    ("core", ("satbed.core",)),
    ("model", ("satbed.model",)),
    ("backends", ("satbed.backends",)),
    ("results", ("satbed.results",)),
    ("execution", ("satbed.execution",)),
    ("analysis", ("analysis",)),
    ("report", ("satbed.report",)),
    ("commands", ("satbed.cli", "satbed.commands", "satbed.worker", "satbed.__main__")),
)
MAX_LINES = 600


# The package itself holds only __version__: the bottom floor's.
EXACT = {"satbed": 0}


def floor_of(module: str) -> int:
    if module in EXACT:
        return EXACT[module]
    for i, (_, prefixes) in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is on no floor")


def modules() -> dict[str, str]:
    found = {}
    for top in ("satbed", "analysis"):
        for dirpath, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    name = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                    found[name.removesuffix(".__init__")] = path
    return found


MODULES = modules()


def _target(current: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The project modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = current if MODULES[current].endswith("__init__.py") else current.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = []
    for n in names:
        while n and n not in MODULES:
            n = n.rpartition(".")[0]
        if n:
            out.append(n)
    return out


def imports(module: str) -> list[tuple[str, int, bool, str]]:
    """(imported module, line, inside a function, the source line)."""
    path = MODULES[module]
    text = open(path, encoding="utf-8").read()
    lines = text.splitlines()
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _target(module, child):
                    if target != module:
                        found.append((target, child.lineno, in_function, lines[child.lineno - 1]))
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            # `if TYPE_CHECKING:` imports never run: they are annotations, not dependencies.
            if isinstance(child, ast.If) and getattr(child.test, "id", "") == "TYPE_CHECKING":
                continue
            visit(child, nested)

    visit(ast.parse(text), False)
    return found


def test_every_module_is_on_a_floor():
    for m in MODULES:
        floor_of(m)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_upward_import(module):
    mine = floor_of(module)
    upward = [f"line {line}: {target} ({FLOORS[floor_of(target)][0]})"
              for target, line, _, _ in imports(module) if floor_of(target) > mine]
    assert not upward, f"{module} ({FLOORS[mine][0]}) imports from above: " + "; ".join(upward)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_project_import_inside_a_function(module):
    hidden = [f"line {line}: {src.strip()}" for target, line, inner, src in imports(module)
              if inner and "# optional:" not in src]
    assert not hidden, f"{module} imports inside a function: " + "; ".join(hidden)


def test_no_import_circle():
    graph = {m: {t for t, *_ in imports(m)} for m in MODULES}
    # Tarjan's strongly connected components, iteratively (no recursion limit).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    assert not circles, f"import circles: {circles}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_600_lines(module):
    n = sum(1 for _ in open(MODULES[module], encoding="utf-8"))
    assert n <= MAX_LINES, f"{MODULES[module]} has {n} lines (at most {MAX_LINES}: split it by job)"


def test_no_context_variables():
    users = [m for m, p in MODULES.items() if "contextvars" in open(p, encoding="utf-8").read()]
    assert not users, f"configuration travels through ContextVars in {users}: hand an object in instead"


def test_commands_and_matrix_cells_start_without_matplotlib():
    """matplotlib costs about 0.6 s of CPU to import: every `satbed` command
    and every matrix cell's child paid it, drawing or not. It loads with the
    first figure (analysis/figures.py)."""
    probe = ("import sys, satbed.cli, satbed.worker, analysis.report; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"imported at start: {out.stdout.strip()[:200]}"


def _blas_threads(env: dict[str, str], entry: str = "satbed.cli") -> int:
    """Threads of a process that imported an entry point and made one BLAS call."""
    probe = (f"import os, {entry}, numpy; a = numpy.ones((64, 64)); a @ a; "
             "print(len(os.listdir('/proc/self/task')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env={**env, "PYTHONPATH": REPO},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def test_numpy_runs_blas_on_one_thread_unless_told_otherwise():
    """OpenBLAS keeps a thread per core spinning after each BLAS call: a run's
    graphs cost 8-10 CPU-s with it and about 5 without (analysis/__init__.py).
    A value the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _blas_threads(env) == 1
    assert _blas_threads(env, "satbed.worker") == 1     # a matrix cell's child
    if (os.cpu_count() or 1) >= 2:
        assert _blas_threads({**env, "OPENBLAS_NUM_THREADS": "2"}) == 2


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """The checks above can fail: a model module importing a backend is caught."""
    fake = tmp_path / "satbed" / "model"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from satbed.backends import net\n\ndef f():\n    from satbed.core import units\n")
    monkeypatch.setitem(MODULES, "satbed.model.bad", str(fake / "bad.py"))
    found = imports("satbed.model.bad")
    assert [(t, inner) for t, _, inner, _ in found] == [("satbed.backends.net", False), ("satbed.core.units", True)]
    with pytest.raises(AssertionError, match="imports from above"):
        test_no_upward_import("satbed.model.bad")
    with pytest.raises(AssertionError, match="inside a function"):
        test_no_project_import_inside_a_function("satbed.model.bad")

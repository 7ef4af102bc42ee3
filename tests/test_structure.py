"""The layering rules of docs/architecture.md, checked on the source (ast) and by importing it.

The pipeline's layers in order (network and kernels -> profile -> WR and desirable sets -> WD -> plan),
the memory planner beside them, then the runtimes, the commands and the dashboard on top: no module
imports a later layer and there are no import cycles; the engine never imports the dashboard; GPU and
optional libraries load only when used; reading a profile or a plan never loads the optimizers; every
fact about a precision lives in engine/precision.py; tests and benchmarks share builders through
engine/testing, never through each other.
"""

from __future__ import annotations

import ast
import io
import tokenize
import fnmatch
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAZY = ("cupy", "cudnn", "torch", "torchvision", "dask", "distributed")  # optional, heavy or GPU-only
# the only modules that may import LAZY libraries at their top: engine code that runs on a GPU host
# or with PyTorch, and is itself imported only inside a function (a command's run(), a GPU job)
GPU_SIDE = ("engine/gpu/", "engine/pytorch/")
MAX_STATEMENTS = 300  # logical lines (tokenize NEWLINE): the formatter's layout does not change them


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def from_module(node: ast.ImportFrom, path: Path) -> str:
    """The absolute name of the module a ``from ... import`` in ``path`` reads (relative imports resolved)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1] if node.level else []
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, top_level_only: bool = False) -> list[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = from_module(node, path)
            out += [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "importorskip")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out.append(str(node.args[0].value))
    return out


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# The layers, lowest first: a module may import its own layer and lower ones, never a higher one. Every
# module of engine/ and dashboard/ is in one (a new module is placed here and in docs/architecture.md).
LAYERS = [
    (
        "foundation",
        [
            "engine",
            "engine.errors",
            "engine.fileio",
            "engine.units",
            "engine.precision",
            "engine.netnames",
            "engine.policies",
            "engine.configuration",
        ],
    ),
    ("kernels", ["engine.kernels"]),
    (
        "networks",
        [
            "engine.network",
            "engine.spec",
            "engine.zoo",
            "engine.pytorch.importer",
            "engine.pytorch.loader",
            "engine.pytorch.trace",
            "engine.pytorch.ownops",
        ],
    ),
    ("profile", ["engine.profile"]),
    ("WR and desirable sets", ["engine.optimize.wr", "engine.optimize.desirable", "engine.kernel_sets"]),
    ("WD and fronts", ["engine.optimize", "engine.optimize.wd", "engine.optimize.front"]),
    ("plan", ["engine.plan", "engine.stock", "engine.planner", "engine.summary"]),
    ("memory planner", ["engine.memory", "engine.memory.*"]),
    ("runtime", ["engine.gpu", "engine.gpu.*", "engine.pytorch", "engine.pytorch.*"]),
    ("commands", ["engine.cli", "engine.__main__", "engine.commands", "engine.commands.*"]),
    ("test builders", ["engine.testing", "engine.testing.*"]),
    ("dashboard", ["dashboard", "dashboard.*", "app"]),
]


def layer_of(module: str) -> int | None:
    """Index in LAYERS; an exact name wins over a pattern (engine.pytorch.loader is a network module)."""
    exact = [i for i, (_, names) in enumerate(LAYERS) if module in names]
    if exact:
        return exact[0]
    return next((i for i, (_, names) in enumerate(LAYERS) if any(fnmatch.fnmatchcase(module, n) for n in names)), None)


def layered_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sources("engine", "dashboard") + [ROOT / "app.py"]}


def module_imports(path: Path, modules) -> set[str]:
    """The in-repo modules ``path`` imports anywhere in it, each resolved to the module it loads: in
    engine/gpu/profiler.py ``from . import runtime`` is engine.gpu.runtime, ``from . import KNOB_SAMPLES``
    is engine.gpu, ``from .graphs import ALIGN`` is engine.gpu.graphs."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = from_module(node, path)
            names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module_name(path):
                out.add(name)
    return out


def test_every_module_has_a_layer():
    assert not [m for m in layered_modules() if layer_of(m) is None], "place new modules in LAYERS"


def test_no_module_imports_a_later_layer():
    """The pipeline's order: a profile never needs the optimizers, an optimizer never the plan, the plan never
    the runtime; the memory planner reads the layers below it and is read only by the runtime and above."""
    modules = layered_modules()
    bad = [
        (m, LAYERS[layer_of(m)][0], d, LAYERS[layer_of(d)][0])
        for m, p in modules.items()
        for d in module_imports(p, modules)
        if layer_of(d) > layer_of(m)
    ]
    assert not bad


def test_no_import_cycles_among_engine_modules():
    """Including imports inside functions, except a package's forwarding to its own submodules (engine.gpu's
    profile_network and verify_plan): a lazy import hides a cycle from Python, not from the reader."""
    modules = {m: p for m, p in layered_modules().items() if m.split(".")[0] == "engine"}
    graph = {
        m: {
            d
            for d in module_imports(p, modules)
            if d in modules and not (p.name == "__init__.py" and d.startswith(m + "."))
        }
        for m, p in modules.items()
    }
    cycles, done = [], set()

    def visit(m, path):
        if m in path:
            cycles.append(path[path.index(m) :] + [m])
            return
        if m in done:
            return
        for d in sorted(graph[m]):
            visit(d, path + [m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])
    assert not cycles


def test_the_engine_never_imports_the_dashboard():
    bad = [(rel(p), m) for p in sources("engine") for m in imports(p) if m.split(".")[0] in ("dashboard", "app")]
    assert not bad


def test_lazy_libraries_are_imported_only_where_they_run():
    bad = [
        (rel(p), m)
        for p in sources("engine", "dashboard") + [ROOT / "app.py"]
        if not (rel(p).startswith(GPU_SIDE) and p.name != "__init__.py")
        for m in imports(p, top_level_only=True)
        if m.split(".")[0] in LAZY
    ]
    assert not bad


def test_no_test_module_imports_another_and_benchmarks_do_not_import_tests():
    test_modules = {p.stem for p in sources("tests") if p.stem.startswith("test_") or p.stem == "conftest"}
    bad = []
    for p in sources("tests", "benchmarks", "tools"):
        for m in imports(p):
            head = m.split(".")[0]
            if head == "tests" or head in test_modules or m.split(".")[-1] in test_modules - {"conftest"}:
                bad.append((rel(p), m))
    assert not bad


def test_in_repo_modules_are_imported_plainly_never_skipped():
    """importorskip of engine or dashboard would turn a broken module into a skipped test."""
    bad = []
    for p in sources("tests"):
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") == "importorskip"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).split(".")[0] in ("engine", "dashboard")
            ):
                bad.append((rel(p), node.args[0].value))
    assert not bad


def statements(text: str) -> int:
    """Logical lines of a module, as Python's tokenizer ends them: one per simple statement or compound header,
    whatever the layout (a call split over ten lines by ``ruff format`` is still one)."""
    return sum(tok.type == tokenize.NEWLINE for tok in tokenize.generate_tokens(io.StringIO(text).readline))


def test_long_modules_say_why_in_their_docstring():
    long = []
    for p in sources("engine", "dashboard"):
        text = p.read_text()
        if statements(text) > MAX_STATEMENTS:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if f"over {MAX_STATEMENTS} statements" not in doc:
                long.append((rel(p), statements(text)))
    assert not long, f"split these modules or say in their docstring why they are 'over {MAX_STATEMENTS} statements'"


def test_statements_are_counted_whatever_the_layout():
    assert statements("f(a, b)\nx = 1\n") == statements("f(\n    a,\n    b,\n)\n\nx = 1\n") == 2


def loaded_after_importing(modules: list[str]) -> set[str]:
    code = (
        f"import importlib, json, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout))


@pytest.mark.slow
def test_cpu_modules_load_no_gpu_or_optional_library():
    """Every engine and dashboard module outside the GPU side imports without CuPy, cuDNN, PyTorch or Dask,
    and without loading them even where they are installed."""
    cpu = [
        module_name(p)
        for p in sources("engine", "dashboard")
        if (not rel(p).startswith(GPU_SIDE) or p.name == "__init__.py") and p.name != "__main__.py"
    ]
    loaded = loaded_after_importing(cpu)
    assert not {m for m in loaded if m.split(".")[0] in LAZY}


@pytest.mark.parametrize(
    "modules,absent",
    [
        (["engine.profile", "engine.plan"], ("engine.optimize", "pulp", "engine.planner")),
        (["engine.cli", "engine.commands.networks"], ("engine.optimize", "pulp", "engine.gpu.profiler")),
        (["engine.commands.profile", "engine.commands.verify"], ("engine.gpu.profiler", "engine.gpu.verify")),
    ],
)
def test_reading_data_does_not_load_the_optimizers(modules, absent):
    """Profiles and plans are data: reading them needs neither the optimizers (and their ILP solver) nor the
    GPU code; a command's heavy imports wait for its run()."""
    loaded = loaded_after_importing(modules)
    assert not {m for m in loaded if m.split(".")[0] in absent or m in absent}


def import_cycles() -> list[list[str]]:
    """Strongly connected components (more than one module) of the engine's import graph, lazy imports
    included: a cycle a function-level import closes is still a cycle."""
    mods = {module_name(p): p for p in sources("engine")}
    graph = {m: sorted({i for i in imports(p) if i in mods and i != m}) for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while component[-1:] != [v]:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_crosses_a_package():
    """A package's modules may import each other through its __init__; across packages the arrows of
    docs/architecture.md point one way (the zoo once imported the PyTorch loader, which imported the zoo:
    the name grammar now lives below both, in engine.netnames)."""

    def package(m: str) -> str:
        return m if (ROOT / m.replace(".", "/") / "__init__.py").exists() else m.rpartition(".")[0]

    crossing = [c for c in import_cycles() if len({package(m) for m in c}) > 1]
    assert not crossing


def test_the_network_name_grammar_needs_nothing_above_it():
    assert {m for m in imports(ROOT / "engine/netnames.py") if m.startswith("engine")} <= {
        "engine.errors",
        "engine.errors.ModelImportError",
    }


def precision_tables(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """Tables keyed by precision names outside the record: a dict literal with two or more of them as keys
    (``{"tf32": ..., "fp16": ...}``), or a membership test in a literal collection of two or more
    (``precision in ("fp16", "bf16")``). A branch on one precision, or a lookup in the record, is no table."""

    def named(elts) -> int:
        return sum(isinstance(e, ast.Constant) and e.value in names for e in elts)

    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Dict) and named(node.keys) >= 2:
            found.append((node.lineno, "dict keyed by precisions"))
        elif isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if (
                    isinstance(op, (ast.In, ast.NotIn))
                    and isinstance(right, (ast.Tuple, ast.List, ast.Set))
                    and named(right.elts) >= 2
                ):
                    found.append((node.lineno, "membership in a list of precisions"))
    return found


def test_precision_facts_live_only_in_the_precision_record():
    """dtype, itemsize, default layout, cuDNN/torch/array types, deselected notes and tolerances of a precision
    are read from engine.precision.PRECISIONS, so a new precision touches that file (docs/architecture.md)."""
    from engine.precision import PRECISIONS

    files = sources("engine", "dashboard", "benchmarks", "tools", "tests") + [ROOT / "app.py"]
    bad = [
        (rel(p), line, what)
        for p in files
        if rel(p) != "engine/precision.py"
        for line, what in precision_tables(p, set(PRECISIONS))
    ]
    assert not bad


def test_the_precision_table_check_finds_tables(tmp_path):
    """The check above must see the forms it forbids (and pass over a lookup in the record)."""
    src = tmp_path / "m.py"
    src.write_text(
        'TORCH = {"tf32": 4, "fp32": 4}\nhalf = p in ("fp16", "bf16")\nok = p == "fp16"\n'
        "fine = {n: r.itemsize for n, r in PRECISIONS.items()}\n"
    )
    assert [line for line, _ in precision_tables(src, {"tf32", "fp32", "fp16", "bf16"})] == [1, 2]


def test_the_tree_cites_nothing_outside_itself():
    """A clone has no ``../shared`` (the papers, reference notes and tools some sessions had beside it): files cite
    papers by title and arXiv id and carry the facts they need."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    outside = ("../shared", "shared/papers", "shared/reference", "shared/tools")
    hits = [
        f
        for f in listed
        if f != "tests/test_structure.py"
        and Path(f).suffix in {".py", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".txt", ".cfg", ""}
        and (ROOT / f).is_file()
        and any(o in (ROOT / f).read_text(errors="replace") for o in outside)
    ]
    assert hits == []

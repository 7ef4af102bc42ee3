"""The layering rules of docs/architecture.md, checked on the source (ast) and by importing it.

profile data -> optimizers -> plan -> runtime, the memory planner beside them, the dashboard on top:
the engine never imports the dashboard; GPU and optional libraries load only when used; reading a
profile or a plan never loads the optimizers; tests and benchmarks share builders through
engine/testing, never through each other.
"""

from __future__ import annotations

import ast
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
MAX_LINES = 400


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool = False) -> list[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out += [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "importorskip") and node.args and isinstance(node.args[0], ast.Constant):
            out.append(str(node.args[0].value))
    return out


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_engine_never_imports_the_dashboard():
    bad = [(rel(p), m) for p in sources("engine") for m in imports(p) if m.split(".")[0] in ("dashboard", "app")]
    assert not bad


def test_lazy_libraries_are_imported_only_where_they_run():
    bad = [(rel(p), m) for p in sources("engine", "dashboard") + [ROOT / "app.py"]
           if not (rel(p).startswith(GPU_SIDE) and p.name != "__init__.py")
           for m in imports(p, top_level_only=True) if m.split(".")[0] in LAZY]
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
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and str(node.args[0].value).split(".")[0] in ("engine", "dashboard")):
                bad.append((rel(p), node.args[0].value))
    assert not bad


def test_long_modules_say_why_in_their_docstring():
    long = []
    for p in sources("engine", "dashboard"):
        text = p.read_text()
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if f"over {MAX_LINES} lines" not in doc:
                long.append((rel(p), text.count("\n")))
    assert not long, f"split these modules or say in their docstring why they are 'over {MAX_LINES} lines'"


def loaded_after_importing(modules: list[str]) -> set[str]:
    code = (f"import importlib, json, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout))


@pytest.mark.slow
def test_cpu_modules_load_no_gpu_or_optional_library():
    """Every engine and dashboard module outside the GPU side imports without CuPy, cuDNN, PyTorch or Dask,
    and without loading them even where they are installed."""
    cpu = [module_name(p) for p in sources("engine", "dashboard")
           if (not rel(p).startswith(GPU_SIDE) or p.name == "__init__.py") and p.name != "__main__.py"]
    loaded = loaded_after_importing(cpu)
    assert not {m for m in loaded if m.split(".")[0] in LAZY}


@pytest.mark.parametrize("modules,absent", [
    (["engine.profile", "engine.plan"], ("engine.optimize", "pulp", "engine.planner")),
    (["engine.cli", "engine.commands.networks"], ("engine.optimize", "pulp", "engine.gpu.profiler")),
    (["engine.commands.profile", "engine.commands.verify"], ("engine.gpu.profiler", "engine.gpu.verify")),
])
def test_reading_data_does_not_load_the_optimizers(modules, absent):
    """Profiles and plans are data: reading them needs neither the optimizers (and their ILP solver) nor the
    GPU code; a command's heavy imports wait for its run()."""
    loaded = loaded_after_importing(modules)
    assert not {m for m in loaded if m.split(".")[0] in absent or m in absent}

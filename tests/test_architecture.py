"""The three rings and their direction (docs/architecture.md).

* the library: every package of ``stragglers`` except the three below;
* the testbed (``stragglers.testbed``): the example job, the toy job, fault injection;
* the evaluation (``stragglers.evaluation``): verdict-eval, fidelity, the detection corpora and
  their evaluation;
* the command line (``stragglers.cli``) on top.

An edge may only point inwards: the library imports the library; the testbed the library; the
evaluation the library and the testbed; the command line anything. Every module's imports are
read with ``ast`` (imports inside functions included), as well as string constants that name a
module to run or import (``python -m stragglers.testbed.toyjob``, ``importlib``).

Inside the library, three packages split what ``stragglers.detect`` held (issue 29, item 4),
and data flows one way between them (:data:`BOUNDARIES`): the log readers
(``stragglers.logs``) import neither detection nor hang localisation; hang localisation
(``stragglers.hang``) imports no series detection and nothing of what acts on it
(``stragglers.recover``); series detection (``stragglers.detect``) no hang localisation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: ring -> the rings it may import
ALLOWED = {
    "library": {"library"},
    "testbed": {"library", "testbed"},
    "evaluation": {"library", "testbed", "evaluation"},
    "cli": {"library", "testbed", "evaluation", "cli"},
}
#: library package -> the packages its modules may not import (beside the rings)
BOUNDARIES: dict[str, tuple[str, ...]] = {
    "stragglers.logs": ("stragglers.detect", "stragglers.hang", "stragglers.recover"),
    "stragglers.hang": ("stragglers.detect", "stragglers.recover"),
    "stragglers.detect": ("stragglers.hang", "stragglers.recover"),
}
_MODULE_TEXT = re.compile(r"^stragglers(\.\w+)+$")


def ring(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("testbed", "evaluation", "cli"):
        return parts[1]
    return "library"


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``tree`` and of every string constant that is a
    dotted ``stragglers.…`` module path."""
    out: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            out += [(node.lineno, f"{target}.{a.name}") for a in node.names]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _MODULE_TEXT.match(node.value)):
            out.append((node.lineno, node.value))
    return [(line, m) for line, m in out if m == "stragglers" or m.startswith("stragglers.")]


def forbidden_edges(src: Path) -> list[str]:
    bad: dict[tuple[str, int], str] = {}
    for path in sorted((src / "stragglers").rglob("*.py")):
        module = module_name(path, src)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, target in imported(tree, module, path.name == "__init__.py"):
            where = str(path.relative_to(src))
            if ring(target) not in ALLOWED[ring(module)] and (where, line) not in bad:
                bad[where, line] = (f"{where}:{line}: {ring(module)} {module} imports "
                                    f"{ring(target)} {target}")
    return sorted(bad.values())


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def boundary_crossings(src: Path) -> list[str]:
    """Imports of a package that :data:`BOUNDARIES` forbids to the importing package."""
    bad: dict[tuple[str, int], str] = {}
    for path in sorted((src / "stragglers").rglob("*.py")):
        module = module_name(path, src)
        banned = [b for pkg, bs in BOUNDARIES.items() if _inside(module, pkg) for b in bs]
        if not banned:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, target in imported(tree, module, path.name == "__init__.py"):
            where = str(path.relative_to(src))
            hit = [b for b in banned if _inside(target, b)]
            if hit and (where, line) not in bad:
                bad[where, line] = f"{where}:{line}: {module} imports {target} ({hit[0]})"
    return sorted(bad.values())


def test_no_forbidden_import_edge() -> None:
    assert forbidden_edges(SRC) == []


def test_the_readers_hang_and_detection_packages_keep_their_boundaries() -> None:
    assert boundary_crossings(SRC) == []


def test_nothing_in_the_library_or_testbed_imports_the_bocd_baselines() -> None:
    users = set()
    for path in (SRC / "stragglers").rglob("*.py"):
        module = module_name(path, SRC)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        if any(_inside(t, "stragglers.evaluation.bocd")
               for _, t in imported(tree, module, path.name == "__init__.py")):
            users.add(ring(module))
    assert users <= {"evaluation", "cli"}


@pytest.mark.parametrize(("where", "text", "banned"), [
    ("logs/x.py", "from stragglers.detect.events import LevelEvent\n", "stragglers.detect"),
    ("logs/x.py", "def f():\n    import stragglers.hang.last_op\n", "stragglers.hang"),
    ("hang/x.py", "from stragglers.detect.robust import RobustLevelDetector\n",
     "stragglers.detect"),
    ("hang/x.py", "from stragglers.recover import heartbeat\n", "stragglers.recover"),
    ("detect/x.py", "from stragglers.hang.heartbeats import read_beats\n", "stragglers.hang"),
])
def test_the_boundary_check_finds_a_crossing(tmp_path: Path, where: str, text: str,
                                             banned: str) -> None:
    path = tmp_path / "stragglers" / where
    path.parent.mkdir(parents=True)
    path.write_text(text)
    (bad,) = boundary_crossings(tmp_path)
    assert bad.endswith(f"({banned})")


def test_readers_may_be_imported_by_detection_and_hang(tmp_path: Path) -> None:
    for where, text in [("detect/a.py", "from stragglers.logs.records import parse_line\n"),
                        ("hang/b.py", "from stragglers.logs import records\n"),
                        ("recover/c.py", "from stragglers.hang.heartbeats import read_beats\n"),
                        ("logs/d.py", "from stragglers.errors import InputError\n")]:
        path = tmp_path / "stragglers" / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert boundary_crossings(tmp_path) == []


def test_every_ring_exists() -> None:
    modules = {module_name(p, SRC) for p in (SRC / "stragglers").rglob("*.py")}
    assert {ring(m) for m in modules} == set(ALLOWED)


@pytest.mark.parametrize(("where", "text", "found"), [
    ("detect/x.py", "from stragglers.testbed.job import run_job\n", "library"),
    ("detect/x.py", "def f():\n    import stragglers.evaluation.corpus\n", "library"),
    ("detect/x.py", "from stragglers import cli\n", "library"),
    ("recover/x.py", "CMD = ['python', '-m', 'stragglers.testbed.toyjob']\n", "library"),
    ("testbed/x.py", "from stragglers.options import positive_int\n"
                     "from stragglers.evaluation import fidelity\n", "testbed"),
    ("evaluation/x.py", "from stragglers.cli.main import main\n", "evaluation"),
])
def test_the_check_finds_an_edge_that_points_outwards(tmp_path: Path, where: str, text: str,
                                                      found: str) -> None:
    path = tmp_path / "stragglers" / where
    path.parent.mkdir(parents=True)
    (tmp_path / "stragglers" / "__init__.py").write_text("")
    path.write_text(text)
    (bad,) = forbidden_edges(tmp_path)
    assert f": {found} stragglers." in bad


def test_inward_edges_pass(tmp_path: Path) -> None:
    for where, text in [("cli/a.py", "from stragglers.testbed.job import run_job\n"),
                        ("evaluation/b.py", "import stragglers.testbed.job\n"),
                        ("testbed/c.py", "from stragglers.probe.outdir import claim_out_dir\n"),
                        ("detect/d.py", "from stragglers.detect import watch\n")]:
        path = tmp_path / "stragglers" / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert forbidden_edges(tmp_path) == []

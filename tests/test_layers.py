"""The package's layers: no import cycles, no import up the floors, and sizes that do not grow.

The test parses every module of the installed package (``ast``; imports at module level and
inside functions alike) and builds the graph "module A imports module B" between the package's
own modules. ``from pymc_dp.x import y`` is an edge to ``pymc_dp.x.y`` when that is a module,
else to ``pymc_dp.x``. The parent packages that Python imports on the way
(``import pymc_dp.mechanisms.clipping`` runs ``pymc_dp/mechanisms/__init__.py`` first) are not
edges: a package's ``__init__`` only re-exports its modules' names, and counting it would put
every module in a cycle with it. An import of the package itself (``from pymc_dp.mechanisms
import model_access``) is an edge to the package's ``__init__``.

It checks that

- the graph has no cycle (:data:`KNOWN_CYCLE_EDGES` lists the edges left out, each with why);
- no module imports a module on a higher floor of :data:`LAYERS` (:data:`KNOWN_UPWARD` lists the
  exceptions, each with why); every module is on exactly one floor, and every entry of the table
  names a module that exists;
- no module over :data:`MAX_MODULE_LINES` lines and no function over :data:`MAX_FUNCTION_LINES`
  code lines appears beyond today's (:data:`KNOWN_LARGE_MODULES`, :data:`KNOWN_LONG_FUNCTIONS`,
  the issue's targets, not met yet).

The exception lists only shrink: an entry that is no longer needed fails the test too, so that it
cannot come back unnoticed. ``docs/architecture.md`` describes the same floors, in the same
order (checked below). The sizes are printed (``pytest -s tests/test_layers.py``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pymc_dp

PACKAGE = Path(pymc_dp.__file__).parent
ROOT = Path(__file__).resolve().parents[1]  # the source tree: docs/ is there

#: The floors, bottom to top. A module may import modules on its own floor or below, never above.
#: An entry is a module's dotted name, or ``name.*`` for every module below a package; the most
#: specific entry wins (a name before a pattern, a longer pattern before a shorter one).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Shared plumbing: error types, argument checks, library versions. Imports nothing of the package.
    ("foundation", ("pymc_dp._errors", "pymc_dp._validation", "pymc_dp._versions")),
    # Pure functions of public settings: events, composition, calibration, budgets, the ledger. No data.
    ("accounting", ("pymc_dp.accounting", "pymc_dp.accounting.*")),
    # Data-free helpers the data layer builds on: clip math, public-data markers, public starting
    # points, the exponential families' formulas (pure; applied to data by the mechanisms only), the
    # clipped gradient sum as one graph (symbolic) and the gradient mode's cost model (shapes only).
    (
        "data-free helpers",
        (
            "pymc_dp.clip_math",
            "pymc_dp.public_data",
            "pymc_dp.starts",
            "pymc_dp.usability",
            "pymc_dp.exponential_family.families",
            "pymc_dp.exponential_family.base",
            "pymc_dp.exponential_family.regressions",
            "pymc_dp.clip_graph",
            "pymc_dp.gradient_cost",
        ),
    ),
    # The model below its rows: its structure (which arrays are rows, the per-op rules of the row-wise
    # walk), the per-row graph checked row-wise, and the data-free prior. Nothing compiled on the rows.
    ("model", ("pymc_dp.model_structure", "pymc_dp.row_graph", "pymc_dp.prior")),
    # The model's rows: per-row log-likelihoods and gradients (RowLikelihood), compiled from the model.
    ("data", ("pymc_dp.data",)),
    # Where rows become releasable: clip, sum, add calibrated noise, state the cost. The code to audit.
    ("mechanisms", ("pymc_dp.mechanisms", "pymc_dp.mechanisms.*")),
    # Other ways to run the mechanisms (a JAX device, a Dask cluster); the same releases and events.
    ("backends", ("pymc_dp.backends", "pymc_dp.backends.*")),
    # The record of a run: result schema and clean-up, the private-run pipeline, diagnostics, statements.
    (
        "results",
        ("pymc_dp.results", "pymc_dp.run", "pymc_dp.diagnostics", "pymc_dp.statement", "pymc_dp.workflow"),
    ),
    # What a run can deliver before it is run, from public quantities only.
    (
        "planning",
        ("pymc_dp.planning", "pymc_dp.regression_graph", "pymc_dp.route_predictions", "pymc_dp.centred_predictions"),
    ),
    # The algorithms: DP step methods, DPADVI, released statistics and one posterior sample.
    (
        "algorithms",
        (
            "pymc_dp.step_methods",
            "pymc_dp.step_methods.*",
            "pymc_dp.variational",
            "pymc_dp.variational.*",
            "pymc_dp.exponential_family",
            "pymc_dp.exponential_family.*",
            "pymc_dp.release_once",
            "pymc_dp.release_once_linear",
        ),
    ),
    # What users call: pmdp.sample, publish, the bambi bridge, the public namespace, the audit tools.
    (
        "front end",
        (
            "pymc_dp",
            "pymc_dp.sampling",
            "pymc_dp.sample_plan",
            "pymc_dp.routes",
            "pymc_dp.publish",
            "pymc_dp.bambi",
            "pymc_dp.testing",
            "pymc_dp.testing.*",
        ),
    ),
)

#: Imports up the floors that remain, as (importer, imported), with why.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

#: Edges left out of the cycle check, with why.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}

#: The issue's targets (issue 38).
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80

#: Modules over MAX_MODULE_LINES lines at b5c854c (2026-11-27), with their lines then.
KNOWN_LARGE_MODULES: dict[str, int] = {}

#: Functions over MAX_FUNCTION_LINES code lines at b5c854c (2026-11-27), with their code lines then
#: (code lines: not blank, not only a comment, not in a docstring; a nested function counts in its parent too).
KNOWN_LONG_FUNCTIONS: dict[str, int] = {}


# -- the import graph -------------------------------------------------------------------------------


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(modules: dict[str, Path]):
    """Every (importer, imported, line) between the modules, at module level and inside functions."""
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against this module's package
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # pymc_dp.x.y.attribute -> pymc_dp.x.y
                    target = target.rpartition(".")[0]
                if target and target != name:
                    yield name, target, node.lineno


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for importer, imported, _ in _imports(modules):
        edges[importer].add(imported)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


# -- the floors -------------------------------------------------------------------------------------


def _floor_of(module: str, layers=LAYERS) -> int | None:
    """Index in ``layers`` of the most specific entry matching ``module`` (None when none does)."""
    best, best_rank = None, None
    for floor, (_, entries) in enumerate(layers):
        for entry in entries:
            if entry == module:
                rank = (1, len(entry))
            elif entry.endswith(".*") and module.startswith(entry[:-1]):
                rank = (0, len(entry))
            else:
                continue
            if best_rank is None or rank > best_rank:
                best, best_rank = floor, rank
    return best


def _upward(modules: dict[str, Path], layers=LAYERS):
    """Every import from a module to one on a higher floor: 'importer:line imports imported (low -> high)'."""
    for importer, imported, line in _imports(modules):
        low, high = _floor_of(importer, layers), _floor_of(imported, layers)
        if low is not None and high is not None and high > low:  # (None: reported by the floor check)
            yield importer, imported, f"{importer}:{line} imports {imported} ({layers[low][0]} -> {layers[high][0]})"


def test_no_import_cycles():
    edges = _graph(_modules())
    for importer, imported in KNOWN_CYCLE_EDGES:
        edges[importer].discard(imported)
    assert _cycles(edges) == []


def test_every_known_cycle_edge_is_still_there():
    edges = _graph(_modules())
    assert sorted(edge for edge in KNOWN_CYCLE_EDGES if edge[1] not in edges.get(edge[0], ())) == []


def test_every_module_is_on_a_floor_and_every_entry_names_a_module():
    modules = _modules()
    assert sorted(m for m in modules if _floor_of(m) is None) == [], "put each new module on a floor of LAYERS"
    stale = [
        entry
        for _, entries in LAYERS
        for entry in entries
        if not (entry in modules or (entry.endswith(".*") and any(m.startswith(entry[:-1]) for m in modules)))
    ]
    assert stale == []


def test_no_upward_imports():
    unexplained = [text for importer, imported, text in _upward(_modules()) if (importer, imported) not in KNOWN_UPWARD]
    assert unexplained == []


def test_every_known_upward_import_is_still_there():
    found = {(importer, imported) for importer, imported, _ in _upward(_modules())}
    assert sorted(set(KNOWN_UPWARD) - found) == []


def test_the_checks_see_cycles_and_upward_imports(tmp_path):
    # Guards against checks that cannot fail: a two-module cycle, an upward import inside a function,
    # a relative import, and an attribute import that resolves to its module.
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from pkg.low.base import helper\n")
    (package / "low" / "base.py").write_text("def helper():\n    from pkg.high import run\n    return run\n")
    (package / "low" / "other.py").write_text("from . import base\nfrom .base import helper\n")
    (package / "high.py").write_text("import pkg.low.base\nfrom pkg.low import helper\ndef run():\n    pass\n")
    modules = _modules(package)
    assert sorted(_imports(modules)) == [
        ("pkg.high", "pkg.low", 2),
        ("pkg.high", "pkg.low.base", 1),
        ("pkg.low", "pkg.low.base", 1),
        ("pkg.low.base", "pkg.high", 2),
        ("pkg.low.other", "pkg.low.base", 1),
        ("pkg.low.other", "pkg.low.base", 2),
    ]
    assert _cycles(_graph(modules)) == [["pkg.high", "pkg.low", "pkg.low.base"]]
    layers = (("bottom", ("pkg.low", "pkg.low.*")), ("top", ("pkg", "pkg.high")))
    assert [text for _, _, text in _upward(modules, layers)] == ["pkg.low.base:2 imports pkg.high (bottom -> top)"]
    assert _floor_of("pkg.low.other", layers) == 0 and _floor_of("pkg.elsewhere", layers) is None


# -- sizes ------------------------------------------------------------------------------------------


def _code_lines(source: str) -> set[int]:
    """Lines that hold code: not blank, not only a comment, not part of a docstring."""
    lines: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(range(token.start[0], token.end[0] + 1))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.difference_update(range(first.lineno, first.end_lineno + 1))
    return lines


def _function_sizes(path: Path) -> dict[str, int]:
    """Code lines of every function and method of a module, by qualified name (nested ones too)."""
    source = path.read_text()
    code = _code_lines(source)
    sizes = {}

    def walk(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                sizes[name] = len(code & set(range(child.lineno, child.end_lineno + 1)))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return sizes


def _sizes(root: Path = PACKAGE):
    """(lines per module, code lines per function as 'module.py::qualname'), relative to ``root``."""
    modules, functions = {}, {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        modules[relative] = len(path.read_text().splitlines())
        for name, size in _function_sizes(path).items():
            functions[f"{relative}::{name}"] = size
    return modules, functions


def test_code_lines_leave_out_docstrings_comments_and_blank_lines(tmp_path):
    (tmp_path / "m.py").write_text(
        '"""Module."""\n\n'
        "def f(x):\n"
        '    """Doc\n\n    more.\n    """\n'
        "    # a comment\n\n"
        "    y = (x +\n         1)\n"
        "    def g():\n        return '''a\nb'''\n"
        "    return y\n\n"
        "class C:\n    def m(self):\n        pass\n"
    )
    assert _function_sizes(tmp_path / "m.py") == {"f": 7, "f.g": 3, "C.m": 2}


def test_no_new_large_modules_or_long_functions():
    modules, functions = _sizes()
    large = {name: size for name, size in modules.items() if size > MAX_MODULE_LINES}
    long = {name: size for name, size in functions.items() if size > MAX_FUNCTION_LINES}
    floors = {}
    for name, path in _modules().items():
        floor = LAYERS[_floor_of(name)][0] if _floor_of(name) is not None else "?"
        count, lines = floors.get(floor, (0, 0))
        floors[floor] = (count + 1, lines + len(path.read_text().splitlines()))
    print(f"\n{len(modules)} modules, {sum(modules.values())} lines; by floor, bottom to top:")
    for floor, _ in LAYERS:
        print(f"  {floor:<18} {floors.get(floor, (0, 0))[0]:>3} modules {floors.get(floor, (0, 0))[1]:>6} lines")
    print(f"modules over {MAX_MODULE_LINES} lines: {len(large)} (known {len(KNOWN_LARGE_MODULES)})")
    for name, size in sorted(large.items(), key=lambda item: -item[1]):
        print(f"  {size:>5}  {name}  (known: {KNOWN_LARGE_MODULES.get(name, 'no')})")
    print(f"functions over {MAX_FUNCTION_LINES} code lines: {len(long)} (known {len(KNOWN_LONG_FUNCTIONS)})")
    for name, size in sorted(long.items(), key=lambda item: -item[1]):
        print(f"  {size:>5}  {name}  (known: {KNOWN_LONG_FUNCTIONS.get(name, 'no')})")
    gone = sorted(set(KNOWN_LARGE_MODULES) - set(large)) + sorted(set(KNOWN_LONG_FUNCTIONS) - set(long))
    if gone:
        print(f"within the targets now (delete from the known lists): {gone}")
    assert sorted(set(large) - set(KNOWN_LARGE_MODULES)) == []
    assert sorted(set(long) - set(KNOWN_LONG_FUNCTIONS)) == []


# -- the page that describes the floors -------------------------------------------------------------


def test_the_architecture_page_lists_the_floors_in_order():
    page = (ROOT / "docs" / "architecture.md").read_text()
    # The floors table: rows "| <number> | <floor> | ...", numbered from the bottom.
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|", page, flags=re.MULTILINE)
    assert [int(number) for number, _ in rows] == list(range(1, len(rows) + 1))
    assert [name for _, name in rows] == [floor for floor, _ in LAYERS]

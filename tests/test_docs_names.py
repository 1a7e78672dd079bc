"""Every ``az.``, ``pm.``, ``pmdp.`` and ``pymc_dp.`` name the docs and the README use exists on the installed line.

A name that only one ArviZ or PyMC line has must say so where it is used: the same text line or
one of the three before names that line ("ArviZ 0.x", "PyMC 6", ...) or branches on
``az.__version__`` / ``pm.__version__`` (the tutorials' plotting cells). Run on both lines
(Python 3.11: PyMC 5, ArviZ 0.x; Python 3.12: PyMC 6, ArviZ 1.x).
"""

import importlib
import pathlib
import re

import arviz as az
import pymc as pm
import pytest

import pymc_dp as pmdp

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [*sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts), ROOT / "README.md"]
MODULES = {"az": az, "pm": pm, "pmdp": pmdp, "pymc_dp": pmdp}
REFERENCE = re.compile(r"(?<![\w.])(az|pm|pmdp|pymc_dp)((?:\.[A-Za-z_]\w*)+)")
#: What marks a name as the other line's, per library (pymc_dp names must always exist).
OTHER_LINE = {
    "az": r"ArviZ 1|az\.__version__" if az.__version__.startswith("0.") else r"ArviZ 0|az\.__version__",
    "pm": r"PyMC 6|pm\.__version__" if pm.__version__.startswith("5.") else r"PyMC 5|pm\.__version__",
}


def _resolves(module, dotted: str) -> bool:
    obj = module
    for part in dotted.split("."):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:  # a submodule not imported by its package
            obj = importlib.import_module(f"{obj.__name__}.{part}")
        except (ImportError, AttributeError):
            return False
    return True


def _unresolved(text: str) -> list[str]:
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines):
        for match in REFERENCE.finditer(line):
            prefix, dotted = match.group(1), match.group(2).strip(".")
            if _resolves(MODULES[prefix], dotted):
                continue
            window = "\n".join(lines[max(0, number - 3) : number + 1])
            if prefix in OTHER_LINE and re.search(OTHER_LINE[prefix], window):
                continue  # marked as the other line's
            found.append(f"line {number + 1}: {prefix}.{dotted}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_a_page_uses_exists_on_this_line(page):
    assert _unresolved(page.read_text(encoding="utf-8")) == []


def test_the_check_catches_a_missing_name_and_accepts_a_marked_one():
    assert _unresolved("`az.plot_nothing_such` works") == ["line 1: az.plot_nothing_such"]
    assert _unresolved("`pmdp.no_such_function(x)`") == ["line 1: pmdp.no_such_function"]
    other = "ArviZ 1.x" if az.__version__.startswith("0.") else "ArviZ 0.x"
    assert _unresolved(f"`az.plot_nothing_such` ({other} only)") == []
    assert _unresolved("`pmdp.sample`, `pm.Model`, `az.summary`, `pymc_dp.accounting.events.format_epsilon`") == []

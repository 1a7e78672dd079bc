"""The privacy boundary is structural: only the data and mechanism layers read rows.

The test parses every module of the installed package and fails if any module outside the
data layer (``pymc_dp/data.py``) and the mechanism layer (``pymc_dp/mechanisms*``) calls a
function that returns raw per-row values or reads a ``RowLikelihood``'s internals. Step
methods and DPADVI receive a data-free ``PriorDensity`` handle and mechanisms; they never
touch rows themselves.
"""

import ast
from pathlib import Path

import pymc_dp

#: Names that return raw per-row values, or reach into the row data.
ROW_API = {
    "loglik_rows",
    "grad_rows",
    "loglik_grad_rows",
    "loglik_ratio_rows",
    "_gather",
    "_row_data_vars",
    "_theta_initial",
    "_f_lik",
    "_rows",
    "warm_gradient",
}
#: Only the data and mechanism layers build the per-row functions.
ROW_CONSTRUCTORS = {"RowLikelihood"}
ROW_LAYERS = ("data.py", "mechanisms")


def _violations(root: Path = Path(pymc_dp.__file__).parent):
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(ROW_LAYERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if isinstance(node, ast.Attribute) and node.attr in ROW_API:
                yield f"{relative}:{node.lineno} .{node.attr}"
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) in ROW_CONSTRUCTORS
            ):
                yield f"{relative}:{node.lineno} RowLikelihood(...)"


def test_only_the_data_and_mechanism_layers_touch_rows():
    assert list(_violations()) == []


def test_the_check_sees_a_step_that_reads_rows(tmp_path):
    # Guards against a check that cannot fail: a step module reading rows itself is reported.
    (tmp_path / "step_methods").mkdir()
    (tmp_path / "step_methods" / "leaky.py").write_text(
        "def astep(self, theta):\n    return self._row_mechanisms._rows.loglik_rows(theta)\n"
    )
    (tmp_path / "mechanisms.py").write_text("def release(rows, theta):\n    return rows.loglik_rows(theta)\n")
    (tmp_path / "results.py").write_text("from pymc_dp.data import RowLikelihood\nrows = RowLikelihood(None)\n")
    assert sorted(_violations(tmp_path)) == [
        "results.py:2 RowLikelihood(...)",
        "step_methods/leaky.py:2 ._rows",
        "step_methods/leaky.py:2 .loglik_rows",
    ]

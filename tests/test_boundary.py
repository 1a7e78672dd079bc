"""The privacy boundary is structural: only the data and mechanism layers read rows.

The test parses every module of the installed package and fails if any module outside the
data layer (``pymc_dp/data.py``) and the mechanism layer (``pymc_dp/mechanisms*``) calls a
function that returns raw per-row values or reads a ``RowLikelihood``'s internals. Step
methods and DPADVI receive a data-free ``PriorDensity`` handle and mechanisms; they never
touch rows themselves. A second test walks the objects themselves (attributes, containers,
bound methods' ``__self__``, closure cells) from every step and DPADVI, and fails if a
``RowLikelihood`` is reachable other than through an object of the mechanism layer.
"""

import ast
import functools
import types
import weakref
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_dp
import pymc_dp as pmdp
import pymc_dp.mechanisms
from pymc_dp.data import RowLikelihood

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


# -- the object graph: a step or DPADVI reaches the rows only through the mechanism layer ----------

_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), np.ndarray, np.generic, type, types.ModuleType)


def _children(obj):
    """What ``obj`` refers to: attributes, container items, bound methods' ``__self__``, closure cells."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield f"[{key!r}]", value
            yield "<key>", key
        return
    if isinstance(obj, list | tuple | set | frozenset):
        for i, value in enumerate(obj):
            yield f"[{i}]", value
        return
    if isinstance(obj, types.MethodType):
        yield ".__self__", obj.__self__
        yield ".__func__", obj.__func__
        return
    if isinstance(obj, types.FunctionType):
        for i, cell in enumerate(obj.__closure__ or ()):
            try:
                yield f".<cell {i}>", cell.cell_contents
            except ValueError:  # an empty cell
                continue
        yield ".__defaults__", obj.__defaults__
        yield ".__kwdefaults__", obj.__kwdefaults__
        return
    if isinstance(obj, functools.partial):
        yield ".func", obj.func
        yield ".args", obj.args
        yield ".keywords", obj.keywords
        return
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        yield from ((f".{k}", v) for k, v in attributes.items())
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and hasattr(obj, slot):
                yield f".{slot}", getattr(obj, slot)


def _paths_to_rows(root, name: str) -> list[str]:
    """Paths from ``root`` to a RowLikelihood that do not pass through the mechanism layer."""
    seen, found, stack = set(), [], [(root, name)]
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if type(obj) not in weakref.ProxyTypes and isinstance(obj, weakref.ReferenceType):  # reaches a live object
            stack.append((obj(), path + "()"))
            continue
        try:
            if isinstance(obj, _LEAVES):
                continue
            if isinstance(obj, RowLikelihood):  # also through a live weakref.proxy
                found.append(path)
                continue
            if type(obj).__module__ == pymc_dp.mechanisms.__name__:
                continue  # RowMechanisms and the mechanisms it hands out: the layer that may read rows
            stack.extend((child, path + label) for label, child in _children(obj))
        except ReferenceError:  # a weakref.proxy whose object is gone reaches nothing
            continue
    return found


def test_the_object_walk_sees_rows_behind_bound_methods_and_closures():
    # Guards against a walk that cannot fail.
    class Leaky:
        pass

    rows = object.__new__(RowLikelihood)
    via_method, via_closure, allowed = Leaky(), Leaky(), Leaky()
    via_method.compile = types.MethodType(lambda self: None, rows)
    via_closure.evaluate = (lambda held: lambda theta: held)(rows)
    allowed.mechanisms = object.__new__(pymc_dp.mechanisms.RowMechanisms)
    allowed.mechanisms._rows = rows
    assert _paths_to_rows(via_method, "step") == ["step.compile.__self__"]
    assert _paths_to_rows(via_closure, "step") == ["step.evaluate.<cell 0>"]
    assert _paths_to_rows(allowed, "step") == []


def _row_model():
    y = np.random.default_rng(8).normal(0.3, 1.0, size=60)
    with pm.Model() as model:
        m = pm.Normal("m", 0, 5)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", m, s, observed=y)
    return model, y


def test_steps_and_dpadvi_reach_rows_only_through_the_mechanism_layer():
    # Before: PriorDensity held RowLikelihood._compile, a bound method whose __self__ is the
    # RowLikelihood: step._prior._compile.__self__.loglik_rows(θ) returned the raw per-row values.
    model, y = _row_model()
    with model:
        steps = {
            "DPPenaltyMH": pmdp.DPPenaltyMH(llr_clip=2.0, noise_scale=5.0),
            "DPHMC": pmdp.DPHMC(llr_clip=2.0, grad_clip=2.0, n_leapfrog=2, llr_noise_scale=5.0, grad_noise_scale=5.0),
            "DPBarkerMH": pmdp.DPBarkerMH(batch_size=20, tempered_size=5.0),
            "DPMultiOwnerPenaltyMH": pmdp.DPMultiOwnerPenaltyMH(owners=np.arange(60) % 2, noise_scale=5.0),
        }
        idata = pm.sample(
            step=list(steps.values())[:1],
            draws=5,
            tune=5,
            chains=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert idata is not None  # the penalty step has run: its mechanism exists now
    with pm.Model():
        m = pm.Normal("m", 0, 5)
        steps["DPSuffStatsPenaltyMH"] = pmdp.DPSuffStatsPenaltyMH(
            "normal", np.clip(y, -5, 5), {"mu": m}, noise_scale=5.0, family_settings={"sigma": 1.0, "bounds": (-5, 5)}
        )
    dpadvi = pmdp.DPADVI(noise_multiplier=1.0, sampling_rate=0.5, clip=1.0, delta=1e-5, random_seed=1)
    approx = dpadvi.fit(3, model=model, progressbar=False)
    roots = {**steps, "DPADVI": dpadvi, "approximation": approx}
    leaks = {name: _paths_to_rows(obj, name) for name, obj in roots.items()}
    assert leaks == {name: [] for name in roots}

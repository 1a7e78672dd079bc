"""The privacy boundary is structural: only the data and mechanism layers read rows.

The test parses every module of the installed package and fails if any module outside the
data layer (``pymc_dp/data.py`` and the modules split out of it, :data:`DATA_LAYER`) and the
mechanism layer (``pymc_dp/mechanisms/``, with the backends in ``pymc_dp/backends/`` that
compute its sums elsewhere)

- reaches into row data through an attribute: a ``RowLikelihood``'s per-row functions and
  internals, an exponential family's per-row formulas (``check_data``, ``row_statistics``)
  applied to data, the exact sum a statistics mechanism holds, a step's raw ``_data``;
- imports from ``pymc_dp.data`` (or another data-layer module) anything but its data-free
  API (:data:`DATA_FREE`): every other function of the data layer (``_row_structure``, ``row_loglik``, ``_value_of``, …,
  and any helper added there later) is treated as row access;
- builds a ``RowLikelihood``.

Step methods and DPADVI receive a data-free ``PriorDensity`` handle and mechanisms
(``model_access``); ``release_statistics`` and ``DPSuffStatsPenaltyMH`` hand their rows to a
``PrivateSufficientStatistics`` and keep only that. The few uses that remain elsewhere are
allow-listed below, each with its reason; an entry that is no longer needed fails the test
too, so the list only shrinks. A module that reads data through PyMC itself (e.g. the
value of an observed variable) is not seen by this check: review such code by hand.

A second test walks the objects themselves (attributes, containers, bound methods'
``__self__``, closure cells) from every step and DPADVI, and fails if a ``RowLikelihood`` is
reachable other than through an object of the mechanism layer.
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

PACKAGE = Path(pymc_dp.__file__).parent

#: Attributes that return raw per-row values, or reach into row data.
ROW_ATTRIBUTES = {
    # RowLikelihood: per-row functions and internals
    "loglik_rows",
    "grad_rows",
    "clipped_grad_sum",
    "loglik_grad_rows",
    "loglik_ratio_rows",
    "warm_gradient",
    "_gather",
    "_row_data_vars",
    "_theta_initial",
    "_f_lik",
    "_f_lik_idx",
    "_f_grad_batch",
    "_f_grad_full",
    "_f_clipped_sum",
    "_row_index_vars",
    "_lik_index",
    "_f_ratio_batch",
    "_lik_flat",
    "_rows",
    # exponential families: per-row formulas (pure; applied to data by the mechanism layer only)
    "check_data",
    "row_statistics",
    "aggregate",
    # raw data or exact statistics held by an object
    "_data",
    "_exact_statistics",
    "_exact_clipped_units",  # mechanisms/clipped_rows: the exact weighted count of clipped rows (noised before release)
    "_exact_units",  # mechanisms/clipped_rows.ClippedUnits: the same count, one Dask partition's or their sum
}
#: What other layers may import from ``pymc_dp.data``: everything else there is row access.
DATA_FREE = {
    "ModelStructureError",
    "PriorDensity",
    "RowLikelihood",  # the type may be named (internal, no longer public); building one is checked below
    "check_prior_reads_no_data",  # refuses a prior or potential that reads data; returns nothing
    "data_dependent_deterministics",  # names of deterministics to drop from results
    "prior_model",  # the model without its observed variable, data containers and data-reading deterministics
    "sorted_value_vars",  # the model's free value variables in model order
    "_is_matrix_product",  # whether a graph node is a matrix product (the node's op and input ranks only)
    "_toposort_nodes",  # a graph's nodes in order (symbolic: no values evaluated)
}
#: Only the data and mechanism layers build the per-row functions.
ROW_CONSTRUCTORS = {"RowLikelihood"}
#: The data layer's modules: the compiled rows (data.py) and, below them, the model's structure, the
#: per-row graph and the prior with its check (they read which arrays are rows, split out of data.py).
DATA_LAYER = ("data.py", "model_structure.py", "row_graph.py", "prior.py")
ROW_LAYERS = (*DATA_LAYER, "mechanisms/", "backends/")  # the backends compute the mechanisms' sums elsewhere

#: Remaining uses outside the two layers, by (module, name), with the reason each is tolerated.
ALLOWED = {
    # N (observed_rows, the data layer's public accessor: the observed variables' shapes, never their
    # values) is public under substitute neighbours; under add/remove each caller must keep it unreleased.
    ("sample_plan.py", "observed_rows"): "N, to check the steps and the budget against the model's rows",
    ("variational/dpadvi.py", "observed_rows"): "N, for the budget and the accountant record",
    ("exponential_family/ops.py", "observed_rows"): "N, for the budget before anything is charged",
    ("planning.py", "observed_rows"): "N, to plan a run from public quantities before any data access",
    ("regression_graph.py", "observed_rows"): "N, to tell a data matrix (one row per observation) in the graph",
    # The row dimension's name is a public coordinate name: this module takes only item 1 of the
    # result (PUBLIC_PARTS), never item 2 (the observed variables, i.e. the data).
    ("results.py", "_row_structure"): "the row dimension's name, to drop row coordinates from results",
    # One posterior sample is the exponential mechanism run by NUTS: tempered_model builds the clipped,
    # tempered per-row log-likelihood sum (the utility) into the model that NUTS samples, and
    # one_posterior_sample checks the row structure before charging. Until OPS moves into the mechanism
    # layer, this module reads rows by design.
    ("exponential_family/ops.py", "row_loglik"): "OPS's utility (clipped, tempered per-row log-likelihood sum)",
}
#: For allow-listed functions: the items of their result that may be used (subscripted at the call).
PUBLIC_PARTS = {"_row_structure": {0, 1}}
#: The data layer's modules by import name: importing from any of them is checked like ``pymc_dp.data``.
DATA_MODULES = {f"pymc_dp.{module.removesuffix('.py')}" for module in DATA_LAYER}


def _data_layer_names() -> set[str]:
    """Top-level functions and classes of the data layer's modules (:data:`DATA_LAYER`) that are not data-free."""
    defined = set()
    for module in DATA_LAYER:
        tree = ast.parse((PACKAGE / module).read_text())
        defined |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return defined - DATA_FREE


def _name_of(node) -> str:
    return getattr(node, "id", getattr(node, "attr", ""))


def _uses(root: Path = PACKAGE):
    """Every (module, line, name, public) where a module outside the row layers touches rows."""
    row_functions = _data_layer_names()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(ROW_LAYERS):
            continue
        tree = ast.parse(path.read_text(), relative)
        public = {  # f(...)[k] with k a public part of f's result: the node of f
            id(node.value.func)
            for node in ast.walk(tree)
            if isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Call)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value in PUBLIC_PARTS.get(_name_of(node.value.func), ())
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ROW_ATTRIBUTES | row_functions:
                yield relative, node.lineno, node.attr, id(node) in public
            elif isinstance(node, ast.Name) and node.id in row_functions:
                yield relative, node.lineno, node.id, id(node) in public
            elif isinstance(node, ast.ImportFrom) and node.module in DATA_MODULES:
                for alias in node.names:
                    if alias.name not in DATA_FREE:  # renamed, its uses could not be checked for public parts
                        yield relative, node.lineno, alias.name, alias.name in PUBLIC_PARTS and not alias.asname
            elif isinstance(node, ast.Call) and _name_of(node.func) in ROW_CONSTRUCTORS:
                yield relative, node.lineno, f"{_name_of(node.func)}(...)", False


def _violations(root: Path = PACKAGE):
    for relative, line, name, public in _uses(root):
        if (relative, name) not in ALLOWED:
            yield f"{relative}:{line} {name}"
        elif name in PUBLIC_PARTS and not public:
            yield f"{relative}:{line} {name} beyond items {sorted(PUBLIC_PARTS[name])} of its result"


def test_only_the_data_and_mechanism_layers_touch_rows():
    assert list(_violations()) == []


def test_every_allow_listed_use_is_still_there():
    # A use that went away must leave the allow-list, so that it cannot come back unnoticed.
    used = {(relative, name) for relative, _, name, _ in _uses()}
    assert sorted(set(ALLOWED) - used) == []


def test_the_check_sees_modules_that_read_rows(tmp_path):
    # Guards against a check that cannot fail: each way of reaching rows is reported.
    (tmp_path / "data.py").write_text((PACKAGE / "data.py").read_text())  # the data layer may do anything
    (tmp_path / "step_methods").mkdir()
    (tmp_path / "step_methods" / "leaky.py").write_text(
        "def astep(self, theta):\n    return self._row_mechanisms._rows.loglik_rows(theta)\n"
    )
    (tmp_path / "mechanisms").mkdir()
    (tmp_path / "mechanisms" / "release.py").write_text(
        "def release(rows, theta):\n    return rows.loglik_rows(theta)\n"
    )
    (tmp_path / "mechanisms.py").write_text("def release(rows, theta):\n    return rows.loglik_rows(theta)\n")
    (tmp_path / "results.py").write_text(
        "from pymc_dp.data import RowLikelihood, _row_structure\n"
        "from pymc_dp.data import _row_structure as structure\n"
        "rows = RowLikelihood(None)\n"
        "dim = _row_structure(None)[1]\n"  # allow-listed, public part
        "observed = _row_structure(None)[2]\n"  # allow-listed name, but the data
    )
    (tmp_path / "statistics.py").write_text(
        "from pymc_dp.data import row_loglik as loglik, sorted_value_vars\n"
        "def release(family, data, step):\n"
        "    total = family.row_statistics(family.check_data(data)).sum(0)\n"
        "    return total, step._data, loglik(None)\n"
    )
    assert sorted(_violations(tmp_path)) == [
        "mechanisms.py:2 loglik_rows",  # a module named like the layer is not the layer
        "results.py:2 _row_structure beyond items [0, 1] of its result",
        "results.py:3 RowLikelihood(...)",
        "results.py:5 _row_structure beyond items [0, 1] of its result",
        "statistics.py:1 row_loglik",
        "statistics.py:3 check_data",
        "statistics.py:3 row_statistics",
        "statistics.py:4 _data",
        "step_methods/leaky.py:2 _rows",
        "step_methods/leaky.py:2 loglik_rows",
    ]


# -- the object graph: a step or DPADVI reaches the rows only through the mechanism layer ----------

_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), np.ndarray, np.generic, type, types.ModuleType)


def _children(obj):
    """What ``obj`` refers to: attributes, container items, bound methods' ``__self__``, closure cells."""
    if isinstance(obj, dict):
        # A snapshot: weak-keyed caches (Numba's dispatcher tables on PyMC 6) can lose entries to the
        # garbage collector mid-walk, and iterating the live dict then raises; retry the copy if it
        # happens during the copy itself.
        for _ in range(10):
            try:
                items = list(obj.items())
                break
            except RuntimeError:
                continue
        else:
            items = list(obj.items())  # an eleventh failure is raised
        for key, value in items:
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


def _paths_to_rows(root, name: str, seen: dict[int, object] | None = None) -> list[str]:
    """Paths from ``root`` to a RowLikelihood that do not pass through the mechanism layer.

    ``seen``: the objects (by id, each held so that its id cannot be reused) an earlier walk from another
    root has already explored, shared so that objects every root reaches (the model, its PyTensor graphs,
    compiled functions) are walked once.
    Whether the walk stops at an object depends on the object alone, never on the path, so the walks
    together visit exactly the objects reachable from some root: a row reachable from any root is found
    (its path named from the first root whose walk reaches it).
    """
    seen = {} if seen is None else seen
    found, stack = [], [(root, name)]
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        if type(obj) not in weakref.ProxyTypes and isinstance(obj, weakref.ReferenceType):  # reaches a live object
            stack.append((obj(), path + "()"))
            continue
        try:
            if isinstance(obj, _LEAVES):
                continue
            if isinstance(obj, RowLikelihood):  # also through a live weakref.proxy
                found.append(path)
                continue
            if type(obj).__module__.startswith((pymc_dp.mechanisms.__name__, "pymc_dp.backends.")):
                continue  # RowMechanisms and the mechanisms it hands out (or a backend's): the layer that may read rows
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
    # Walks sharing `seen`: a row behind an object both roots reach is found once, from the first root.
    shared, first, second = Leaky(), Leaky(), Leaky()
    first.shared = second.shared = shared
    second.own = rows
    seen: dict[int, object] = {}
    assert (_paths_to_rows(first, "a", seen), _paths_to_rows(second, "b", seen)) == ([], ["b.own"])
    shared.held = rows
    seen = {}
    # the same row object is reported once, on the first path that reaches it
    assert (_paths_to_rows(first, "a", seen), _paths_to_rows(second, "b", seen)) == (["a.shared.held"], [])


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
            "DPPenaltyMH": pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=5.0),
            "DPHMC": pmdp.DPHMC(
                llr_clip=2.0, grad_clip=2.0, n_leapfrog=2, llr_noise_multiplier=5.0, grad_noise_multiplier=5.0
            ),
            "DPBarkerMH": pmdp.DPBarkerMH(batch_size=20, tempered_size=5.0),
            "DPMultiOwnerPenaltyMH": pmdp.DPMultiOwnerPenaltyMH(owners=np.arange(60) % 2, noise_multiplier=5.0),
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
            "normal",
            np.clip(y, -5, 5),
            {"mu": m},
            noise_multiplier=5.0,
            family_settings={"sigma": 1.0, "bounds": (-5, 5)},
        )
    dpadvi = pmdp.DPADVI(noise_multiplier=1.0, sampling_rate=0.5, grad_clip=1.0, delta=1e-5, random_seed=1)
    approx = dpadvi.fit(3, model=model, progressbar=False)
    roots = {**steps, "DPADVI": dpadvi, "approximation": approx}
    seen: dict[int, object] = {}
    leaks = {name: _paths_to_rows(obj, name, seen) for name, obj in roots.items()}
    assert leaks == {name: [] for name in roots}

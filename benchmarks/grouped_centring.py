"""Does centring a grouped release's non-centred group effects help NUTS? A rewrite and its measurement (issue 34).

The grid's hierarchical models write their intercepts non-centred, ``mu_group + sd_group * offset``
with ``offset ~ N(0, 1)``, while each group holds about a thousand rows: the geometry where the
non-centred form has a funnel (Betancourt and Girolami 2015) and NUTS's trajectories run long. This
benchmark captures the one call's model (the priors and the grouped release's noise-aware likelihood;
``ReleasedStatistics.sample`` is replaced by a recorder, so nothing but the release runs), rewrites a
copy with every such ``offset`` centred (:func:`centre_group_offsets`: ``a ~ N(loc, scale)`` sampled,
``offset = (a − loc)/scale`` a deterministic; the same posterior, log densities equal up to the
Jacobian −Σ log scale) and samples both with NUTS from the same release, one chain each, printing
tree depth, step size, divergences, time and the global parameters' means and sds.

Measured 2026-11-29 (``fair_hierarchical``, ε = 4, 150 + 150 draws, Python 3.12, loaded 2-core
machine): centred tree depth 7.78, step 0.136, 72 s; as written 7.90, 0.084, 86 s, the same means
within their sds. Centring the likelihood's non-centred covariate means as well (``--centre all``):
tree depth 7.68, step 0.151. Neither is where the long trajectories come from (left: the covariance's
LKJ Cholesky, the latent sizes), so the one call does not centre (issue 34's stop-53 note).
NumPyro's ``LocScaleReparam`` makes the same move (Gorinova et al. 2020).

Usage: ``python benchmarks/grouped_centring.py fair_hierarchical 4 --draws 150``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arviz as az
import pymc as pm
from utility import DATASETS, ONE_CALL_BOUNDS

import pymc_dp as pmdp
from pymc_dp.exponential_family.release import ReleasedStatistics, noise_aware_sample_kwargs


def _strip_dimshuffle(var: Any) -> Any:
    from pytensor.tensor.elemwise import DimShuffle

    while var.owner is not None and isinstance(var.owner.op, DimShuffle):
        var = var.owner.inputs[0]
    return var


def _constant(var: Any) -> float | None:
    from pytensor.tensor.basic import get_underlying_scalar_constant_value
    from pytensor.tensor.exceptions import NotScalarConstantError

    try:
        return float(get_underlying_scalar_constant_value(var))
    except NotScalarConstantError:
        return None


def _is_standard_normal(wrapped: Any) -> bool:
    """``wrapped`` a model's free variable ``Normal(0, 1)`` with no transform."""
    from pymc.model.fgraph import ModelFreeRV
    from pytensor.tensor.random.basic import NormalRV

    node = wrapped.owner
    if node is None or not isinstance(node.op, ModelFreeRV) or node.op.transform is not None:
        return False
    rv = node.inputs[0]
    if rv.owner is None or not isinstance(rv.owner.op, NormalRV):
        return False
    loc, scale = rv.owner.inputs[-2:]
    return _constant(loc) == 0.0 and _constant(scale) == 1.0


def _is_positive(var: Any) -> bool:
    """``var`` (dimshuffles aside) a positive constant or a free variable on (0, ∞) through a log transform."""
    from pymc.logprob.transforms import LogTransform
    from pymc.model.fgraph import ModelFreeRV

    base = _strip_dimshuffle(var)
    value = _constant(base)
    if value is not None:
        return value > 0.0
    node = base.owner
    return node is not None and isinstance(node.op, ModelFreeRV) and isinstance(node.op.transform, LogTransform)


def _elemwise_of(node: Any, scalar_op: type) -> bool:
    """``node`` an apply node (not an fgraph output) of a binary elementwise ``scalar_op``."""
    from pytensor.tensor.elemwise import Elemwise

    op = getattr(node, "op", None)
    return isinstance(op, Elemwise) and isinstance(op.scalar_op, scalar_op) and len(node.inputs) == 2


def _other_input(node: Any, var: Any) -> Any:
    return node.inputs[1] if node.inputs[0] is var else node.inputs[0]


def _loc_scale_use(fgraph: Any, wrapped: Any) -> tuple[Any, Any] | None:
    """``(loc, scale)`` where ``wrapped`` enters the graph as ``loc + scale * wrapped``, ``scale > 0``, else None."""
    from pytensor.graph.traversal import ancestors
    from pytensor.scalar import Add, Mul

    for mul_node, _ in fgraph.clients[wrapped]:
        if not _elemwise_of(mul_node, Mul):
            continue
        scale = _other_input(mul_node, wrapped)
        if scale is wrapped or scale.type.ndim > wrapped.type.ndim or not _is_positive(scale):
            continue
        product = mul_node.outputs[0]
        for add_node, _ in fgraph.clients[product]:
            if not _elemwise_of(add_node, Add):
                continue
            loc = _other_input(add_node, product)
            if loc.type.ndim <= wrapped.type.ndim and wrapped not in set(ancestors([loc, scale])):
                return loc, scale
    return None


def non_centred_offsets(model: Any) -> list[str]:
    """Names of ``model``'s free standard-normal variables that enter as ``loc + scale * z``, ``scale > 0``.

    Reads the graph only (no data, no value): the candidates :func:`centre_group_offsets` can centre.
    """
    from pymc.model.fgraph import fgraph_from_model

    fgraph, _ = fgraph_from_model(model, inlined_views=True)
    return [
        out.name
        for out in fgraph.outputs
        if _is_standard_normal(out) and out.type.ndim >= 1 and _loc_scale_use(fgraph, out) is not None
    ]


def _model_free_rv(rv: Any, value: Any, name: str) -> Any:
    """PyMC's ``model_free_rv`` on both lines (5.x takes no name; 6.x takes it after the transform)."""
    import inspect

    from pymc.model.fgraph import model_free_rv

    if "name" in inspect.signature(model_free_rv).parameters:
        return model_free_rv(rv, value, None, name)
    return model_free_rv(rv, value, None)


def centre_group_offsets(model: Any, names: list[str]) -> tuple[Any, dict[str, str]]:
    """A copy of ``model`` in which each ``z`` of ``names`` (from :func:`non_centred_offsets`) is centred.

    Each ``z ~ Normal(0, 1)`` entering as ``loc + scale * z`` is replaced by a free ``a ~ Normal(loc,
    scale)`` named ``f"{z}_centred"`` (suffixed until unique) and ``z`` becomes the deterministic
    ``(a − loc)/scale`` under its own name, so results name the same variables. The posterior is
    unchanged (the module docstring's change of variables); the caller's model is not modified.

    Returns
    -------
    model, centred
        The copy, and ``{z: a}`` for the variables centred.

    Notes
    -----
    Reads no data: a rewrite of the graph of the priors. Where it runs on a release's likelihood, the
    choice of ``names`` is the caller's and must be a function of public or released values only.
    """
    import pymc as pm
    from pymc.model.fgraph import fgraph_from_model, model_deterministic, model_from_fgraph

    fgraph, _ = fgraph_from_model(model, inlined_views=True)
    taken = {out.name for out in fgraph.outputs}
    centred: dict[str, str] = {}
    for name in names:
        wrapped = next(out for out in fgraph.outputs if out.name == name)
        use = _loc_scale_use(fgraph, wrapped) if _is_standard_normal(wrapped) else None
        if use is None:
            raise ValueError(f"names: {name!r} does not enter the model as loc + scale * {name} with {name} ~ N(0, 1)")
        loc, scale = use
        new_name = f"{name}_centred"
        while new_name in taken:
            new_name = f"{new_name}_"
        taken.add(new_name)
        old_rv = wrapped.owner.inputs[0]
        # z's shape without reading z (its shape graph would keep z's node in the copy): static, or z's size input.
        shape = old_rv.type.shape if None not in old_rv.type.shape else old_rv.owner.inputs[1]
        rv = pm.Normal.dist(mu=loc, sigma=scale, shape=shape)
        rv.name = new_name
        value = rv.type(name=new_name)
        free = _model_free_rv(rv, value, new_name)
        free.name = new_name
        offset = (free - loc) / scale
        dims = wrapped.owner.inputs[2:]
        deterministic = model_deterministic(offset, *dims) if _old_signature() else model_deterministic(offset, name)
        deterministic.name = name
        fgraph.replace(wrapped, deterministic, import_missing=True)
        fgraph.add_output(free, import_missing=True)
        centred[name] = new_name
    return model_from_fgraph(fgraph, mutate_fgraph=True), centred


def _old_signature() -> bool:
    """PyMC 5.x: ``model_deterministic`` is an Op called as ``(var, *dims)``; 6.x a function ``(var, name, *dims)``."""
    from pymc.model.fgraph import model_deterministic
    from pytensor.graph.op import Op

    return isinstance(model_deterministic, Op)


def captured_model(dataset: str, epsilon: float) -> tuple[Any, dict[str, Any]]:
    """The one call's model (priors + the grouped release's likelihood) and NUTS settings; NUTS does not run."""
    got: dict[str, Any] = {}

    def record(self, **kwargs):
        got.update(kwargs)
        raise RuntimeError("recorded")

    model, _ = DATASETS[dataset](None)
    original = ReleasedStatistics.sample
    ReleasedStatistics.sample = record
    try:
        with model:
            pmdp.sample(epsilon=epsilon, delta=1e-5, chains=1, progressbar=False, **ONE_CALL_BOUNDS[dataset])
    except RuntimeError as error:
        if str(error) != "recorded":
            raise
    finally:
        ReleasedStatistics.sample = original
    settings = {k: v for k, v in got.items() if k not in ("model", "on_poor_mixing", "var_names")}
    return got["model"], settings


def run(model: Any, settings: dict[str, Any], draws: int, names: list[str]) -> dict[str, Any]:
    """One NUTS chain on ``model``: tree depth, step size, divergences, seconds and the global parameters."""
    kwargs = noise_aware_sample_kwargs({**settings, "draws": draws, "tune": draws, "chains": 1})
    start = time.time()
    with model:
        idata = pm.sample(**{**kwargs, "progressbar": False, "random_seed": 1})
    stats = idata.sample_stats
    summary = az.summary(idata, var_names=names)[["mean", "sd"]]
    return {
        "seconds": round(time.time() - start, 1),
        "tree_depth": float(stats["tree_depth"].mean()),
        "step_size": float(stats["step_size"].mean()),
        "divergences": int(stats["diverging"].sum()),
        "summary": summary.to_string(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=["fair_hierarchical", "diamonds_hierarchical"])
    parser.add_argument("epsilon", type=float)
    parser.add_argument("--draws", type=int, default=150, help="tuning steps and draws of the one chain")
    parser.add_argument(
        "--centre",
        choices=["group", "all"],
        default="group",
        help="centre the user's group effects only, or also the likelihood's non-centred covariate means",
    )
    parser.add_argument("--centred-only", action="store_true", help="skip the chain on the model as written")
    args = parser.parse_args(argv)
    model, settings = captured_model(args.dataset, args.epsilon)
    # PyMC's fgraph conversion refuses initial values (the likelihood starts its latent moments at the release):
    # convert without them, then give the copy the same ones by name.
    initial = {rv.name: value for rv, value in model.rvs_to_initial_values.items() if value is not None}
    model.rvs_to_initial_values = dict.fromkeys(model.rvs_to_initial_values)
    names = [n for n in non_centred_offsets(model) if args.centre == "all" or n == "offset"]
    centred, mapping = centre_group_offsets(model, names)
    for name, value in initial.items():
        model.set_initval(model[name], value)
        centred.set_initval(centred[name], value)
    print("centred:", mapping)
    globals_ = ["beta", "mu_group", "sd_group", "sigma"]
    for label, m in (("as written", model), ("centred", centred))[1 if args.centred_only else 0 :]:
        result = run(m, settings, args.draws, globals_)
        print(label, {k: v for k, v in result.items() if k != "summary"})
        print(result["summary"])


if __name__ == "__main__":
    main()

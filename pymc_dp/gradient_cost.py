"""The per-row gradient mode's cost model: elementary operations of a compiled graph, from its ops and shapes.

:class:`pymc_dp.data.RowLikelihood` rewrites the per-row gradient matrix's graph in forward and
in reverse mode as a compile would (:func:`rewritten_graph`, no code generated) and compiles only
the one :func:`_graph_cost` estimates cheaper per row. The estimate
reads the graph and the shapes PyTensor's shape inference gives for data-free inputs (a public
θ and batches of zeros of the row data's shapes and types): never a data value, never a clock,
so the same model gets the same mode on any machine and under any load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytensor
from pytensor.graph.basic import Constant, Variable
from pytensor.link.basic import Container, PerformLinker
from pytensor.link.utils import map_storage

__all__ = ["COST_PROBE_ROWS", "is_numba", "rewritten_graph"]

#: Rows of the data-free batch (zeros of the row data's shapes and types) on which the cost model
#: evaluates the shapes of the two compiled gradient functions (:func:`_graph_cost`).
COST_PROBE_ROWS = 256

# Relative costs, in elementary operations per element, of the scalar operations inside an
# elementwise node (by the scalar op's class name; anything not listed costs ``_SCALAR_DEFAULT``),
# and of the other kinds of node (:func:`_node_cost`). Set once from benchmarks/gradient_modes.py
# (both PyMC lines, single-threaded BLAS); public constants, so the choice depends on the graph,
# its shapes and the backend only. A model whose two modes the estimate ranks wrongly can force
# one with ``gradient_mode=``.
_SCALAR_CHEAP = frozenset(
    "Add Sub Mul Neg Identity Cast Switch Second Abs Sqr Maximum Minimum Sign EQ NEQ LT GT LE GE "
    "AND OR XOR Invert Clip Floor Ceil RoundHalfToEven Composite ScalarizedComposite".split()
)
_SCALAR_DIVISION = frozenset("TrueDiv IntDiv Reciprocal Mod".split())
_SCALAR_SPECIAL = frozenset(
    "Gammaln GammaLn Psi TriGamma PolyGamma GammaInc GammaIncC GammaIncInv GammaIncCInv GammaU GammaL "
    "BetaInc BetaIncInv Iv Ive I0 I1 Kv Jv J0 J1 Erfinv Erfcinv Erfcx Hyp2F1 Gamma Log1mexp".split()
)
_SCALAR_COSTS = {"cheap": 1.0, "division": 4.0, "special": 50.0}
_SCALAR_DEFAULT = 12.0  # transcendental: exp, log, log1p, expm1, sqrt, pow, tanh, sigmoid, softplus, erf, ...
_VIEW_OPS = frozenset(
    "DimShuffle Reshape Shape Shape_i SpecifyShape Subtensor Squeeze MatrixTranspose Unbroadcast "
    "ScalarFromTensor TensorFromScalar MakeVector Assert CheckAndRaise DeepCopyOp Split".split()
)
_PRODUCT_OPS = frozenset("Dot Dot22 Dot22Scalar Gemm Gemv Ger CGemv CGer BatchedDot Matmul".split())
_SOLVE_OPS = frozenset("SolveTriangular Solve CholeskySolve SolveBase".split())
_FACTOR_OPS = frozenset("Cholesky MatrixInverse MatrixPinv Det SLogDet Eig Eigh LU".split())
#: Cost of one multiply-add in a matrix product or solve (BLAS-blocked), relative to a cheap scalar op.
_PRODUCT_COST = 0.25
#: Cost of each of a ``BatchedDot``'s products (a call of a small matrix product per batch entry), by
#: backend: measured about five times dearer in the Numba backend's loop than in the C one's.
_PRODUCT_LOOP_COST = {"c": 100.0, "numba": 500.0}
#: Cost per element of each input of an elementwise loop, by backend: PyTensor's C loops advance every
#: input's (possibly broadcast) iterator per element, measured at about 0.4 ns each (a 12-tangent
#: forward-mode node with 20 inputs: 14 ns per element); Numba's fused loops hoist broadcast reads.
_INPUT_COST = {"c": 2.0, "numba": 0.0}
#: Cost of each iteration of a ``Blockwise`` loop (an op without a vectorised form, run once per batch entry).
_LOOP_COST = 2000.0


def _scalar_cost(scalar_op) -> float:
    """Elementary operations per element of one scalar op (a ``Composite``: the sum over its inner graph)."""
    inner = getattr(scalar_op, "fgraph", None)
    if inner is not None:
        return sum(_scalar_cost(node.op) for node in inner.apply_nodes)
    name = type(scalar_op).__name__
    if name in _SCALAR_CHEAP:
        return _SCALAR_COSTS["cheap"]
    if name in _SCALAR_DIVISION:
        return _SCALAR_COSTS["division"]
    if name in _SCALAR_SPECIAL:
        return _SCALAR_COSTS["special"]
    return _SCALAR_DEFAULT


def _node_cost(node, shapes: Mapping[Variable, tuple[int, ...]], backend: str = "c") -> float:
    """Estimated elementary operations of one node of a compiled graph, from its op and its shapes."""
    from pytensor.tensor.blockwise import Blockwise
    from pytensor.tensor.elemwise import CAReduce, Elemwise

    def size(var) -> float:
        return float(np.prod(shapes.get(var, ()), dtype=float))

    out = sum(size(o) for o in node.outputs)
    op = node.op
    name = type(op).__name__
    try:  # the inputs' broadcast shape: the loop of an elementwise node, or of a fused loop with a reduction
        work = max(out, float(np.prod(np.broadcast_shapes(*(shapes[i] for i in node.inputs)), dtype=float)))
    except (KeyError, ValueError):
        work = out
    reads = _INPUT_COST[backend] * len(node.inputs)  # each input's iterator, advanced per element
    if isinstance(op, Elemwise):
        return work * (1.0 + reads + _scalar_cost(op.scalar_op))
    inner = getattr(op, "fgraph", None)
    if inner is not None:  # a fused loop (an OpFromGraph of elementwise ops and reductions)
        scalar_ops = [n.op.scalar_op if isinstance(n.op, Elemwise) else None for n in inner.apply_nodes]
        return work * (1.0 + reads + sum(1.0 if s is None else _scalar_cost(s) for s in scalar_ops))
    if isinstance(op, CAReduce):
        return sum(size(i) for i in node.inputs)
    if isinstance(op, Blockwise):
        core_ndim = len(op.outputs_sig[0]) if getattr(op, "outputs_sig", None) else 0
        out_shape = shapes.get(node.outputs[0], ())
        loops = float(np.prod(out_shape[: len(out_shape) - core_ndim], dtype=float))
        return loops * _LOOP_COST + out
    if name in _VIEW_OPS:
        return 0.0
    if name in _PRODUCT_OPS:
        # The left factor: the first input, or Gemm's and Gemv's matrix (their inputs are z, α, A, x, β).
        first = shapes.get(node.inputs[2 if name in ("Gemm", "Gemv", "CGemv") else 0], ())
        inner = first[-1] if first and name not in ("Ger", "CGer") else 1
        loops = first[0] if name == "BatchedDot" and first else 0  # one small product per batch entry
        return _PRODUCT_COST * out * inner + loops * _PRODUCT_LOOP_COST[backend]
    if name in _SOLVE_OPS:
        first = shapes.get(node.inputs[0], ())
        n = first[-1] if first else 1
        return _PRODUCT_COST * out * n + (_PRODUCT_COST * n**3 / 3 if name != "SolveTriangular" else 0.0)
    if name in _FACTOR_OPS:
        first = shapes.get(node.inputs[0], ())
        n = first[-1] if first else 1
        return _PRODUCT_COST * size(node.inputs[0]) * n / 3
    return out  # gathers, scatters, allocations: one write per element


def _linker_backend(linker) -> str:
    """``"numba"`` for PyTensor's Numba linker, else ``"c"`` (C or Python)."""
    return "numba" if "numba" in type(linker).__name__.lower() else "c"


def is_numba(compile_kwargs: Mapping) -> bool:
    """Whether ``compile_kwargs``' mode (or PyTensor's default mode) compiles with the Numba backend."""
    from pytensor.compile.mode import get_mode

    return _linker_backend(get_mode(compile_kwargs.get("mode")).linker) == "numba"


def _compiled_backend(fn) -> str:
    """``"numba"`` for a function compiled by PyTensor's Numba backend, else ``"c"`` (C or Python)."""
    return _linker_backend(fn.maker.linker)


def rewritten_graph(inputs: Sequence[Variable], outputs: Variable, compile_kwargs: Mapping) -> tuple:
    """(graph, backend): ``outputs`` rewritten exactly as compiling them would, with no C or Numba code built.

    :class:`pymc_dp.data.RowLikelihood` compiles its functions with :func:`pymc.pytensorf.compile`
    and ``compile_kwargs``; this runs the same call with a linker that asks for the same rewrites
    as the mode's own linker (PyTensor adds each linker's required rewrites and drops its
    incompatible ones) but generates no code, so the cost model can read the graph a compiled
    function would run (:func:`_graph_cost`) while only the mode it chooses is compiled. The
    function it returns is never called.
    """
    from pymc.pytensorf import compile as pm_compile
    from pytensor.compile.mode import Mode, get_mode

    mode = get_mode(compile_kwargs.get("mode"))
    linker = _RewriteOnlyLinker(mode.linker)
    rewrite_only = Mode(linker=linker, optimizer=mode.provided_optimizer)
    fn = pm_compile(inputs, outputs, **{**compile_kwargs, "mode": rewrite_only})
    return fn.maker.fgraph, _linker_backend(mode.linker)


def _not_compiled(*args, **kwargs):
    raise RuntimeError("a graph rewritten for the gradient-mode cost model only; it was not compiled")


class _RewriteOnlyLinker(PerformLinker):
    """A linker that asks for another linker's rewrites and builds no thunks (:func:`rewritten_graph`)."""

    def __init__(self, like) -> None:
        super().__init__()
        self.required_rewrites = tuple(like.required_rewrites)
        self.incompatible_rewrites = tuple(like.incompatible_rewrites)

    def accept(self, fgraph, no_recycling=None, profile=None):
        self.fgraph, self.no_recycling = fgraph, list(no_recycling or [])
        return self

    def make_all(self, input_storage=None, output_storage=None, storage_map=None):
        order = self.schedule(self.fgraph)
        inputs, outputs, _ = map_storage(self.fgraph, order, input_storage, output_storage, storage_map)
        return (
            _not_compiled,
            [Container(v, s) for v, s in zip(self.fgraph.inputs, inputs, strict=True)],
            [Container(v, s, readonly=True) for v, s in zip(self.fgraph.outputs, outputs, strict=True)],
            [],
            order,
        )


def _graph_cost(fgraph, inputs: Sequence[Sequence[np.ndarray]], backend: str = "c") -> list[float]:
    """Estimated elementary operations of one call of the compiled graph ``fgraph`` on each set of ``inputs``.

    The sum of :func:`_node_cost` over the nodes of a copy of ``fgraph``, with every
    variable's shape from PyTensor's shape inference (graphs of the inputs' shapes) evaluated
    on the inputs without rewrites or a C or Numba compilation. The inputs are data-free (a
    public point θ and batches of zeros of the row data's shapes and types), so the estimate
    depends on the graph and the shapes only, never on data values or on time.
    """
    from pytensor.compile.mode import Mode
    from pytensor.graph.fg import FunctionGraph
    from pytensor.tensor.rewriting.shape import ShapeFeature

    copy = FunctionGraph(fgraph.inputs, fgraph.outputs, clone=True)
    feature = ShapeFeature()
    copy.attach_feature(feature)
    nodes = copy.toposort()
    variables = [o for node in nodes for o in node.outputs if getattr(o.type, "ndim", None)]
    symbolic = [feature.get_shape(v, i) for v in variables for i in range(v.type.ndim)]
    evaluate = pytensor.function(
        copy.inputs,
        symbolic,
        mode=Mode(linker="py", optimizer=None),
        on_unused_input="ignore",
        accept_inplace=True,
    )
    costs = []
    for values in inputs:
        with np.errstate(all="ignore"):
            flat = [int(s) for s in evaluate(*values)] if symbolic else []
        shapes: dict[Variable, tuple[int, ...]] = {}
        for v in variables:
            shapes[v], flat = tuple(flat[: v.type.ndim]), flat[v.type.ndim :]
        for v, value in zip(copy.inputs, values, strict=True):
            shapes[v] = tuple(int(s) for s in np.shape(value))
        for node in nodes:
            shapes.update({c: np.shape(c.data) for c in node.inputs if isinstance(c, Constant)})
        costs.append(sum(_node_cost(node, shapes, backend) for node in nodes))
    return costs

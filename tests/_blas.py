"""One BLAS/LAPACK thread while a test module runs: the suite's processes already fill the cores.

The default test command runs one pytest worker per core (``-n auto``), and NumPy's and SciPy's
OpenBLAS each start one thread per core as well, so every LAPACK call on a tiny matrix (the
3 × 3 triangular solves of an ``MvNormal`` gradient, an ``eigvalsh``) hands work to threads that
wait for a core. PyMC limits BLAS threads during sampling only under a non-``fork`` start method.
Measured on the 2-core machine under the suite's load (Python 3.11): the noise-aware categorical
likelihood's gradient took 10 ms of CPU per call with two OpenBLAS threads and 0.53 ms with one
(``SolveTriangular.perform`` 2.8 ms → 0.02 ms a call). The limit is a run-time setting that the
assertions do not read: a comparison of two computations (bit for bit or to a tolerance) runs both
under the same limit.

Import the fixture into a test module to apply it to every test there::

    from _blas import one_blas_thread  # noqa: F401  (autouse)
"""

import pytest
from threadpoolctl import threadpool_limits  # a PyMC dependency


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """Limit BLAS/LAPACK (and OpenMP) to one thread for the module's tests; restore the limits after."""
    with threadpool_limits(limits=1):
        yield

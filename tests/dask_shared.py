"""What the Dask row tests share (issue 37): their cluster fixture and a model that mixes rows in a logp.

Imported by ``tests/test_dask_dpadvi_rows.py`` and ``tests/test_dask_sampler_rows.py``, which
re-export :func:`client` (a module-scoped fixture: one ``LocalCluster`` per test module).
"""

from __future__ import annotations

import logging

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp

#: The rows of the tests' data sets (600: the scattered path's 3 partitions of 200 rows).
N_ROWS = 600


@pytest.fixture(scope="module")
def client():
    """A ``LocalCluster(processes=False)`` of 2 one-thread workers (threads of this process: no worker start-up)."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0", silence_logs=logging.CRITICAL
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def with_summed_array_in_logp(rows: dict) -> pm.Model:
    """A ``pm.CustomDist`` whose log-density adds the sum of a shared array of the rows' length held in this process."""
    import pytensor

    summed = pytensor.shared(np.random.default_rng(2).normal(size=N_ROWS), name="W")

    def logp(value, mu):
        return pm.logp(pm.Normal.dist(mu + 1e-3 * summed.sum(), 1.0), value)

    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 2.0, shape=3)
        mu = pmdp.row_placeholder(rows["X"]) @ beta
        pm.CustomDist("y", mu, logp=logp, observed=pmdp.row_placeholder(rows["y"]).astype("float64"))
    return model

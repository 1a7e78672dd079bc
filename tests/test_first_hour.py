"""What the issue-35 walk (a new user's first hour, docs/tutorials/getting_started.md) found broken.

The getting-started tutorial's logistic regression observes an integer ``pm.Data`` container; PyMC
wraps it as ``Cast{int64}(y)``, and the one-call release route read only bare containers and
constants (``AttributeError: 'TensorVariable' object has no attribute 'data'``).
"""

import numpy as np
import pymc as pm
import pytest

from pymc_dp.routes import _observed_array


def test_the_release_route_reads_an_observed_container_through_a_cast():
    values = np.array([0, 1, 1, 0, 1])
    with pm.Model() as model:
        y = pm.Data("y", values)
        p = pm.Normal("p", 0, 1)
        outcome = pm.Bernoulli("outcome", logit_p=p, observed=y)
    np.testing.assert_array_equal(_observed_array(model.rvs_to_values[outcome]), values)
    np.testing.assert_array_equal(_observed_array(y), values)  # the container itself
    with pytest.raises(ValueError, match="The observed variable must hold data"):
        _observed_array(p + y)  # a graph of a random variable is no data

"""The utility benchmark (benchmarks/utility.py) runs at a small size and reports every field.

The full run (on demand: ``python benchmarks/utility.py``) writes docs/images/utility.md; this
smoke run checks that every method produces a result the comparison can read, and that an
unusable DP result at this size is flagged rather than returned as a confident posterior.
"""

import importlib.util
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "utility.py"


@pytest.fixture(scope="module")
def utility():
    spec = importlib.util.spec_from_file_location("utility_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_small_run_reports_every_method(utility):
    # The released-statistics route is left to the slow test below (a minute even at this size).
    methods = ["--methods", "DPPenaltyMH", "DPHMC", "DPADVI"]
    result = utility.main(["--small", "--datasets", "fair_logistic", "--epsilons", "0.5", *methods])
    cells = result["cells"]
    assert [c["method"] for c in cells] == ["DPPenaltyMH", "DPHMC", "DPADVI"]
    for cell in cells:
        assert {"max_z", "min_sd_ratio", "max_sd_ratio", "all_covered", "seconds", "flagged"} <= set(cell)
    for cell in cells[:2]:  # 400 rows at ε = 0.5: no sampler can mix, and both say so
        assert cell["flagged"] and cell["max_rhat"] > 1.05
    assert "| fair_logistic | DPADVI | 0.5 |" in utility.markdown(result)


@pytest.mark.slow  # NUTS on the noise-aware model with four latent covariate moments: about a minute
def test_small_run_of_the_released_statistics_route(utility):
    result = utility.main(["--small", "--datasets", "fair_logistic", "--epsilons", "8", "--methods", "release"])
    [cell] = result["cells"]
    assert cell["method"] == "release" and {"max_z", "max_sd_ratio", "all_covered", "flagged"} <= set(cell)


@pytest.mark.slow  # the one-call route on a hierarchical model: the grouped release and NUTS on it, minutes
def test_small_run_of_the_one_call_route(utility):
    result = utility.main(["--small", "--datasets", "fair_hierarchical", "--epsilons", "4", "--methods", "one_call"])
    [cell] = result["cells"]
    assert cell["method"] == "one_call" and cell["route"] == "release_statistics"
    assert {"max_z", "max_sd_ratio", "all_covered", "flagged"} <= set(cell) and "max_z" in cell["global"]
    assert "| fair_hierarchical | one_call (release_statistics) | 4 |" in utility.markdown(result)


# The benchmark's coverage harness (31-62 s a run in this session's CI logs: NUTS on the anchored noise-aware
# logistic model). Its parts run by default: the recommendation in tests/test_planning.py, the anchored release
# sampled with NUTS by the quick start (tests/test_readme.py), and the benchmark's other routes above.
@pytest.mark.slow
def test_coverage_runs_the_route_the_planner_recommends(utility):
    # A logistic regression: pmdp.plan recommends the released statistics with covariate anchors, and the
    # coverage simulation runs that route (N = 300 at ε = 0.5, where no DP sampler could mix).
    release = utility.coverage(1, 0.5, 300, seed=3, small=True)
    assert release["methods"] == {"release_statistics": 1} and release["runs"] == 1
    assert release["no_route"] == 0 and 0 <= release["coverage"] <= 1
    text = utility.markdown({"cells": [], "coverage": [release, {**release, "no_route": 1}]})
    assert "release_statistics ×1" in text and "1 without a route" in text

"""The private-run pipeline (pymc_dp.run): one validate → plan → check → charge → run → record.

Unit tests of :class:`PrivateRun` and :class:`AccountantRecord` without PyMC sampling, and a
structural test that no front-end charges a budget or builds a record dict by itself.
"""

import ast
import json
import math
from pathlib import Path

import pytest

import pymc_dp
from pymc_dp._errors import PrivateRunError
from pymc_dp.accounting import GaussianReleases, PrivacyBudget, PrivacyBudgetExceededError
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import PureDPReleases
from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu_for_target
from pymc_dp.run import AccountantRecord, PrivateRun

DELTA = 1e-6


def _run(**kwargs):
    settings = {"delta": DELTA, "neighbouring": "substitute", "n_rows": 100}
    settings.update(kwargs)
    return PrivateRun("test", **settings)


def test_plan_prices_the_events_and_the_record_composes_earlier_releases():
    run = _run()
    run_events = [GaussianReleases(2.0, 10)]
    start_events = [GaussianReleases(3.0, 4)]
    epsilon = run.plan(run_events, depends_on=start_events)
    # Closed form (Sommer et al. 2019, Lemma 12) with μ = count / (2τ²) summed.
    assert epsilon == pytest.approx(gaussian_epsilon(DELTA, 10 / 8), rel=1e-12)
    with run.releasing():
        pass
    record = run.record(start={"source": "dp_release"}, chains=2)
    assert record.epsilon == pytest.approx(gaussian_epsilon(DELTA, 10 / 8 + 4 / 18), rel=1e-12)
    assert [e.to_dict() for e in record.events] == [e.to_dict() for e in start_events + run_events]
    data = record.to_dict()
    assert data["chains"] == 2 and data["start"] == {"source": "dp_release"} and data["n_rows"] == 100
    assert json.loads(json.dumps(data)) == data


def test_over_target_is_refused_and_nothing_is_charged():
    budget = PrivacyBudget(epsilon=10.0, delta=DELTA, n_rows=100)
    run = _run(epsilon=0.5, budget=budget)
    with pytest.raises(PrivacyBudgetExceededError, match=r"above `epsilon`=0\.5.*Nothing was run or charged; fewer"):
        run.plan([GaussianReleases(0.5, 10)], advice="fewer.")
    assert budget.spent().epsilon == 0.0
    with pytest.raises(RuntimeError, match="must be planned"):
        with run.releasing():
            pass
    assert budget.spent().epsilon == 0.0


def test_over_budget_is_refused_before_the_charge_and_the_advice_is_lazy():
    budget = PrivacyBudget(epsilon=1.0, delta=DELTA, n_rows=100)
    budget.charge([GaussianReleases(5.0, 1)], label="earlier")
    run = _run(budget=budget)
    calls = []
    with pytest.raises(PrivacyBudgetExceededError, match="Nothing was run or charged"):
        run.plan([GaussianReleases(0.5, 5)], advice=lambda: calls.append(1) or "x")
    assert calls == []  # only a refusal over the run's own target asks for advice
    assert budget.labels == ("earlier",)


def test_charge_happens_once_and_a_failing_run_stays_charged():
    budget = PrivacyBudget(epsilon=5.0, delta=DELTA, n_rows=100)
    run = _run(budget=budget)
    new = [GaussianReleases(4.0, 2)]
    run.plan([GaussianReleases(4.0, 6)], charge=new)  # a refit: the target covers all fits, the budget the new one
    with pytest.raises(PrivateRunError) as info:
        with run.releasing(label="fit 2"):
            raise ValueError("secret value 3.14159")
    assert "3.14159" not in str(info.value)
    assert budget.labels == ("fit 2",)
    assert budget.spent().epsilon == pytest.approx(compose_epsilon(new, DELTA)[0])
    with pytest.raises(RuntimeError, match="charged already"):
        run.plan(new)


def test_budget_must_match_the_run():
    with pytest.raises(TypeError, match=r"`budget` must be a pymc_dp\.PrivacyBudget\. Found dict"):
        _run(budget={})
    budget = PrivacyBudget(epsilon=1.0, delta=DELTA, n_rows=100, neighbouring="add_remove")
    with pytest.raises(ValueError, match=r"`budget\.neighbouring` must be 'substitute'\. Found 'add_remove'"):
        _run(budget=budget)
    with pytest.raises(ValueError, match=r"`budget.n_rows` must equal the number of rows \(99\). Found 100"):
        _run(budget=PrivacyBudget(epsilon=1.0, delta=DELTA, n_rows=100), n_rows=99)
    with pytest.raises(ValueError, match="`epsilon` must be"):
        _run(epsilon=-1.0)


def test_record_hides_n_under_add_remove_and_prices_pure_releases_at_delta_zero():
    record = AccountantRecord.priced(
        "laplace", [PureDPReleases(0.3, 1), PureDPReleases(0.2, 1)], delta=0.0, neighbouring="add_remove", n_rows=7
    )
    assert record.n_rows is None and record.to_dict()["n_rows"] is None
    assert record.epsilon == pytest.approx(0.5) and record.method == "pure_sum"
    empty = AccountantRecord.priced("nothing", [], delta=DELTA, neighbouring="substitute", n_rows=3)
    assert empty.epsilon == 0.0 and empty.to_dict()["events"] == []
    assert math.isfinite(empty.to_dict()["delta"])


#: Modules allowed to charge a budget or to call the budget's charge (the budget itself and the pipeline).
_CHARGERS = {"accounting/budget.py", "run.py"}


def test_only_the_pipeline_charges_budgets_and_builds_records():
    root = Path(pymc_dp.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if isinstance(node, ast.Attribute) and node.attr == "charge" and relative not in _CHARGERS:
                found.append(f"{relative}:{node.lineno} .charge")
            if (
                isinstance(node, ast.Name)
                and node.id == "ACCOUNTANT_FORMAT"
                and relative not in {"results.py", "run.py"}
            ):
                found.append(f"{relative}:{node.lineno} builds its own record")
    assert found == []


#: Modules that may build accounting events themselves, with why (everything else asks a mechanism).
_EVENT_BUILDERS = {
    "publish.py": "prices a plain pm.sample result from its recorded μ (no mechanism object exists)",
    "exponential_family/ops.py": "one posterior sample is the exponential mechanism, run by NUTS, not a release object",
    "testing/audit.py": "the audit's claims, stated independently of the mechanisms they test",
}
_EVENT_TYPES = {"GaussianReleases", "PoissonGaussianReleases", "RdpReleases", "PureDPReleases"}


def test_mechanisms_price_themselves():
    # Steps, DPADVI and the releases collect their events from the mechanism classes (issue 13, item 4).
    root = Path(pymc_dp.__file__).parent
    found = set()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("accounting/", "mechanisms/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _EVENT_TYPES:
                found.add(relative)
    assert found == set(_EVENT_BUILDERS)


def test_a_record_with_numpy_values_serialises():
    import numpy as np

    record = AccountantRecord.priced(
        "test",
        [GaussianReleases(2.0, 3)],
        delta=DELTA,
        neighbouring="substitute",
        n_rows=np.int64(5),
        details={"usable": np.bool_(True), "ess": np.float64(2.5), "sds": np.array([0.1, 0.2])},
    ).to_dict()
    assert record["usable"] is True and record["ess"] == 2.5 and record["sds"] == [0.1, 0.2]


def test_a_refusal_prints_the_runs_epsilon_rounded_up_never_to_the_target():
    # τ chosen so that one release costs ε ≈ 1.0000004 at δ = 1e-6, just above a target of 1
    tau = math.sqrt(0.5 / gaussian_mu_for_target(1.0000004, 1e-6))
    assert 1.0 < gaussian_epsilon(1e-6, 0.5 / tau**2) <= 1.0000004
    run = PrivateRun("test", delta=1e-6, neighbouring="substitute", n_rows=10, epsilon=1.0)
    with pytest.raises(PrivacyBudgetExceededError, match=r"would spend ε=1\.00001 at δ=1e-06, above `epsilon`=1\."):
        run.plan([GaussianReleases(tau, 1)])  # printed to the nearest ('ε=1') it read as the target itself

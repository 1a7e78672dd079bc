"""The examples run end to end (at a small size)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import run_script_in_process

from pymc_dp.accounting import subsampled_barker_epsilon

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> str:
    """Run ``examples/<name>`` with ``args``; return its standard output (fails with its stderr)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True, timeout=900, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def run_example_in_process(name: str, *args: str, capsys: pytest.CaptureFixture, monkeypatch) -> str:
    """Run ``examples/<name>``'s ``main()`` in this process with ``args`` as its command line; return its output."""
    return run_script_in_process(f"examples/{name}", list(args), capsys, monkeypatch)


@pytest.mark.slow  # 25–42 s, nearly all start-up and compilation; DPPenaltyMH is tested in tests/test_penalty.py
def test_quickstart_runs_and_reports_its_guarantee_on_the_penalty_route():
    # The default route (released statistics) is run by tests/test_readme.py, as the README's command line.
    out = run_example("quickstart.py", "--rows", "5000", "--draws", "100", "--tune", "100", "--method", "penalty")
    spent = float(re.search(r"Privacy spent: epsilon = ([0-9.]+)", out).group(1))
    recorded = float(re.search(r"dp_epsilon = ([0-9.]+)", out).group(1))
    assert spent == recorded and 0 < spent <= 4.0
    assert "Groups in the DP result: ['posterior', 'sample_stats']" in out
    assert re.search(r"Usable posterior: (True|False); largest R-hat per variable: \{'intercept'", out)
    assert re.search(r"slopes\[age\]\s+-?[0-9.]+\s+[0-9.]+\s+-?[0-9.]+", out)
    assert "Plan at ε = 4" in out  # the planner's table comes first


@pytest.mark.slow  # the experiments script (a benchmark harness); DPHMC itself is tested in tests/test_hmc.py
def test_dp_hmc_experiments_run_at_a_small_size(tmp_path):
    out = run_example(
        "dp_hmc_experiments.py",
        *("--rows", "2000", "--epsilons", "8", "--max-iterations", "20", "--output", str(tmp_path)),
    )
    table = (tmp_path / "dp_hmc_experiments.md").read_text().splitlines()
    assert len(table) == 2 + 4  # header + one row per (model, sampler)
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] in {"banana", "gauss"} and cells[1] in {"DPHMC", "DPPenaltyMH"}
        assert float(cells[4]) >= 0 and float(cells[5]) >= 0 and 0 <= float(cells[6]) <= 1
    spent = [float(x) for x in re.findall(r"\(spent ([0-9.]+)\)", out)]
    assert len(spent) == 4 and all(0 < s <= 8.0 for s in spent)


@pytest.mark.slow  # 22–39 s at any size (start-up, compilation, the plot); DPBarkerMH: tests/test_barker.py
def test_dp_barker_gmm_runs_at_a_small_size(tmp_path):
    out = run_example(
        "dp_barker_gmm.py",
        *("--rows", "5000", "--batch-size", "200", "--draws", "300", "--tune", "100", "--no-nuts"),
        *("--plot", str(tmp_path / "gmm.png")),
    )
    epsilon = float(re.search(r"ε = ([0-9.]+) at δ = 1e-06", out).group(1))
    assert epsilon == pytest.approx(subsampled_barker_epsilon(5000, 200, 2 * 400, 1e-6), rel=1e-3)
    assert 0 < float(re.search(r"acceptance ([0-9.]+)", out).group(1)) < 1
    assert 0 <= float(re.search(r"share of clipped ratios .*: ([0-9.]+)", out).group(1)) <= 1
    assert re.search(r"exact tempered posterior \(grid\)\s+-?[0-9.]+", out)


def test_exponential_family_beta_bernoulli_runs_at_a_small_size(tmp_path, capsys, monkeypatch):
    out = run_example_in_process(
        "exponential_family_beta_bernoulli.py",
        *("--repeats", "20", "--sizes", "10", "1000", "--output", str(tmp_path)),
        capsys=capsys,
        monkeypatch=monkeypatch,
    )
    assert re.search(r"OPS temperature T = 0\.0166", out)  # ε/(2·(−log 0.05)) at ε = 0.1
    table = (tmp_path / "beta_bernoulli_l1.md").read_text().splitlines()
    assert len(table) == 2 + 2


def test_naive_bayes_fair_runs_at_a_small_size(tmp_path, capsys, monkeypatch):
    out = run_example_in_process(
        "naive_bayes_fair.py",
        *("--rows", "800", "--repeats", "3", "--epsilons", "0.3", "3", "--output", str(tmp_path)),
        capsys=capsys,
        monkeypatch=monkeypatch,
    )
    assert "800 rows, 8 features, 9 released tables; test rows 240" in out
    table = (tmp_path / "naive_bayes_fair.md").read_text().splitlines()
    assert len(table) == 2 + 3 + 1  # header, ε = 0.3, 3, ∞, majority class
    for line in table[2:5]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        accuracy, area = (float(c.split("±")[0]) for c in cells[2:4])
        assert 0.0 <= accuracy <= 1.0 and 0.0 <= area <= 1.0
    # Laplace scale per cell: Δ₁ = 2 per table, 9 tables, ε split evenly: 2·9/ε.
    assert [line.split("|")[2].strip() for line in table[2:5]] == ["60", "6", "—"]


@pytest.mark.slow  # a benchmark harness over `fair`; the route is tested in tests/test_noise_aware.py
def test_linear_regression_fair_runs_at_a_small_size(tmp_path):
    out = run_example(
        "linear_regression_fair.py",
        *("--rows", "400", "--repeats", "1", "--draws", "100", "--epsilons", "1", "--output", str(tmp_path)),
    )
    # Δ₁ of z = (1, x₁, x₂, y) in [−1, 1]: widths 2 (x₁, x₂, y, x₁x₂, x₁y, x₂y) and 1 (x₁², x₂², y²).
    assert "400 rows; Δ₁ = 15" in out
    table = (tmp_path / "linear_regression_fair.md").read_text().splitlines()
    assert len(table) == 2 + 4  # header, then intercept, yrs_married, religious, sigma at ε = 1
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == "15" and all(float(c) > 0 for c in cells[3:6])
        assert all(float(c) in (0.0, 1.0) for c in cells[6:8])  # one release: covered or not


@pytest.mark.slow  # 50 s: DPADVI's behaviour is tested in tests/test_dpadvi.py; this is the example script
def test_dpadvi_logistic_fair_runs_at_a_small_size():
    out = run_example("dpadvi_logistic_fair.py", "--quick")
    assert "fair: 5093 training rows, 1273 test rows, 8 features" in out
    row = re.search(r"\| DPADVI \| 1 \| ([0-9.]+) \| ([0-9.]+) \|", out)
    sigma, accuracy = float(row.group(1)), float(row.group(2))
    # σ calibrated for ε = 1 at q = 0.02 over 60 iterations (substitute): the accountant's own value.
    from pymc_dp.accounting.calibrate import poisson_gaussian_noise_multiplier

    assert sigma == pytest.approx(poisson_gaussian_noise_multiplier(1.0 * (1 - 1e-10), 1e-5, 0.02, 60), abs=1e-3)
    assert 0.0 <= accuracy <= 1.0
    assert re.search(r"\| ADVI \(non-private\) \| inf \| — \| [0-9.]+ \|", out)


@pytest.mark.slow  # 90 s: the same composition is tested in tests/test_dpadvi.py (DPADVI then a DP chain)
def test_dpadvi_initialised_dp_chain_stays_within_one_budget():
    out = run_example("dpadvi_logistic_fair.py", "--dp-chain", "--quick")
    total = float(re.search(r"budget: ε = ([0-9.]+) of 2 at δ = 1e-05 \(pld\)", out).group(1))
    first = float(re.search(r"DPADVI: ε = ([0-9.]+);", out).group(1))
    chain = float(re.search(r"its own ε = ([0-9.]+)", out).group(1))
    assert first <= 1.0 and total <= 2.0
    assert max(first, chain) < total < first + chain  # composed tighter than adding the two ε
    # The chain's published ε is the composition of everything it depends on: the fit that started it too.
    result = float(re.search(r"composed with its DPADVI start\) ε = ([0-9.]+)", out).group(1))
    assert result == pytest.approx(total, abs=1e-4)

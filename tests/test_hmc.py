"""DPHMC: the leapfrog, invariance with noise, the noise → 0 limit, and Theorem 3.3 accounting."""

import json
import math
import warnings

import arviz as az
import mpmath as mp
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from _invariance import Z_CRIT, invariance_z_scores, run_chains_from, without_penalty
from pymc.blocking import DictToArrayBijection
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag
from scipy import stats

import pymc_dp as pmdp
from pymc_dp.accounting import gaussian_mu_for_target
from pymc_dp.step_methods import kernels as kernels_module
from pymc_dp.step_methods.hmc import kinetic_energy, leapfrog


def gaussian_gradient(precision: np.ndarray, mean: np.ndarray):
    return lambda theta: -precision @ (theta - mean)


def test_leapfrog_is_reversible_and_volume_preserving():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    precision = a @ a.T + 3 * np.eye(3)
    grad = gaussian_gradient(precision, np.array([0.5, -1.0, 2.0]))
    inv_mass = np.array([0.5, 1.0, 2.0])
    theta, p = rng.normal(size=3), rng.normal(size=3)
    theta1, p1 = leapfrog(theta, p, 0.1, 12, inv_mass, grad)
    back_theta, back_p = leapfrog(theta1, -p1, 0.1, 12, inv_mass, grad)
    np.testing.assert_allclose(back_theta, theta, atol=1e-12)
    np.testing.assert_allclose(-back_p, p, atol=1e-12)

    def flow(z):
        t, q = leapfrog(z[:3], z[3:], 0.1, 12, inv_mass, grad)
        return np.concatenate([t, q])

    z0, h = np.concatenate([theta, p]), 1e-6
    jacobian = np.column_stack([(flow(z0 + h * e) - flow(z0 - h * e)) / (2 * h) for e in np.eye(6)])
    assert np.linalg.det(jacobian) == pytest.approx(1.0, abs=1e-6)

    # energy is nearly conserved for a small step
    def energy(t, q):
        return 0.5 * (t - [0.5, -1.0, 2.0]) @ precision @ (t - [0.5, -1.0, 2.0]) + kinetic_energy(q, inv_mass)

    assert abs(energy(theta1, p1) - energy(theta, p)) < 0.05 * energy(theta, p)


def test_leapfrog_calls_the_gradient_l_plus_one_times():
    calls = []
    leapfrog(np.zeros(2), np.ones(2), 0.1, 7, np.ones(2), lambda t: calls.append(1) or -t)
    assert len(calls) == 8


def noisy_step(model, sd):
    # Gradient noise sd 2·τ_g·b_g = 10 against a gradient of order N·sd ≈ 14; ratio noise sd ≈ 1.4 at a
    # typical move of one posterior sd: both kinds of noise matter. b = 10 never clips (|y − m| < 5).
    with model:
        return pmdp.DPHMC(
            step_size=0.03,
            n_leapfrog=10,
            grad_clip=10.0,
            llr_clip=10.0,
            grad_noise_multiplier=0.5,
            llr_noise_multiplier=0.07 / sd,
            tune=False,
        )


@pytest.mark.parametrize("inv_mass", [None, 3.0])
def test_invariance_with_noise_on(conjugate_normal, inv_mass):
    mean, sd = conjugate_normal.posterior()
    assert np.max(np.abs(conjugate_normal.y - mean)) + 5 * sd < 10.0
    step = noisy_step(conjugate_normal.model, sd)
    if inv_mass is not None:
        step.step_size = 0.03 / np.sqrt(inv_mass)  # same stability margin with the heavier-tailed momentum
    starts = np.random.default_rng(3).normal(mean, sd, size=500)
    ends, acceptance = run_chains_from(step, starts, n_steps=6, seed=4, inv_mass=inv_mass)
    assert 0.05 < acceptance < 0.95
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT


def test_invariance_test_catches_a_missing_penalty(conjugate_normal, monkeypatch):
    mean, sd = conjugate_normal.posterior()
    monkeypatch.setattr(kernels_module, "penalty_log_acceptance", without_penalty)  # the kernel every backend runs
    step = noisy_step(conjugate_normal.model, sd)
    starts = np.random.default_rng(3).normal(mean, sd, size=500)
    ends, _ = run_chains_from(step, starts, n_steps=6, seed=4)
    assert max(abs(v) for v in invariance_z_scores(ends, mean, sd)) > Z_CRIT


def test_noise_to_zero_without_clipping_matches_pymc_hmc(conjugate_normal):
    """Same L = 10 and η = 0.03 (PyMC: η = step_scale/d^¼ with d = 1, L = int(path_length/η)), unit mass,
    no noise, no clipping: each sampler matches the exact posterior, and the two match each other, within
    Monte Carlo standard errors (ArviZ ESS), on the mean and on E[m²].
    """
    mean, sd = conjugate_normal.posterior()
    kwargs = dict(draws=1500, tune=300, chains=2, random_seed=8, progressbar=False, compute_convergence_checks=False)
    eta, n_steps = 0.03, 10
    with conjugate_normal.model:
        private = pm.sample(
            step=pmdp.DPHMC(
                step_size=eta,
                n_leapfrog=n_steps,
                grad_clip=1e4,
                llr_clip=1e4,
                grad_noise_multiplier=1e-12,
                llr_noise_multiplier=1e-12,
                tune=False,
            ),
            **kwargs,
        )
        reference = pm.sample(
            step=pm.HamiltonianMC(
                path_length=eta * n_steps,
                step_scale=eta,
                adapt_step_size=False,
                step_rand=lambda s, rng=None: s,
                potential=QuadPotentialDiag(np.ones(1)),  # unit mass, as DPHMC's default
            ),
            **kwargs,
        )

    def estimate(result, power):
        values = result.posterior["m"] ** power
        return float(values.mean()), float(az.mcse(values.to_dataset(name="x"))["x"])

    for power, target in ((1, mean), (2, mean**2 + sd**2)):
        (dp_value, dp_se), (ref_value, ref_se) = estimate(private, power), estimate(reference, power)
        assert abs(dp_value - target) / dp_se < Z_CRIT
        assert abs(ref_value - target) / ref_se < Z_CRIT
        assert abs(dp_value - ref_value) / math.hypot(dp_se, ref_se) < Z_CRIT
    assert float(private.sample_stats["dp_accepted"].mean()) > 0.9


@pytest.mark.parametrize(
    ("chains", "tune", "draws", "n_leapfrog", "tau_l", "tau_g"),
    [(2, 20, 30, 5, 30.0, 80.0), (1, 0, 40, 12, 50.0, 200.0), (3, 10, 10, 1, 8.0, 15.0)],
)
def test_epsilon_equals_theorem_3_3(conjugate_normal, chains, tune, draws, n_leapfrog, tau_l, tau_g):
    delta = 1e-6
    with conjugate_normal.model:
        idata = pmdp.sample(
            step=pmdp.DPHMC(
                n_leapfrog=n_leapfrog,
                grad_clip=5.0,
                llr_clip=5.0,
                grad_noise_multiplier=tau_g,
                llr_noise_multiplier=tau_l,
            ),
            delta=delta,
            draws=draws,
            tune=tune,
            chains=chains,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    k = chains * (tune + draws)
    mu = k / (2 * tau_l**2) + k * (n_leapfrog + 1) / (2 * tau_g**2)  # Räisä et al. (2021), Theorem 3.3
    eps = idata.posterior.attrs["dp_epsilon"]
    with mp.workdps(40):  # the theorem's δ(ε), literally, in 40 digits
        e, m = mp.mpf(eps), mp.mpf(mu)
        delta_at_eps = 0.5 * (mp.erfc((e - m) / (2 * mp.sqrt(m))) - mp.exp(e) * mp.erfc((e + m) / (2 * mp.sqrt(m))))
    assert float(delta_at_eps) == pytest.approx(delta, rel=1e-8)
    assert pmdp.privacy_spent(idata).mu == pytest.approx(mu, rel=1e-12)
    assert float(idata.sample_stats["dp_mu_cumulative"].values[:, -1].sum()) == pytest.approx(mu, rel=1e-12)


def test_calibration_honours_the_gradient_share(conjugate_normal):
    with conjugate_normal.model:
        step = pmdp.DPHMC(n_leapfrog=4, grad_clip=5.0, llr_clip=5.0, grad_budget_share=0.3)
        idata = pmdp.sample(
            step=step,
            epsilon=6.0,
            delta=1e-6,
            draws=20,
            tune=10,
            chains=2,
            random_seed=1,
            init="prior",  # the whole ε goes to the chains: the split below is exact
            progressbar=False,
            compute_convergence_checks=False,
        )
    k = 2 * 30
    [settings] = json.loads(idata.posterior.attrs["dp_accountant"])["steps"]
    mu_grad = k * 5 / (2 * settings["grad_noise_multiplier"] ** 2)
    mu_llr = k / (2 * settings["llr_noise_multiplier"] ** 2)
    assert mu_grad / (mu_grad + mu_llr) == pytest.approx(0.3, rel=1e-9)
    assert mu_grad + mu_llr == pytest.approx(gaussian_mu_for_target(6.0, 1e-6), rel=1e-9)
    assert idata.posterior.attrs["dp_epsilon"] <= 6.0
    # The stats hold no exact energies: only DPHMC's declared (released or public) stats. Checked on this run
    # rather than on a sampling of its own (one compilation and run less; the stats do not depend on the settings).
    assert set(idata.sample_stats.data_vars) == set(pmdp.DPHMC.stats_dtypes_shapes)


def test_tuning_adapts_step_size_and_mass_and_is_accounted(conjugate_normal):
    _, sd = conjugate_normal.posterior()
    with conjugate_normal.model:
        step = pmdp.DPHMC(
            step_size=0.5,
            n_leapfrog=5,
            grad_clip=10.0,
            llr_clip=10.0,
            grad_noise_multiplier=0.5,
            llr_noise_multiplier=1.0,
            adapt_mass_window=50,
        )
        idata = pm.sample(
            step=step,
            draws=100,
            tune=200,
            chains=1,
            cores=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=False,
        )
    warm = idata.warmup_sample_stats
    assert warm["dp_tuning"].values.all() and not idata.sample_stats["dp_tuning"].values.any()
    assert np.ptp(idata.sample_stats["dp_step_size"].values) == 0  # fixed after tuning
    assert np.ptp(warm["dp_step_size"].values) > 0  # adapted during tuning
    # M⁻¹ adapted towards the posterior variance from the chain's own draws (loose: 50-draw windows)
    assert 0.1 * sd**2 < step.inv_mass[0] < 10 * sd**2
    assert float(idata.sample_stats["dp_accepted"].mean()) > 0.2
    per_iteration = 1 / (2 * 1.0**2) + 6 / (2 * 0.5**2)
    pmdp.strip_private_groups(idata, model=conjugate_normal.model)
    assert pmdp.privacy_spent(idata, delta=1e-6, model=conjugate_normal.model).mu == pytest.approx(300 * per_iteration)


def _black_box_model():
    """A likelihood through a Python op without a gradient (how users wrap black-box code)."""

    def double(m):
        return np.asarray(2.0 * m)

    wrap = getattr(pytensor, "wrap_py", None)
    if wrap is None:  # PyTensor 2.38: as_op is the same thing under its old name
        from pytensor.compile.ops import as_op as wrap
    with warnings.catch_warnings():
        # PyTensor 2.38 announces that as_op will be renamed wrap_py; not about our code.
        warnings.simplefilter("ignore", FutureWarning)
        op = wrap(itypes=[pt.dscalar], otypes=[pt.dscalar])(double)
    with pm.Model() as model:
        m = pm.Normal("m")
        pm.Normal("y", op(m), 1, observed=np.zeros(5))
    return model


# PyTensor 3 warns that Numba runs the deliberately opaque Python op in object mode.
@pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")
def test_non_differentiable_likelihood_is_refused():
    with _black_box_model(), pytest.raises(ValueError, match=r"must be differentiable in `vars` \(\['m'\]\)"):
        pmdp.DPHMC()


def test_gradient_failures_are_told_apart_by_where_they_were_raised_not_by_their_text(conjugate_normal, monkeypatch):
    """A PyTensor error whose text happens to say "continuous" or "`theta`" is still a missing gradient."""
    from pymc_dp.mechanisms import RowMechanisms

    def fails(self):
        raise NotImplementedError("grad of `theta` not implemented for this continuous Op")

    monkeypatch.setattr(RowMechanisms, "check_differentiable", fails)
    with conjugate_normal.model, pytest.raises(ValueError, match=r"must be differentiable in `vars` \(\['m'\]\)"):
        pmdp.DPHMC()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_leapfrog": 0}, "n_leapfrog"),
        ({"step_size": 0.0}, "step_size"),
        ({"step_size": -0.1}, "step_size"),
        ({"grad_clip": 0.0}, "grad_clip"),
        ({"grad_clip": float("nan")}, "grad_clip"),
        ({"llr_clip": -1.0}, "llr_clip"),
        ({"grad_noise_multiplier": 1.0}, "grad_noise_multiplier` and `llr_noise_multiplier"),
        ({"grad_noise_multiplier": -1.0, "llr_noise_multiplier": 1.0}, "grad_noise_multiplier"),
        ({"grad_budget_share": 1.0}, "grad_budget_share"),
        ({"step_size_jitter": 1.0}, "step_size_jitter"),
        ({"target_accept": 0.0}, "target_accept"),
        ({"adapt_mass_window": -5}, "adapt_mass_window"),
        ({"neighbouring": "swap"}, "neighbouring"),
    ],
)
def test_bad_arguments_name_the_parameter(conjugate_normal, kwargs, name):
    with conjugate_normal.model, pytest.raises(ValueError, match=f"`{name}` must"):
        pmdp.DPHMC(**kwargs)


def test_each_iteration_makes_l_plus_one_gradient_releases_and_one_ratio_release(conjugate_normal, monkeypatch):
    _, sd = conjugate_normal.posterior()
    step = noisy_step(conjugate_normal.model, sd)
    step.set_rng(np.random.default_rng(0))
    llr_mechanism, grad_mechanism = step._get_mechanism()
    counts = {"gradient": 0, "ratio": 0}
    grad_release, llr_release = grad_mechanism.release, llr_mechanism.release

    def count(name, release):
        def wrapped(*args, **kwargs):
            counts[name] += 1
            return release(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(grad_mechanism, "release", count("gradient", grad_release))
    monkeypatch.setattr(llr_mechanism, "release", count("ratio", llr_release))
    q = DictToArrayBijection.map({"m": np.asarray(conjugate_normal.posterior()[0])})
    for _ in range(5):
        q, _ = step.astep(q)
    assert counts == {"gradient": 5 * (step.n_leapfrog + 1), "ratio": 5}


@pytest.mark.parametrize(("relation", "factor"), [("substitute", 2.0), ("add_remove", 1.0)])
def test_gradient_release_noise_has_the_accounted_standard_deviation(conjugate_normal, relation, factor):
    """Release minus the exact clipped sum is N(0, (τ_g·Δ)²), Δ = factor·b_g: chi-square test on its variance."""
    from pymc_dp.data import RowLikelihood
    from pymc_dp.mechanisms import NoisyClippedGradient, clipped_sum_l2

    rows = RowLikelihood(conjugate_normal.model)
    mechanism = NoisyClippedGradient(rows, grad_clip=0.5, noise_multiplier=3.0, neighbouring=relation)
    theta = np.array([0.2])
    exact = clipped_sum_l2(rows.loglik_grad_rows(theta)[1], 0.5)
    rng = np.random.default_rng(5)
    residuals = np.array([mechanism.release(theta, rng) - exact for _ in range(3000)]).ravel()
    std = 3.0 * factor * 0.5
    n = residuals.size
    assert abs(residuals.mean()) / (std / math.sqrt(n)) < Z_CRIT
    chi2 = n * np.mean(residuals**2) / std**2
    assert stats.chi2.ppf(5e-5, n) < chi2 < stats.chi2.isf(5e-5, n)


def test_a_trajectory_whose_move_overflows_is_rejected_without_a_release(monkeypatch):
    # A finite proposal at ±1e200 per coordinate: ‖θ′ − θ‖ overflows, so the ratio's clip bound
    # b‖θ′ − θ‖ would be infinite. The move is a divergence (a function of released gradients):
    # rejected, nothing released.
    y = np.random.default_rng(0).normal(size=50)
    with pm.Model():
        mu = pm.Normal("mu", 0, 1, shape=2)
        pm.Normal("y", mu.sum(), 1.0, observed=y)
        step = pmdp.DPHMC(grad_clip=1.0, llr_clip=1.0, grad_noise_multiplier=1.0, llr_noise_multiplier=1.0)
    step._new_chain(np.random.default_rng(1))
    monkeypatch.setattr(
        "pymc_dp.step_methods.kernels.leapfrog",
        lambda ops, theta, momentum, *args: (np.full_like(theta, 1e200), momentum),
    )
    theta, info = step.transition(np.zeros(2))
    assert np.array_equal(theta, np.zeros(2)) and not info.accepted and np.isnan(info.noisy_llr)


def test_dual_averaging_is_pymcs_rule():
    # DPHMC's own dual averaging (one plain function, also run on the JAX backend's device) against PyMC's
    # DualAverageAdaptation with the constants DPHMC used: the same η iterates and averages, bit for bit.
    from pymc.step_methods.step_sizes import DualAverageAdaptation

    from pymc_dp.step_methods.hmc import DualAveraging

    ours, pymcs = DualAveraging(0.37, 0.8), DualAverageAdaptation(0.37, 0.8, 0.05, 0.75, 10)
    for accept in np.random.default_rng(3).uniform(size=300):
        assert ours.current(True) == pymcs.current(True) and ours.current(False) == pymcs.current(False)
        ours.update(accept)
        pymcs.update(accept, True)
    assert ours.current(True) == pymcs.current(True) and ours.current(False) == pymcs.current(False)

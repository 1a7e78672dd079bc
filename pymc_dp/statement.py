"""A privacy statement for a methods section, written from a result's own record.

:func:`privacy_statement` reads only what a published result carries (``dp_accountant``,
``dp_diagnostics``): the mechanisms and their public settings, the neighbouring relation,
the events, the software versions. ε is recomposed from the recorded events by the
accountant (as :func:`pymc_dp.privacy_spent` does), never copied from an attribute that
could have been edited. Nothing here reads data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import event_from_dict, format_epsilon
from pymc_dp.results import check_publishable, group_names, posterior_attrs

__all__ = ["BIBTEX", "PrivacyStatement", "privacy_statement"]

#: BibTeX of every work a statement may cite, by key.
BIBTEX: dict[str, str] = {
    "yildirim2019exact": """@article{yildirim2019exact,
  author = {Y{\\i}ld{\\i}r{\\i}m, Sinan and Ermi{\\c{s}}, Beyza},
  title = {Exact {MCMC} with differentially private moves},
  journal = {Statistics and Computing},
  volume = {29},
  pages = {947--963},
  year = {2019}
}""",
    "raisa2021dphmc": """@misc{raisa2021dphmc,
  author = {R{\\"a}is{\\"a}, Ossi and Koskela, Antti and Honkela, Antti},
  title = {Differentially private {H}amiltonian {M}onte {C}arlo},
  note = {arXiv preprint},
  year = {2021}
}""",
    "heikkila2019dpmcmc": """@inproceedings{heikkila2019dpmcmc,
  author = {Heikkil{\\"a}, Mikko and J{\\"a}lk{\\"o}, Joonas and Dikmen, Onur and Honkela, Antti},
  title = {Differentially private {M}arkov chain {M}onte {C}arlo},
  booktitle = {Advances in Neural Information Processing Systems 32 (NeurIPS)},
  year = {2019}
}""",
    "wang2019subsampled": """@inproceedings{wang2019subsampled,
  author = {Wang, Yu-Xiang and Balle, Borja and Kasiviswanathan, Shiva Prasad},
  title = {Subsampled {R}{\\'e}nyi differential privacy and analytical moments accountant},
  booktitle = {Proceedings of the 22nd International Conference on Artificial Intelligence and Statistics (AISTATS)},
  year = {2019}
}""",
    "jalko2017dpvi": """@inproceedings{jalko2017dpvi,
  author = {J{\\"a}lk{\\"o}, Joonas and Dikmen, Onur and Honkela, Antti},
  title = {Differentially private variational inference for non-conjugate models},
  booktitle = {Proceedings of the 33rd Conference on Uncertainty in Artificial Intelligence (UAI)},
  year = {2017}
}""",
    "abadi2016deep": """@inproceedings{abadi2016deep,
  author = {Abadi, Mart{\\'\\i}n and Chu, Andy and Goodfellow, Ian and McMahan, H. Brendan and Mironov, Ilya
            and Talwar, Kunal and Zhang, Li},
  title = {Deep learning with differential privacy},
  booktitle = {Proceedings of the 2016 ACM SIGSAC Conference on Computer and Communications Security (CCS)},
  year = {2016}
}""",
    "avellamedina2023noisy": """@article{avellamedina2023noisy,
  author = {Avella-Medina, Marco and Bradshaw, Casey and Loh, Po-Ling},
  title = {Differentially private inference via noisy optimization},
  journal = {The Annals of Statistics},
  volume = {51},
  number = {5},
  pages = {2067--2092},
  year = {2023}
}""",
    "foulds2016theory": """@inproceedings{foulds2016theory,
  author = {Foulds, James and Geumlek, Joseph and Welling, Max and Chaudhuri, Kamalika},
  title = {On the theory and practice of privacy-preserving {B}ayesian data analysis},
  booktitle = {Proceedings of the 32nd Conference on Uncertainty in Artificial Intelligence (UAI)},
  year = {2016}
}""",
    "dwork2006calibrating": """@inproceedings{dwork2006calibrating,
  author = {Dwork, Cynthia and McSherry, Frank and Nissim, Kobbi and Smith, Adam},
  title = {Calibrating noise to sensitivity in private data analysis},
  booktitle = {Theory of Cryptography Conference (TCC)},
  year = {2006}
}""",
    "mcsherry2007mechanism": """@inproceedings{mcsherry2007mechanism,
  author = {McSherry, Frank and Talwar, Kunal},
  title = {Mechanism design via differential privacy},
  booktitle = {48th Annual IEEE Symposium on Foundations of Computer Science (FOCS)},
  year = {2007}
}""",
    "dwork2014algorithmic": """@article{dwork2014algorithmic,
  author = {Dwork, Cynthia and Roth, Aaron},
  title = {The algorithmic foundations of differential privacy},
  journal = {Foundations and Trends in Theoretical Computer Science},
  volume = {9},
  number = {3--4},
  year = {2014}
}""",
    "sommer2019privacy": """@article{sommer2019privacy,
  author = {Sommer, David M. and Meiser, Sebastian and Mohammadi, Esfandiar},
  title = {Privacy loss classes: The central limit theorem in differential privacy},
  journal = {Proceedings on Privacy Enhancing Technologies},
  volume = {2019},
  number = {2},
  year = {2019}
}""",
    "mironov2017renyi": """@inproceedings{mironov2017renyi,
  author = {Mironov, Ilya},
  title = {R{\\'e}nyi differential privacy},
  booktitle = {IEEE 30th Computer Security Foundations Symposium (CSF)},
  year = {2017}
}""",
    "balle2020hypothesis": """@inproceedings{balle2020hypothesis,
  author = {Balle, Borja and Barthe, Gilles and Gaboardi, Marco and Hsu, Justin and Sato, Tetsuya},
  title = {Hypothesis testing interpretations and {R}{\\'e}nyi differential privacy},
  booktitle = {Proceedings of the 23rd International Conference on Artificial Intelligence and Statistics (AISTATS)},
  year = {2020}
}""",
    "dpaccounting": """@software{dpaccounting,
  author = {{Google Differential Privacy Team}},
  title = {dp\\_accounting: privacy accounting for differential privacy},
  url = {https://github.com/google/differential-privacy/tree/main/python/dp_accounting},
  year = {2024}
}""",
    "abrilpla2023pymc": """@article{abrilpla2023pymc,
  author = {Abril-Pla, Oriol and Andreani, Virgile and Carroll, Colin and Dong, Larry and Fonnesbeck,
            Christopher J. and Kochurov, Maxim and Kumar, Ravin and Lao, Junpeng and Luhmann, Christian C.
            and Martin, Osvaldo A. and Osthege, Michael and Vieira, Ricardo and Wiecki, Thomas and
            Zinkov, Robert},
  title = {{PyMC}: a modern, and comprehensive probabilistic programming framework in {P}ython},
  journal = {PeerJ Computer Science},
  volume = {9},
  pages = {e1516},
  year = {2023}
}""",
}

_ACCOUNTANTS = {
    "gaussian_closed_form": (
        "the exact closed form for composed Gaussian mechanisms (Sommer et al., 2019, Lemma 12)",
        ["sommer2019privacy"],
    ),
    "rdp": (
        "Rényi differential privacy (Mironov, 2017), converted to (ε, δ) with the conversion of Balle et al. "
        "(2020, Theorem 21)",
        ["mironov2017renyi", "balle2020hypothesis"],
    ),
    "pld": (
        "privacy loss distributions (Sommer et al., 2019) computed by Google's dp_accounting library "
        "(pessimistic estimate, an upper bound)",
        ["sommer2019privacy", "dpaccounting"],
    ),
    "pld+rdp": (
        "privacy loss distributions (Sommer et al., 2019; Google's dp_accounting library) for the subsampled "
        "Gaussian releases and Rényi differential privacy (Mironov, 2017; Balle et al., 2020) for the rest, at a "
        "split δ",
        ["sommer2019privacy", "dpaccounting", "mironov2017renyi", "balle2020hypothesis"],
    ),
    "pure_sum": (
        "basic composition of pure ε-DP releases (Dwork and Roth, 2014, Theorem 3.16)",
        ["dwork2014algorithmic"],
    ),
}

_RELATIONS = {
    "substitute": (
        "Two data sets are neighbours when one row is replaced by another (bounded DP); the number of rows, N = {n}, "
        "is treated as public. The unit of privacy is one row: one person only if each person contributes exactly "
        "one row."
    ),
    "add_remove": (
        "Two data sets are neighbours when one row is added or removed (unbounded DP); the number of rows is not "
        "released. The unit of privacy is one row: one person only if each person contributes exactly one row."
    ),
    "unknown": (
        "The result does not record the neighbouring relation its steps were built for (it was sampled with a "
        "plain pm.sample and published without its steps); state it from the steps' `neighbouring` setting "
        "(substitute, one row replaced, unless set otherwise)."
    ),
}


@dataclass(frozen=True)
class PrivacyStatement:
    """A methods-section paragraph and the BibTeX of the works it cites.

    Attributes
    ----------
    text : str
        The paragraph(s), in plain text with author–year citations.
    bibtex : str
        BibTeX entries of every work cited, one after another.
    keys : tuple of str
        The BibTeX keys cited, in order of first citation.
    epsilon, delta : float
        The guarantee the text states (ε recomposed from the recorded events).
    """

    text: str
    bibtex: str
    keys: tuple[str, ...]
    epsilon: float
    delta: float

    def __str__(self) -> str:
        return f"{self.text}\n\n{self.bibtex}"


def privacy_statement(result: Any) -> PrivacyStatement:
    """The paragraph a methods section needs to report a private result, generated from its record.

    Parameters
    ----------
    result : InferenceData, DataTree, ReleasedStatistics, DPADVI approximation or dict
        Anything pymc_dp returns: a result of :func:`pymc_dp.sample` (any step method,
        ``init="dpadvi"`` included), of a DPADVI approximation's ``sample``, of
        :meth:`pymc_dp.ReleasedStatistics.sample`, of :func:`pymc_dp.one_posterior_sample`,
        a plain ``pm.sample`` result after :func:`pymc_dp.publish`; a fitted DPADVI
        approximation; a :class:`pymc_dp.ReleasedStatistics`; or a ``dp_accountant`` record
        (dict or its JSON text).

    Returns
    -------
    PrivacyStatement
        ``str(statement)`` is the paragraph followed by the BibTeX block.

    Raises
    ------
    ValueError
        When ``result`` carries no ``dp_accountant`` record (publish a plain ``pm.sample``
        result with :func:`pymc_dp.publish` first).
    pymc_dp.UnpublishableResultError
        When ``result`` holds what reads the data (its ε would not cover it).

    Notes
    -----
    Neighbouring relation: the one recorded in the result (substitute, add/remove, or
    ``"unknown"`` for a plain ``pm.sample`` result published without its steps, which the
    statement says). The text states ε recomposed from the recorded events, rounded up to four
    significant digits; what ε covers (every chain, tuning included; a DP start) and what it does
    not (the prior and every public setting, which must not be chosen from the data; draws
    from a DP release are post-processing) are written out.

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
       Foundations and Trends in TCS 9(3–4), §2.3 (post-processing), Theorem 3.16 (composition).
    """
    record, diagnostics = _record_of(result)
    events = [event_from_dict(e) for e in record.get("events", [])]
    delta = float(record["delta"])
    if events:
        epsilon, method, _ = compose_epsilon(events, delta)
    else:
        epsilon, method = 0.0, "gaussian_closed_form"
    cite = _Citations()
    versions = record.get("versions", {})
    sentences = [_mechanism_text(record, cite)]
    sentences.append(_relation_text(record))
    sentences.append(_guarantee_text(record, epsilon, delta, method, cite))
    sentences.append(_coverage_text(record))
    if diagnostics is not None and diagnostics.get("usable") is False:
        # DPADVI lists its problems under both keys
        found = list(dict.fromkeys(str(r) for r in diagnostics.get("problems", []) + diagnostics.get("reasons", [])))
        sentences.append(
            "The result is flagged by its own diagnostics (computed from the released draws) as not usable as a "
            f"posterior: {'; '.join(found) or 'see dp_diagnostics'}."
        )
    if record.get("reproducible_noise"):
        sentences.append(
            "The mechanism noise was derived from a seed (reproducible_noise=True, for testing): the stated "
            "guarantee does not hold for this result and it must not be published."
        )
    sentences.append(_software_text(versions, cite))
    text = "\n\n".join(s for s in sentences if s)
    bibtex = "\n\n".join(BIBTEX[k] for k in cite.keys)
    return PrivacyStatement(text, bibtex, tuple(cite.keys), float(epsilon), delta)


class _Citations:
    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, *keys: str) -> None:
        for key in keys:
            if key not in self.keys:
                self.keys.append(key)


def _record_of(result: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The ``dp_accountant`` record (and ``dp_diagnostics``, when present) of anything pymc_dp returns."""
    if isinstance(result, dict):
        return dict(result), None
    if isinstance(result, str):
        try:
            return json.loads(result), None
        except json.JSONDecodeError:
            raise ValueError(
                "`result` given as text must be the JSON of a dp_accountant record. Found other text."
            ) from None
    if callable(getattr(result, "accountant_record", None)):  # ReleasedStatistics
        return result.accountant_record(), None
    if hasattr(result, "_dp_record"):  # a DPADVI approximation
        if result._dp_record is None:
            raise ValueError("`result` must be a fitted DPADVI approximation. Found one not fitted yet.")
        return dict(result._dp_record), None
    try:
        names = group_names(result)
    except (AttributeError, TypeError):
        names = None
    if names is None or "posterior" not in names:
        raise ValueError(
            "`result` must be a pymc_dp result (InferenceData or DataTree with a posterior), a fitted DPADVI "
            f"approximation, a ReleasedStatistics or a dp_accountant record. Found {type(result).__name__}."
        )
    attrs = posterior_attrs(result)
    if "dp_accountant" not in attrs:
        raise ValueError(
            "`result` must carry a dp_accountant record: publish a plain pm.sample result with "
            "pymc_dp.publish(idata, delta=...) first. Found none."
        )
    check_publishable(result)
    diagnostics = attrs.get("dp_diagnostics")
    return json.loads(attrs["dp_accountant"]), (json.loads(diagnostics) if diagnostics else None)


def _g(value: Any) -> str:
    return f"{float(value):.4g}"


def _newton_text(run_centring: dict[str, Any]) -> str:
    """The noisy Newton steps that moved a centred run's anchor (empty without them)."""
    steps = int(run_centring.get("newton_steps") or 0)
    if not steps:
        return ""
    schedule = run_centring.get("newton_noise_multipliers")  # every pilot's (scores, Hessians), first to last
    if schedule:
        pairs = "; ".join(f"{_g(g)} and {_g(h)}" for g, h in schedule)
        noise = f"noise multipliers for scores and Hessians, first pilot to last: {pairs}"
    else:  # records from before the pilots' schedule: one pair for every pilot
        noise = (
            f"noise multipliers {_g(run_centring['newton_noise_multiplier'])} for scores and "
            f"{_g(run_centring['newton_hessian_noise_multiplier'])} for Hessians"
        )
    return (
        f" Before it, {steps} pilot releases of the same two clipped sums ({noise}, "
        f"{_g(run_centring['newton_share'])} of "
        "the anchor's μ together) moved θ̂ from the DPADVI start's mean, each to the Newton step computed from "
        "the previous pilot's released sums and the data-free prior (post-processing); they are counted in ε"
        + _newton_clips_text(run_centring)
    )


def _newton_clips_text(run_centring: dict[str, Any]) -> str:
    """Where the pilots' clips and the anchor's clip histograms come from (empty on records without them)."""
    clips = run_centring.get("newton_clips")
    text = (
        f". Each pilot clipped every row's score at the public B = {_g(clips[0])} and its Hessian at B²/4 = "
        f"{_g(clips[1])}"
        if clips
        else ""
    )
    if run_centring.get("clip_histograms_point") is not None:
        text += (
            "; the anchor's clips come from the noisy score- and Hessian-norm histograms released at the "
            "anchor's own point, the last Newton point"
        )
    return text


def _recentring_text(recentring: dict[str, Any] | None) -> str:
    """The release that moved a centred run's expansion point (``centre="recentre"``; empty without it)."""
    if not recentring:
        return ""
    return (
        f"; then the expansion point θ̂ moved to the anchor's own Newton point θ̂₂ by one more release of the "
        f"clipped sums of each row's change of score and of Hessian between the two points (score changes "
        f"clipped to L2 norm {_g(recentring['score_bound'])}, Hessian changes to Frobenius norm "
        f"{_g(recentring['hessian_bound'])}, public bounds from κ and ‖θ̂₂ − θ̂‖), with Gaussian noise of noise "
        f"multipliers {_g(recentring['noise_multiplier'])} (scores) and "
        f"{_g(recentring['hessian_noise_multiplier'])} (Hessians), whose noise the result's widening also covers"
    )


def _centred_step_text(
    name: str, on: str, step: dict[str, Any], factor: str, cite: _Citations, run_centring: dict[str, Any]
) -> str:
    """A step whose releases are centred on a released anchor (issue 36; ``docs/centred.md``)."""
    cite("yildirim2019exact")
    centring = step["centring"]
    released = "one sum of log-likelihood ratios per iteration"
    noise = f"noise multiplier τ = {_g(step.get('noise_multiplier', float('nan')))}"
    if name == "DPHMC":
        cite("raisa2021dphmc")
        released = f"{step['n_leapfrog'] + 1} gradient sums and one sum of log-likelihood ratios per iteration"
        noise = (
            f"noise multipliers {_g(step.get('grad_noise_multiplier', float('nan')))} (gradients) and "
            f"{_g(step.get('llr_noise_multiplier', float('nan')))} (ratios)"
        )
    if centring.get("order", 1) == 2:
        anchor = (
            f"the clipped sums of per-row scores and of per-row Hessians at a public point θ̂, each row's score "
            f"clipped to L2 norm {_g(centring['grad_clip'])} and its Hessian to Frobenius norm "
            f"{_g(centring['hessian_clip'])}, released once each with Gaussian noise of noise multipliers "
            f"{_g(centring['noise_multiplier'])} (scores) and {_g(centring['hessian_noise_multiplier'])} (Hessians)"
        )
        anchor += _recentring_text(centring.get("recentring"))
        bound = (
            "its second-order expansion at θ̂ and clipped at ½κ‖θ′ − θ‖·((‖θ − θ̂‖² + ‖θ′ − θ̂‖²)/2 − ‖θ′ − θ‖²/6) "
            "(ratios) or ½κ‖θ − θ̂‖² (gradients)"
        )
    else:
        anchor = (
            f"the clipped sum of per-row scores at a public point θ̂, each row's score clipped to L2 norm "
            f"{_g(centring['grad_clip'])}, released once with Gaussian noise of noise multiplier "
            f"{_g(centring['noise_multiplier'])}"
        )
        bound = (
            "its first-order expansion at θ̂ and clipped at κ‖θ′ − θ‖·max(‖θ − θ̂‖, ‖θ′ − θ̂‖) (ratios) or "
            "κ‖θ − θ̂‖ (gradients)"
        )
    return (
        f"{name}{on}, centred on a released anchor: {anchor}.{_newton_text(run_centring)}"
        f"{'.' if run_centring.get('newton_steps') else ''} The chain then releases {released}, each row's term "
        f"taken against {bound}, κ = {_g(centring['lipschitz'])}, with Gaussian {noise} (noise standard deviation "
        f"τ·Δ, where Δ, the L2 sensitivity of each clipped sum, is {factor})."
    )


def _step_text(step: dict[str, Any], record: dict[str, Any], cite: _Citations) -> str:
    name = step.get("step", "a DP step")
    vars_ = ", ".join(step.get("vars", []))
    on = f" on {vars_}" if vars_ else ""
    relation = step.get("neighbouring", record.get("neighbouring"))
    factor = "twice the clip bound" if relation == "substitute" else "the clip bound"
    if step.get("centring") and name in ("DPPenaltyMH", "DPHMC"):
        return _centred_step_text(name, on, step, factor, cite, record.get("centring") or {})
    if name in ("DPPenaltyMH", "DPMultiOwnerPenaltyMH"):
        cite("yildirim2019exact")
        text = (
            f"{name}{on}: random-walk Metropolis with the penalty test (Yıldırım and Ermiş, 2019, "
            f"{'Algorithm 2, one noisy sum per data owner' if name == 'DPMultiOwnerPenaltyMH' else 'Algorithm 1'}). "
            f"Each iteration releases the sum over rows of the log-likelihood ratio of the proposal, each row's term "
            f"clipped to [−c, c] with c = {_g(step['llr_clip'])}, plus Gaussian noise with noise multiplier "
            f"τ = {_g(step['noise_multiplier'])} (noise standard deviation τ·Δ, where Δ, the L2 "
            f"sensitivity of the clipped sum, is {factor})"
        )
        if step.get("temperature", 1.0) != 1.0:
            text += f", at temperature {_g(step['temperature'])}"
        if name == "DPMultiOwnerPenaltyMH":
            text += (
                f"; {len(step.get('owners', []))} owners, the guarantee holding {step.get('guarantee', 'per owner')}"
            )
        return text + "."
    if name == "DPSuffStatsPenaltyMH":
        cite("yildirim2019exact")
        family = step.get("family", {})
        settings = ", ".join(f"{k} = {v}" for k, v in family.items() if k != "family")
        return (
            f"{name}{on}: the penalty test on sufficient statistics (Yıldırım and Ermiş, 2019, Algorithm 3). Each "
            f"iteration releases the {family.get('family', 'exponential-family')} sufficient statistics"
            f"{f' ({settings})' if settings else ''}, rows outside the public bounds handled by "
            f"{step.get('out_of_bounds', 'clamp')!r}, with L2 sensitivity Δ = {_g(step['l2_sensitivity'])}, plus "
            f"Gaussian noise with noise multiplier τ = {_g(step['noise_multiplier'])} (standard deviation τ·Δ)."
        )
    if name == "DPHMC":
        cite("raisa2021dphmc", "yildirim2019exact")
        return (
            f"{name}{on}: Hamiltonian Monte Carlo with private gradients and the penalty test (Räisä et al., 2021). "
            f"Each iteration releases {step['n_leapfrog'] + 1} sums of per-row gradients, each clipped to L2 norm "
            f"{_g(step['grad_clip'])}, with Gaussian noise of noise multiplier {_g(step['grad_noise_multiplier'])}, "
            f"and one sum of log-likelihood ratios clipped to [−c, c] with c = {_g(step['llr_clip'])}, with noise "
            f"multiplier {_g(step['llr_noise_multiplier'])} (noise standard deviation τ·Δ, where Δ, the L2 "
            f"sensitivity of each clipped sum, is {factor})."
        )
    if name == "DPBarkerMH":
        cite("heikkila2019dpmcmc")
        if step.get("full_data"):
            return (
                f"{name}{on}: the DP Barker acceptance test on the full data (Heikkilä et al., 2019, Theorem 1), "
                f"log-likelihood ratios clipped to [−c, c] with c = {_g(step['llr_clip'])}, Gaussian noise of "
                f"variance {_g(step.get('correction_variance', 0))} completed by a logistic correction."
            )
        cite("wang2019subsampled")
        return (
            f"{name}{on}: the subsampled DP Barker acceptance test (Heikkilä et al., 2019). Each iteration draws a "
            f"minibatch of {step['batch_size']} rows ({step.get('sampling', 'without replacement')}), clips each "
            f"row's tempered log-likelihood ratio to [−c, c] with c = {_g(step['llr_clip'])} (temperature "
            f"{_g(step['temperature'])}, tempered size {_g(step['tempered_size'])}), and uses Gaussian noise of "
            f"variance {_g(step['correction_variance'])} completed by a fitted logistic correction; its privacy is the "
            "Rényi DP of their Theorem 2, amplified by subsampling without replacement (eq. 22; Wang et al., 2019)."
        )
    return f"{name}{on}: settings {json.dumps(step, ensure_ascii=False)}."


def _dpadvi_text(settings: dict[str, Any], iterations: int, cite: _Citations) -> str:
    cite("jalko2017dpvi", "abadi2016deep")
    return (
        f"DPADVI: automatic differentiation variational inference ({settings.get('approximation', 'meanfield')}) "
        f"with differentially private gradients (Jälkö et al., 2017), run for {iterations} iterations of "
        f"{settings.get('optimizer', 'its optimiser')}. Each iteration includes every row independently with "
        f"probability q = {_g(settings['sampling_rate'])} (Poisson subsampling), clips each included row's ELBO "
        f"gradient to L2 norm {_g(settings['grad_clip'])} and adds Gaussian noise with noise multiplier "
        f"{_g(settings['noise_multiplier'])} to their sum (the subsampled Gaussian mechanism of Abadi et al., 2016)."
    )


def _mechanism_text(record: dict[str, Any], cite: _Citations) -> str:
    mechanism = str(record.get("mechanism", ""))
    if mechanism in ("pymc_dp.sample", "pymc_dp.publish") and record.get("steps"):
        chains, tune, draws = record.get("chains"), record.get("tune"), record.get("draws")
        if tune is not None and draws is not None:
            run = (
                f"{chains} chain{'s' if chains != 1 else ''} of {tune} tuning and {draws} kept iterations each "
                f"({chains * (tune + draws)} iterations in all, every one of them, tuning included, released and "
                "accounted for)"
            )
        else:
            run = (
                f"{chains} chains of {record.get('iterations')} iterations counted over all chains (tuning included), "
                "as recorded by the steps' statistics"
            )
        steps = " ".join(_step_text(s, record, cite) for s in record["steps"])
        text = f"The posterior was sampled with differentially private (DP) MCMC: {run}. {steps}"
        init = record.get("dp_init")
        if init:
            text += " The chains were started from a DP initialisation: " + _dpadvi_text(init, init["iterations"], cite)
        return text
    if mechanism == "pymc_dp.publish":
        return (
            f"The posterior was sampled with a plain pm.sample run of {record.get('chains')} chains using pymc-dp's "
            "Gaussian DP step methods with their noise set by hand; the privacy cost was priced from the cumulative "
            "Gaussian μ its chains recorded (tuning included), without the steps' settings."
        )
    if mechanism == "DPADVI":
        return (
            "The posterior approximation was fitted with "
            + _dpadvi_text(record["settings"], record["iterations"], cite)
            + (" The draws reported are from the fitted approximation (post-processing, at no further privacy cost).")
        )
    if mechanism.startswith(("laplace", "gaussian: aggregate sufficient statistics")):
        return _release_text(record, cite) + (
            " The posterior was then sampled given the released statistics only, which is post-processing."
        )
    if mechanism.startswith("several aggregate sufficient statistics"):
        parts = " ".join(_release_text(r, cite) for r in record.get("releases", []))
        return f"{parts} The posterior was then sampled given the released statistics only, which is post-processing."
    if mechanism.startswith("exponential mechanism"):
        cite("foulds2016theory", "mcsherry2007mechanism")
        lower, upper = record.get("loglik_bounds", [None, None])
        return (
            "One posterior sample was released by the exponential mechanism (McSherry and Talwar, 2007; "
            "Foulds et al., 2016, one posterior sample): a draw from the prior times exp(T Σᵢ clip(log p(xᵢ | θ))), "
            f"each row's log-likelihood clipped to [{lower}, {upper}] (utility sensitivity "
            f"{_g(record['utility_sensitivity'])}), temperature T = {_g(record['temperature'])}. The draw was "
            "computed by NUTS; the guarantee holds for an exact draw from the tempered posterior, and the error of the "
            "finite MCMC run is not covered by ε."
        )
    if mechanism == "pymc_dp.release_once":
        return _release_once_text(record.get("settings", {}), cite)
    return f"The result was produced by {mechanism}."


def _release_once_text(settings: dict[str, Any], cite: _Citations) -> str:
    """The release-once route (noisy Newton anchors, a widened Laplace posterior), in words."""
    cite("avellamedina2023noisy")
    bounds = settings.get("clip_bounds") or {}
    released = [k for k in ("grad_clip", "hessian_clip") if k in (bounds.get("releases") or [{}])[-1]]
    names = {"grad_clip": "score", "hessian_clip": "Hessian"}
    text = (
        f"The posterior is a Laplace (Bernstein–von Mises) approximation from {settings.get('newton_steps')} noisy "
        "Newton steps (Avella-Medina, Bradshaw and Loh, 2023): at each step the sums over rows of the per-row score "
        "and Hessian, each row's clipped to a norm bound, were released with the Gaussian mechanism, and the "
        "posterior's covariance was widened by the last release's known noise."
    )
    fixed = [f"{names[k]} {_g(settings.get(k))}" for k in names if k not in released]
    if released:
        text += (
            f" The {' and '.join(names[k] for k in released)} bound(s) were read off noisy histograms of the rows' "
            f"{' and '.join(names[k] for k in released)} norms released at every step (their share: "
            f"{_g(bounds.get('epsilon_share'))} of the run's μ, zCDP; bound = {_g(bounds.get('margin'))} × the "
            "noisy median)."
        )
    if fixed:
        text += f" Bounds set by the caller (public): {', '.join(fixed)}."
    return text + " The draws are post-processing of these releases."


def _release_text(record: dict[str, Any], cite: _Citations) -> str:
    """One release of sufficient statistics (Laplace or Gaussian), in words."""
    family = record.get("family", {})
    settings = ", ".join(f"{k} = {v}" for k, v in family.items() if k != "family")
    name = family.get("family", "exponential-family")
    head = f"The {name} sufficient statistics{f' ({settings})' if settings else ''}"
    bounds = f"follows from the public bounds (rows outside them handled by {record.get('out_of_bounds', 'clamp')!r})"
    if record.get("noise") == "gaussian":
        cite("foulds2016theory", "dwork2014algorithmic")
        return (
            f"{head} of the data were released once by the Gaussian mechanism (Dwork and Roth, 2014): their L2 "
            f"sensitivity Δ₂ = {_g(record['l2_sensitivity'])} {bounds}, the noise's standard deviation was "
            f"σ = {_g(record['gaussian_std'])}, and the noisy statistics were projected onto their admissible set."
            + _anchors_text(record, "σ", "gaussian_std")
            + _clipping_check_text(record)
        )
    cite("foulds2016theory", "dwork2006calibrating")
    return (
        f"{head} of the data were released once by the Laplace mechanism (Dwork et al., 2006; Foulds et al., 2016): "
        f"their L1 sensitivity Δ₁ = {_g(record['l1_sensitivity'])} {bounds}, the Laplace scale was "
        f"b = {_g(record['laplace_scale'])}, and the noisy statistics were projected onto their admissible set."
        + _anchors_text(record, "b", "laplace_scale")
        + _clipping_check_text(record)
    )


#: What each family's covariate anchors sum over rows, in words (β̂ the public anchor point, M = ``y_max``).
_ANCHOR_SUMS = {
    "logistic_regression": "tanh(xᵀβ̂/2)·x and of (1 − tanh²(xᵀβ̂/2))·xxᵀ,",
    "poisson_regression": (
        "m(λ)·x and of h(λ)·xxᵀ, where λ = exp(xᵀβ̂), m(λ) = E[min(Y, M)] and h(λ) = E[Y·1{Y ≤ M}] for "
        "Y ~ Poisson(λ) and M the public count bound, functions of the covariates only,"
    ),
    "negative_binomial_regression": (
        "w·(y − m(μ))·x and of w·h(μ)·xxᵀ, where μ = exp(xᵀβ̂), w = α/(α + μ), y is the count clipped to the "
        "public bound M and m, h are the clipped negative binomial's mean and slope,"
    ),
}


def _anchors_text(record: dict[str, Any], symbol: str, key: str) -> str:
    """The covariate anchors of a regression release (logistic, Poisson, negative binomial), in words, or ""."""
    anchors = record.get("covariate_anchors") or []
    if not anchors:
        return ""
    family = record.get("family", {}).get("family", "")
    sums = _ANCHOR_SUMS.get(family, "the family's anchor statistics (a score and its slope at β̂),")
    scales = ", ".join(_g(a[key]) for a in anchors)
    return (
        f" Then {len(anchors)} covariate anchor(s) were released by the same mechanism, each at a point β̂ computed "
        f"from the releases before it: the sums over rows of {sums} the second weighted by a public constant, each "
        f"coordinate bounded by the public bounds, with {symbol} = {scales}; the release events of all of them are "
        "composed in ε below."
    )


_NOISE_NAMES = {"discrete laplace": "discrete Laplace", "discrete gaussian": "discrete Gaussian"}


def _clipping_check_text(record: dict[str, Any]) -> str:
    """The release's clipping check (a noisy weighted count of the rows its bounds clipped), in words, or ""."""
    check = record.get("clipping_check")
    if not check:
        return ""
    full = check.get("full_weight_movement")
    weighting = (
        f", each weighted by how far the bounds moved it (fully from {100 * full:.3g} % of a bound's width; NaN "
        "and invalid labels fully)"
        if full
        else ""
    )
    noise = _NOISE_NAMES.get(check.get("mechanism"), "integer")
    return (
        f" The number of rows the public bounds clipped{weighting} was released once as well, with "
        f"{noise} noise of standard deviation {_g(check['noise_sd_rows'])} rows "
        f"(sensitivity 1, {_g(100 * check['budget_share'])} % of the budget), inside the same ε and δ; the "
        f"released share ({_g(100 * check['share_clipped'])} % ± {_g(100 * check['share_clipped_sd'])} %) is in "
        "the result's diagnostics."
    )


def _relation_text(record: dict[str, Any]) -> str:
    relation = record.get("neighbouring", "unknown")
    return _RELATIONS.get(relation, _RELATIONS["unknown"]).format(n=record.get("n_rows"))


def _guarantee_text(record: dict[str, Any], epsilon: float, delta: float, method: str, cite: _Citations) -> str:
    base = method.split("+", 1)[1] if method.startswith("pure_sum+") else method
    accountant, keys = _ACCOUNTANTS.get(base, (method, []))
    cite(*keys)
    if method.startswith("pure_sum+"):
        cite("dwork2014algorithmic")
        accountant = f"{accountant}, with the pure ε-DP releases added by basic composition (Dwork and Roth, 2014)"
    events = record.get("events", [])
    if delta == 0:
        guarantee = f"The released result satisfies pure ε-DP with ε = {format_epsilon(epsilon)} (δ = 0)"
    else:
        guarantee = f"The released result satisfies (ε, δ)-DP with ε = {format_epsilon(epsilon)} and δ = {delta:.3g}"
    text = f"{guarantee}, computed with {accountant} over its {len(events)} recorded release event(s)."
    budget = record.get("budget")
    if budget:
        text += (
            f" It was charged to a privacy budget of ε = {_g(budget['epsilon'])} at δ = {budget['delta']:.3g}, "
            f"{format_epsilon(budget['spent'])} of which had been spent after this run."
        )
    return text


def _coverage_text(record: dict[str, Any]) -> str:
    start = record.get("start") or {}
    source = start.get("source")
    parts = []
    if source == "prior":
        parts.append("Each chain started from its own draw from the prior (data-free).")
    elif source == "model":
        parts.append("The chain or the optimisation started from the model's initial point (data-free).")
    elif source == "dp_release":
        init = record.get("dp_init")
        share = f" (a share {_g(init['epsilon_share'])} of ε)" if init and "epsilon_share" in init else ""
        parts.append(
            f"The chains started from a DP release ({start.get('description', 'a DP fit')}), whose cost{share} is "
            "included in ε."
        )
    elif source == "not recorded":
        parts.append(
            "The run did not record where its chains started: start values are not covered by ε and must not have "
            "been computed from the data."
        )
    elif source == "user":
        parts.append(
            f"The run started from values given by the user ({start.get('note', '')}): they are not covered by ε "
            "and must not have been computed from the data."
        )
    elif source is not None:
        parts.append(f"Start values: {source} ({start.get('note', '')}).")
    parts.append(
        "Not covered by ε, and therefore chosen without looking at the data: the model, the prior (its public origin "
        "must be stated), every clip bound, data bound and sampler setting listed above. What is computed from the "
        "released values (posterior summaries, plots) is post-processing and costs nothing more."
    )
    return " ".join(parts)


def _software_text(versions: dict[str, str], cite: _Citations) -> str:
    if not versions:
        return ""
    cite("abrilpla2023pymc")
    listed = ", ".join(f"{k} {v}" for k, v in versions.items())
    return f"Software: {listed} (PyMC: Abril-Pla et al., 2023)."

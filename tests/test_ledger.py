"""The persistent privacy ledger: concurrent charges, crashes, tampering, and the same ε as PrivacyBudget."""

import json
import multiprocessing
import os
import pickle
import signal
import sqlite3
import time

import numpy as np
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting import (
    GaussianReleases,
    PoissonGaussianReleases,
    PureDPReleases,
    RdpReleases,
    barker_subsampled_rdp,
    gaussian_epsilon,
)
from pymc_dp.accounting.ledger import LedgerHistory, canonical_json, entry_hash, genesis_hash
from pymc_dp.run import PrivateRun

DELTA = 1e-6
TAU = 10.0  # one charge of GaussianReleases(TAU, 1) costs μ = 1/(2·TAU²) = 0.005
# fork: the workers inherit the imported package (spawn would re-import PyMC in every worker).
FORK = multiprocessing.get_context("fork")


def _ledger(tmp_path, name="ledger.sqlite", **kwargs):
    settings = {"dataset": "survey", "epsilon": 2.0, "delta": DELTA, "n_rows": 100, **kwargs}
    return pmdp.PrivacyLedger(tmp_path / name, **settings)


def _budget_for(count: int) -> float:
    """An ε between the closed-form ε of ``count`` and ``count + 1`` charges: exactly ``count`` fit."""
    mu = 1 / (2 * TAU**2)
    return 0.5 * (gaussian_epsilon(DELTA, count * mu) + gaussian_epsilon(DELTA, (count + 1) * mu))


def test_a_new_ledger_fixes_its_settings_and_reopens(tmp_path):
    ledger = _ledger(tmp_path)
    assert isinstance(ledger, pmdp.PrivacyBudget)
    assert ledger.spent().epsilon == 0.0 and ledger.history() == () and ledger.head[0] == 0
    again = pmdp.PrivacyLedger(tmp_path / "ledger.sqlite", dataset="survey")  # settings from the file
    assert (again.epsilon, again.delta, again.n_rows, again.neighbouring) == (2.0, DELTA, 100, "substitute")
    with pytest.raises(ValueError, match=r"`epsilon` must be 2\.0, fixed when the ledger"):
        pmdp.PrivacyLedger(tmp_path / "ledger.sqlite", dataset="survey", epsilon=3.0)
    with pytest.raises(ValueError, match=r"`n_rows` must be 100"):
        pmdp.PrivacyLedger(tmp_path / "ledger.sqlite", dataset="survey", n_rows=99)
    with pytest.raises(ValueError, match=r"`dataset` must be 'survey'"):
        pmdp.PrivacyLedger(tmp_path / "ledger.sqlite", dataset="other")


def test_bad_settings_are_refused_and_create_no_file(tmp_path):
    with pytest.raises(ValueError, match=r"`n_rows` must be given to create"):
        pmdp.PrivacyLedger(tmp_path / "a.sqlite", dataset="s", epsilon=1.0, delta=DELTA)
    with pytest.raises(ValueError, match=r"`epsilon` must be"):
        pmdp.PrivacyLedger(tmp_path / "a.sqlite", dataset="s", epsilon=-1.0, delta=DELTA, n_rows=5)
    with pytest.raises(ValueError, match=r"`n_rows` must be omitted under add_remove"):
        pmdp.PrivacyLedger(
            tmp_path / "a.sqlite", dataset="s", epsilon=1, delta=DELTA, n_rows=5, neighbouring="add_remove"
        )
    with pytest.raises(ValueError, match=r"`dataset` must be a non-empty str"):
        pmdp.PrivacyLedger(tmp_path / "a.sqlite", dataset="", epsilon=1.0, delta=DELTA, n_rows=5)
    with pytest.raises(ValueError, match=r"`path` must be a file in an existing directory"):
        pmdp.PrivacyLedger(tmp_path / "missing" / "a.sqlite", dataset="s", epsilon=1.0, delta=DELTA, n_rows=5)
    assert not (tmp_path / "a.sqlite").exists() and not (tmp_path / "missing").exists()
    (tmp_path / "other.sqlite").write_bytes(b"not a database, but not empty either" * 10)
    with pytest.raises(pmdp.LedgerIntegrityError, match=r"not an SQLite privacy ledger"):
        pmdp.PrivacyLedger(tmp_path / "other.sqlite", dataset="s", epsilon=1.0, delta=DELTA, n_rows=5)


def _barker_event() -> RdpReleases:
    orders, rdp = barker_subsampled_rdp(10_000, 200)
    return RdpReleases(tuple(float(a) for a in orders), tuple(float(r) for r in rdp), 10, label="DPBarkerMH")


# Every event type the package charges, in the order a data custodian might run them.
EVENTS = [
    [GaussianReleases(60.0, 100, label="DPPenaltyMH")],
    [PureDPReleases(0.1, 2, label="Laplace statistics")],
    [_barker_event()],
    [GaussianReleases(3.0, 5, label="too much")],  # refused by both
    [PoissonGaussianReleases(6.0, 0.02, 200, label="DPADVI")],  # last: the mixed composition is the slow one
]


def test_the_ledger_spends_exactly_what_a_budget_spends_for_every_event_type(tmp_path):
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=DELTA, n_rows=100)
    ledger = _ledger(tmp_path)
    outcomes = []
    for events in EVENTS:
        results = []
        for target in (budget, ledger):
            try:
                results.append(target.charge(events, label=events[0].label).epsilon)
            except pmdp.PrivacyBudgetExceededError:
                results.append("refused")
        assert results[0] == results[1]  # same accountant code: identical floats
        outcomes.append(results[0])
    assert budget.labels == ledger.labels
    assert budget.spent().epsilon == ledger.spent().epsilon
    assert "refused" in outcomes and outcomes.count("refused") == 1  # the reference sequence refuses once
    assert budget.events == ledger.events  # events survive the JSON round trip exactly
    reopened = pmdp.PrivacyLedger(tmp_path / "ledger.sqlite", dataset="survey")
    assert reopened.verify().epsilon == budget.spent().epsilon  # recomposed from the file alone
    assert [e.epsilon_after for e in reopened.history()] == [o for o in outcomes if o != "refused"]


def test_a_refused_charge_writes_nothing_and_a_copy_cannot_reset_the_spend(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.charge([GaussianReleases(5.0, 1)], label="first")
    size, head = os.path.getsize(ledger.path), ledger.head
    with pytest.raises(pmdp.PrivacyBudgetExceededError, match=r"Nothing was run or charged"):
        ledger.charge([GaussianReleases(0.5, 1)], label="too much")
    assert ledger.head == head and ledger.labels == ("first",) and os.path.getsize(ledger.path) == size
    old_copy = pickle.loads(pickle.dumps(ledger))  # an in-memory budget would be reset by this
    ledger.charge([GaussianReleases(5.0, 1)], label="second")
    assert old_copy.labels == ("first", "second") and old_copy.spent() == ledger.spent()
    with pytest.raises(AttributeError):
        ledger.charge(["not an event"])
    assert ledger.labels == ("first", "second")


def _tamper(path, statement, *args):
    conn = sqlite3.connect(path)
    conn.execute(statement, args)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    "edit",
    [
        ("UPDATE ledger_entries SET entry = replace(entry, '\"count\":1', '\"count\":0') WHERE seq = 2", "hash does"),
        ("UPDATE ledger_entries SET label = 'innocent' WHERE seq = 1", "columns differ"),
        ("DELETE FROM ledger_entries WHERE seq = 2", "entry 2 is missing"),
        ("DELETE FROM ledger_entries WHERE seq = 3", "head does not match"),
        ("UPDATE ledger_settings SET settings = replace(settings, '\"epsilon\":2.0', '\"epsilon\":20.0')", "entry 1"),
        ("UPDATE ledger_head SET count = 2", "head does not match"),
    ],
    ids=["edited events", "edited label", "deleted entry", "deleted last entry", "raised budget", "edited head"],
)
def test_an_edited_or_deleted_entry_is_detected_on_open_and_before_a_charge(tmp_path, edit):
    ledger = _ledger(tmp_path)
    for k in range(3):
        ledger.charge([GaussianReleases(10.0, 1)], label=f"run {k + 1}")
    statement, message = edit
    _tamper(ledger.path, statement)
    with pytest.raises(pmdp.LedgerIntegrityError, match=message):
        pmdp.PrivacyLedger(ledger.path, dataset="survey")
    with pytest.raises(pmdp.LedgerIntegrityError, match=r"nothing was charged"):
        ledger.charge([GaussianReleases(10.0, 1)])


def test_a_rewritten_history_is_detected_against_a_head_kept_elsewhere(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.charge([GaussianReleases(10.0, 1)], label="kept")
    kept = ledger.head
    ledger.charge([GaussianReleases(10.0, 1)], label="later")
    ledger.verify(head=kept)
    # A forger with write access recomputes the whole chain after dropping entry 1.
    conn = sqlite3.connect(ledger.path)
    (settings,) = conn.execute("SELECT settings FROM ledger_settings").fetchone()
    (text,) = conn.execute("SELECT entry FROM ledger_entries WHERE seq = 2").fetchone()
    text = text.replace('"seq":2', '"seq":1')
    digest = entry_hash(genesis_hash(settings), text)
    conn.execute("DELETE FROM ledger_entries")
    conn.execute(
        "INSERT INTO ledger_entries VALUES (1, 'later', ?, ?, ?, ?)",
        (text.split('"utc":"')[1].split('"')[0], text, genesis_hash(settings), digest),
    )
    conn.execute("UPDATE ledger_head SET count = 1, hash = ?", (digest,))
    conn.commit()
    conn.close()
    forged = pmdp.PrivacyLedger(ledger.path, dataset="survey")  # consistent: the chain has no secret
    assert forged.labels == ("later",)
    with pytest.raises(pmdp.LedgerIntegrityError, match=r"history was rewritten"):
        forged.verify(head=kept)


def test_history_is_a_table_of_canonical_hashed_entries(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.charge([GaussianReleases(10.0, 2), PureDPReleases(0.1)], label="two events")
    (entry,) = history = ledger.history()
    assert isinstance(history, LedgerHistory)
    row = history.as_dicts()[0]
    assert row["seq"] == 1 and row["events"] == 2 and row["label"] == "two events"
    assert row["pymc_dp"] == pmdp.__version__ and entry.utc.endswith("+00:00")
    assert str(history).splitlines()[0].split() == ["seq", "utc", "label", "events", "ε", "after", "method"]
    assert "two events" in str(history)
    conn = sqlite3.connect(ledger.path)
    (text, prev, digest) = conn.execute("SELECT entry, prev_hash, hash FROM ledger_entries").fetchone()
    conn.close()
    assert canonical_json(json.loads(text)) == text and entry_hash(prev, text) == digest == entry.hash


def _charge_many(path, worker, attempts, barrier, results):
    ledger = pmdp.PrivacyLedger(path, dataset="survey")
    barrier.wait()
    accepted = []
    for k in range(attempts):
        label = f"worker {worker} charge {k}"
        try:
            ledger.charge([GaussianReleases(TAU, 1)], label=label)
            accepted.append(label)
        except pmdp.PrivacyBudgetExceededError:
            pass
    results.put(accepted)


def _read_while_others_charge(path, barrier, stop, results):
    ledger = pmdp.PrivacyLedger(path, dataset="survey")
    barrier.wait()
    reads, errors, seen = 0, [], []
    while not stop.is_set():
        try:
            seen.append(len(ledger.history()))
            ledger.spent()
            reads += 1
        except Exception as error:  # a read must never see a half-written charge
            errors.append(f"{type(error).__name__}: {error}")
    results.put((reads, errors, seen))


@pytest.mark.parametrize(("processes", "attempts", "allowed"), [(8, 25, 100)])
def test_processes_charging_at_once_never_overspend_and_lose_no_entry(tmp_path, processes, attempts, allowed):
    ledger = _ledger(tmp_path, epsilon=_budget_for(allowed))
    barrier, results, reader_results, stop = FORK.Barrier(processes + 1), FORK.Queue(), FORK.Queue(), FORK.Event()
    workers = [
        FORK.Process(target=_charge_many, args=(ledger.path, w, attempts, barrier, results)) for w in range(processes)
    ]
    reader = FORK.Process(target=_read_while_others_charge, args=(ledger.path, barrier, stop, reader_results))
    start = time.perf_counter()
    for w in [*workers, reader]:
        w.start()
    accepted = [label for _ in workers for label in results.get(timeout=300)]
    elapsed = time.perf_counter() - start
    stop.set()
    reads, errors, seen = reader_results.get(timeout=60)
    for w in [*workers, reader]:
        w.join(timeout=60)
    assert [w.exitcode for w in [*workers, reader]] == [0] * (processes + 1)
    assert errors == [] and reads > 0 and seen == sorted(seen)  # consistent snapshots, never going back
    history = ledger.history()
    assert len(accepted) == allowed == len(history)  # every charge that fits was accepted, no more
    assert sorted(accepted) == sorted(e.label for e in history)  # no accepted charge lost
    assert ledger.spent().epsilon <= ledger.epsilon
    assert np.all(np.diff([e.epsilon_after for e in history]) > 0)
    assert ledger.verify().epsilon == history[-1].epsilon_after
    print(
        f"\nledger concurrency: {processes} processes x {attempts} charges = {processes * attempts} attempted, "
        f"{len(accepted)} accepted (budget allows {allowed}), {elapsed:.2f} s wall; a reader made {reads} "
        "consistent reads meanwhile"
    )


def _charge_then_hang(path, charged):
    ledger = pmdp.PrivacyLedger(path, dataset="survey")
    run = PrivateRun("crash test", delta=DELTA, neighbouring="substitute", n_rows=100, budget=ledger)
    run.plan([GaussianReleases(TAU, 3)])
    with run.releasing(label="killed while reading data"):
        charged.set()  # the data would be read here
        time.sleep(120)


def test_a_run_killed_after_its_charge_stays_charged(tmp_path):
    ledger = _ledger(tmp_path)
    charged = FORK.Event()
    worker = FORK.Process(target=_charge_then_hang, args=(ledger.path, charged))
    worker.start()
    assert charged.wait(timeout=120)
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(timeout=60)
    assert worker.exitcode == -signal.SIGKILL
    reopened = pmdp.PrivacyLedger(ledger.path, dataset="survey")
    assert reopened.labels == ("killed while reading data",)
    assert reopened.spent().epsilon == gaussian_epsilon(DELTA, 3 / (2 * TAU**2))


def test_pmdp_sample_charges_the_ledger_and_a_refused_run_writes_nothing(tmp_path, conjugate_normal):
    ledger = pmdp.PrivacyLedger(tmp_path / "l.sqlite", dataset="y", epsilon=1.0, delta=1e-5, n_rows=200)
    with conjugate_normal.model:
        idata = pmdp.sample(
            step=pmdp.DPPenaltyMH(noise_multiplier=100.0, proposal_scale=0.05),
            budget=ledger,
            draws=20,
            tune=10,
            chains=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
        size = os.path.getsize(ledger.path)
        with pytest.raises(pmdp.PrivacyBudgetExceededError):
            pmdp.sample(
                step=pmdp.DPPenaltyMH(noise_multiplier=1.0),
                budget=ledger,
                draws=500,
                tune=0,
                chains=1,
                progressbar=False,
            )
    (entry,) = ledger.history()
    assert entry.epsilon_after == pytest.approx(idata.posterior.attrs["dp_epsilon"], rel=1e-12)
    assert os.path.getsize(ledger.path) == size and len(ledger.history()) == 1


@pytest.mark.slow
def test_every_front_end_charges_a_ledger_as_it_charges_a_budget(tmp_path, conjugate_normal):
    """release_statistics, DPADVI.fit and one_posterior_sample take a ledger as budget (pmdp.sample: above)."""
    ledger = pmdp.PrivacyLedger(tmp_path / "l.sqlite", dataset="y", epsilon=5.0, delta=1e-5, n_rows=200)
    y = conjugate_normal.y
    release = pmdp.release_statistics(
        "normal", np.clip(y, -4, 4), epsilon=0.5, sigma=1.0, bounds=(-4, 4), budget=ledger
    )
    with conjugate_normal.model:
        approx = pmdp.DPADVI(epsilon=1.0, sampling_rate=0.2, grad_clip=2.0, budget=ledger).fit(
            20, model=conjugate_normal.model, progressbar=False
        )
        draw = pmdp.one_posterior_sample(
            epsilon=0.5, loglik_bounds=(-8.0, 0.0), tune=20, budget=ledger, progressbar=False
        )
    records = [release.accountant_record(), approx._dp_record, json.loads(draw.posterior.attrs["dp_accountant"])]
    events = [e for r in records for e in r["events"]]
    assert [e.to_dict() for e in ledger.events] == events
    reference = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=200)
    for entry in ledger.history():
        reference.charge(entry.events, label=entry.label)
    assert ledger.spent().epsilon == reference.spent().epsilon and len(ledger.history()) == 3


def test_verify_recomposes_every_entry_and_names_a_recorded_epsilon_that_differs(tmp_path):
    ledger = _ledger(tmp_path)
    for _ in range(2):
        ledger.charge([GaussianReleases(10.0, 1)])
    assert ledger.verify().epsilon == ledger.history()[-1].epsilon_after
    # A forger who rewrites the chain consistently but lowers the recorded ε of entry 2 is caught by verify.
    conn = sqlite3.connect(ledger.path)
    rows = conn.execute("SELECT seq, entry FROM ledger_entries ORDER BY seq").fetchall()
    (settings,) = conn.execute("SELECT settings FROM ledger_settings").fetchone()
    prev = genesis_hash(settings)
    for seq, text in rows:
        data = json.loads(text)
        if seq == 2:
            data["epsilon_after"] = 0.01
        text = canonical_json(data)
        digest = entry_hash(prev, text)
        conn.execute(
            "UPDATE ledger_entries SET entry = ?, prev_hash = ?, hash = ? WHERE seq = ?", (text, prev, digest, seq)
        )
        prev = digest
    conn.execute("UPDATE ledger_head SET hash = ?", (prev,))
    conn.commit()
    conn.close()
    forged = pmdp.PrivacyLedger(ledger.path, dataset="survey")  # the chain is consistent again
    with pytest.raises(pmdp.LedgerIntegrityError, match=r"Entry 2 .* records ε = 0\.01, but the history up to it"):
        forged.verify()

"""A privacy budget kept in a file: a hash-chained SQLite ledger shared by every process.

A :class:`~pymc_dp.PrivacyBudget` lives in memory: restarting Python, or unpickling an older
copy, forgets what was spent. A :class:`PrivacyLedger` keeps every charge in an SQLite file
(standard library ``sqlite3``), so the spend of a data set survives restarts and is shared by
every process and machine that opens the same file.

- **Check and charge in one transaction.** :meth:`PrivacyLedger.charge` takes SQLite's write
  lock (``BEGIN IMMEDIATE``), reads and verifies the whole history, composes it with the new
  events, and writes the entry only if the total fits; then it commits. Two processes
  charging at once are serialised by the lock, so together they can never overspend. A
  refused charge writes nothing. Every front-end charges before it reads any data
  (:meth:`pymc_dp.run.PrivateRun.releasing`), so a run that fails or is killed afterwards stays
  charged.
- **Hash chain.** Entry *k* stores ``SHA-256(hash_{k-1} + "\\n" + entry_k)`` over the entry's
  canonical JSON; the chain starts from the hash of the ledger's settings, and the head
  (number of entries, last hash) is stored too. An edited, deleted, reordered or inserted
  entry, or edited settings, fail the check that runs on open and before every charge
  (:class:`LedgerIntegrityError`).
- **Recomputable.** Entries hold the events (the JSON of ``dp_accountant``), so the composed ε
  of the whole history is recomputed from the file alone by the accountant's own code
  (:meth:`PrivacyLedger.spent`, :meth:`PrivacyLedger.verify`).

This module reads no data: a ledger holds public settings, labels and times only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring, check_positive_int, check_unit_interval_open
from pymc_dp._versions import versions
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.accounting.events import PrivacyEvent, event_from_dict
from pymc_dp.accounting.spent import PrivacySpent, format_epsilon

__all__ = ["LEDGER_FORMAT", "LedgerEntry", "LedgerHistory", "LedgerIntegrityError", "PrivacyLedger"]

#: Version of the file layout and of the hashed entry format.
LEDGER_FORMAT = 1
_GENESIS_PREFIX = "pymc-dp privacy ledger\n"
_TABLES = {"ledger_settings", "ledger_entries", "ledger_head"}
_SCHEMA = (
    "CREATE TABLE ledger_settings (id INTEGER PRIMARY KEY CHECK (id = 1), settings TEXT NOT NULL)",
    "CREATE TABLE ledger_entries (seq INTEGER PRIMARY KEY, label TEXT NOT NULL, utc TEXT NOT NULL, "
    "entry TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL)",
    "CREATE TABLE ledger_head (id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL, hash TEXT NOT NULL)",
)


class LedgerIntegrityError(RuntimeError):
    """A ledger file fails its hash-chain check (edited, truncated or not a ledger). Nothing was charged."""


def canonical_json(value: Any) -> str:
    """The one JSON text a value is hashed as: sorted keys, no spaces, ASCII, NumPy scalars as Python's."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=plain_json_value)


def plain_json_value(value: Any) -> Any:
    """NumPy scalars and arrays as plain Python values (``json.dumps(default=...)``); anything else is refused."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def entry_hash(prev_hash: str, entry_json: str) -> str:
    """SHA-256 (hex) of the previous hash, a newline and the entry's canonical JSON."""
    return hashlib.sha256(f"{prev_hash}\n{entry_json}".encode()).hexdigest()


def genesis_hash(settings_json: str) -> str:
    """The hash the chain starts from: SHA-256 of the ledger's canonical settings."""
    return hashlib.sha256((_GENESIS_PREFIX + settings_json).encode()).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    """One charge of a :class:`PrivacyLedger`.

    Attributes
    ----------
    seq : int
        Position in the ledger, from 1.
    utc : str
        When it was charged (ISO 8601, UTC), before the run read any data.
    label : str
        What was run (the front-end's label).
    events : tuple of PrivacyEvent
        The releases charged.
    epsilon_after : float
        ε of the whole ledger after this charge, at the ledger's δ, as computed when charged.
    method : str
        How ``epsilon_after`` was composed (see :class:`pymc_dp.PrivacySpent`).
    versions : dict
        Versions of pymc-dp and the libraries that priced the charge.
    hash : str
        The entry's SHA-256 chain hash.
    """

    seq: int
    utc: str
    label: str
    events: tuple[PrivacyEvent, ...]
    epsilon_after: float
    method: str
    versions: dict[str, str]
    hash: str


class LedgerHistory(tuple):
    """The entries of a ledger, oldest first; printed as a table.

    A tuple of :class:`LedgerEntry`. ``as_dicts()`` gives plain rows (e.g. for
    ``pandas.DataFrame(history.as_dicts())``).
    """

    def as_dicts(self) -> list[dict[str, Any]]:
        """One dict per entry: seq, utc, label, number of events, ε after, method, pymc-dp version, hash."""
        return [
            {
                "seq": e.seq,
                "utc": e.utc,
                "label": e.label,
                "events": len(e.events),
                "epsilon_after": e.epsilon_after,
                "method": e.method,
                "pymc_dp": e.versions.get("pymc-dp", "unknown"),
                "hash": e.hash,
            }
            for e in self
        ]

    def __str__(self) -> str:
        header = ("seq", "utc", "label", "events", "ε after", "method")
        rows = [
            (str(r["seq"]), r["utc"], r["label"], str(r["events"]), format_epsilon(r["epsilon_after"], 6), r["method"])
            for r in self.as_dicts()
        ]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in (header, *rows)]
        return "\n".join(line.rstrip() for line in lines)


class PrivacyLedger(PrivacyBudget):
    """An (ε, δ) budget for one data set kept in an SQLite file, shared by every process.

    Usable wherever a :class:`~pymc_dp.PrivacyBudget` is (``budget=`` of
    :func:`pymc_dp.sample`, :meth:`pymc_dp.DPADVI.fit`, :func:`pymc_dp.release_statistics`,
    ...). Every charge is written, with its events, label, UTC time and software versions,
    before the run reads any data, in the same SQLite transaction as the budget check.

    Parameters
    ----------
    path : str or os.PathLike
        The ledger file. Created (with the settings below) when it does not exist.
    dataset : str
        Name of the data set the ledger is for. Fixed at creation; opening the file for
        another data set is refused.
    epsilon : float, optional
        Total ε allowed, > 0. Required at creation; when reopening, checked against the file.
    delta : float, optional
        δ at which ``epsilon`` must hold, in (0, 1). Required at creation; checked on reopen.
    n_rows : int, optional
        N of the data set: required at creation under substitute neighbours (N is public
        there), and must be omitted under add/remove (N is private there and the file would
        record it). Checked on reopen.
    neighbouring : {"substitute", "add_remove"}, optional
        The neighbouring relation every run must use ("substitute" at creation if omitted).
        Checked on reopen.
    timeout : float, default 60
        Seconds to wait for another process's charge to finish before giving up.

    Raises
    ------
    ValueError
        For an invalid setting, a setting missing at creation, or one that differs from the
        file's. Nothing is created or changed.
    LedgerIntegrityError
        When the file is not a pymc-dp ledger or fails its hash-chain check.

    Notes
    -----
    Neighbouring relation: ``neighbouring``, fixed at creation ("substitute": one row
    replaced, N public; "add_remove": one row added or removed). ε is the composition of every
    charged event at ``delta``, by the same accountant that prices a run
    (:func:`pymc_dp.accounting.compose_epsilon`), so the ledger spends exactly what a
    :class:`~pymc_dp.PrivacyBudget` would. The check and the write are one SQLite
    ``BEGIN IMMEDIATE`` transaction: concurrent charges are serialised and cannot overspend.

    The hash chain detects an entry edited, deleted or inserted by hand, and edited settings.
    It has no secret key: someone who can write the file and rewrites every later hash and the
    head can forge a consistent history. Protect the file with permissions and, to detect a
    rewrite, keep :attr:`head` somewhere else and pass it to :meth:`verify`.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "ledger.sqlite")
    >>> ledger = PrivacyLedger(path, dataset="survey-2026", epsilon=2.0, delta=1e-6, n_rows=500)
    >>> ledger.spent().epsilon
    0.0
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        dataset: str,
        epsilon: float | None = None,
        delta: float | None = None,
        n_rows: int | None = None,
        neighbouring: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"`path` must be a str or os.PathLike. Found {type(path).__name__}.")
        if not isinstance(dataset, str) or not dataset.strip():
            raise ValueError(f"`dataset` must be a non-empty str naming the data set. Found {dataset!r}.")
        given = {
            "epsilon": None if epsilon is None else check_finite_positive("epsilon", epsilon),
            "delta": None if delta is None else check_unit_interval_open("delta", delta),
            "n_rows": None if n_rows is None else check_positive_int("n_rows", n_rows),
            "neighbouring": None if neighbouring is None else check_neighbouring("neighbouring", neighbouring),
        }
        timeout = check_finite_positive("timeout", timeout)
        path = os.fspath(path)
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"`path` must be a file in an existing directory. Found {path!r}.")
        if given["neighbouring"] == "add_remove" and given["n_rows"] is not None:
            raise ValueError(
                "`n_rows` must be omitted under add_remove neighbours (N is private there and the ledger file "
                f"would record it). Found {given['n_rows']}."
            )
        self.path = path
        self.dataset = dataset
        self.timeout = timeout
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            settings = self._creation_settings(given)  # validated before the file is made
            self._create(settings)
        settings = self._open_and_check(given)
        super().__init__(settings["epsilon"], settings["delta"], settings["n_rows"], settings["neighbouring"])
        self.created = settings["created"]

    # -- creating and opening ----------------------------------------------------------------
    def _creation_settings(self, given: dict[str, Any]) -> dict[str, Any]:
        missing = [k for k in ("epsilon", "delta") if given[k] is None]
        neighbouring = given["neighbouring"] or "substitute"
        if neighbouring == "substitute" and given["n_rows"] is None:
            missing.append("n_rows")
        if missing:
            raise ValueError(
                f"`{missing[0]}` must be given to create the ledger {self.path!r} (a new ledger fixes "
                f"epsilon, delta{', n_rows' if neighbouring == 'substitute' else ''} and neighbouring). Found None."
            )
        return {
            "format": LEDGER_FORMAT,
            "dataset": self.dataset,
            "epsilon": given["epsilon"],
            "delta": given["delta"],
            "n_rows": given["n_rows"] if neighbouring == "substitute" else None,
            "neighbouring": neighbouring,
            "created": _utc_now(),
            "versions": versions(),
        }

    def _create(self, settings: dict[str, Any]) -> None:
        settings_json = canonical_json(settings)
        with self._transaction() as conn:
            if _tables(conn):  # another process created it meanwhile: open that one
                return
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO ledger_settings (id, settings) VALUES (1, ?)", (settings_json,))
            conn.execute("INSERT INTO ledger_head (id, count, hash) VALUES (1, 0, ?)", (genesis_hash(settings_json),))

    def _open_and_check(self, given: dict[str, Any]) -> dict[str, Any]:
        with self._reading() as conn:
            settings = self._settings(conn)
            self._verified_entries(conn, settings)
        if settings["dataset"] != self.dataset:
            raise ValueError(
                f"`dataset` must be {settings['dataset']!r}, the data set the ledger {self.path!r} was created for. "
                f"Found {self.dataset!r}."
            )
        for key, value in given.items():
            if value is not None and value != settings[key]:
                raise ValueError(
                    f"`{key}` must be {settings[key]!r}, fixed when the ledger {self.path!r} was created "
                    f"(omit it to use the file's). Found {value!r}."
                )
        return settings

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def _in_transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        """A connection inside one transaction opened by ``begin``: committed at the end, rolled back on an error."""
        with self._connection() as conn:
            conn.execute(begin)
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _reading(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One read transaction: the settings, entries and head are read from one snapshot."""
        return self._in_transaction("BEGIN")

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One write transaction: SQLite's write lock is held from the first read to the commit."""
        return self._in_transaction("BEGIN IMMEDIATE")

    def _settings(self, conn: sqlite3.Connection) -> dict[str, Any]:
        try:
            tables = _tables(conn)
        except sqlite3.DatabaseError as error:
            raise LedgerIntegrityError(f"The file {self.path!r} is not an SQLite privacy ledger ({error}).") from None
        if tables != _TABLES:
            raise LedgerIntegrityError(
                f"The file {self.path!r} is not a pymc-dp privacy ledger: it must hold the tables {sorted(_TABLES)}. "
                f"Found {sorted(tables)}."
            )
        rows = conn.execute("SELECT settings FROM ledger_settings").fetchall()
        if len(rows) != 1:
            raise self._broken("its settings row is missing")
        try:
            settings = json.loads(rows[0][0])
        except json.JSONDecodeError:
            raise self._broken("its settings are not valid JSON") from None
        if not isinstance(settings, dict) or settings.get("format") != LEDGER_FORMAT:
            raise self._broken(f"its settings must be of format {LEDGER_FORMAT}")
        settings["_json"] = rows[0][0]
        return settings

    def _broken(self, what: str) -> LedgerIntegrityError:
        return LedgerIntegrityError(
            f"The privacy ledger {self.path!r} fails its integrity check: {what}. It was edited outside pymc-dp, "
            "truncated or damaged; nothing was charged. Restore it from a copy (its spend cannot be trusted)."
        )

    def _verified_entries(self, conn: sqlite3.Connection, settings: dict[str, Any] | None = None) -> list[LedgerEntry]:
        """Every entry, after checking the whole chain and the head."""
        settings = self._settings(conn) if settings is None else settings
        if canonical_json({k: v for k, v in settings.items() if k != "_json"}) != settings["_json"]:
            raise self._broken("its settings are not in canonical form")
        prev = genesis_hash(settings["_json"])
        entries = []
        rows = conn.execute("SELECT seq, label, utc, entry, prev_hash, hash FROM ledger_entries ORDER BY seq")
        for position, (seq, label, utc, text, prev_hash, digest) in enumerate(rows, start=1):
            if seq != position:
                raise self._broken(f"entry {position} is missing (the next entry is number {seq})")
            if prev_hash != prev:
                raise self._broken(f"entry {seq} does not follow entry {seq - 1} (previous hash differs)")
            if entry_hash(prev, text) != digest:
                raise self._broken(f"entry {seq}'s hash does not match its contents")
            try:
                data = json.loads(text)
                events = tuple(event_from_dict(e) for e in data["events"])
                ok = data["seq"] == seq and data["label"] == label and data["utc"] == utc
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise self._broken(f"entry {seq} cannot be read") from None
            if not ok:
                raise self._broken(f"entry {seq}'s columns differ from its hashed contents")
            entries.append(
                LedgerEntry(
                    seq, utc, label, events, float(data["epsilon_after"]), data["method"], data["versions"], digest
                )
            )
            prev = digest
        head = conn.execute("SELECT count, hash FROM ledger_head").fetchall()
        if head != [(len(entries), prev)]:
            raise self._broken(f"its head does not match its {len(entries)} entries (the last entries were deleted?)")
        return entries

    # -- the budget interface ----------------------------------------------------------------
    def history(self) -> LedgerHistory:
        """Every charge, oldest first, after checking the file (a table when printed)."""
        with self._reading() as conn:
            return LedgerHistory(self._verified_entries(conn))

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """All events charged so far, read from the file."""
        return tuple(e for entry in self.history() for e in entry.events)

    @property
    def labels(self) -> tuple[str, ...]:
        """Labels of the charged runs, in order, read from the file."""
        return tuple(entry.label for entry in self.history())

    @property
    def head(self) -> tuple[int, str]:
        """(number of entries, last chain hash): keep it elsewhere to detect a rewritten file later."""
        entries = self.history()
        if entries:
            return len(entries), entries[-1].hash
        with self._reading() as conn:
            return 0, genesis_hash(self._settings(conn)["_json"])

    def charge(self, events: list[PrivacyEvent] | tuple[PrivacyEvent, ...], label: str = "run") -> PrivacySpent:
        """Check ``events`` against the ledger and write them, in one transaction; on refusal nothing is written.

        Raises
        ------
        PrivacyBudgetExceededError
            When the whole history and ``events`` exceed ε. Nothing is written.
        LedgerIntegrityError
            When the file fails its check. Nothing is written.
        """
        events = tuple(events)
        event_json = [e.to_dict() for e in events]  # fails on a non-event before the lock is taken
        label = str(label)
        with self._transaction() as conn:
            entries = self._verified_entries(conn)
            held = tuple(e for entry in entries for e in entry.events)
            after = self._compose(held + events)
            if after.epsilon > self.epsilon:
                raise self._refusal(after, self._compose(held).epsilon)
            seq, utc = len(entries) + 1, _utc_now()
            prev = entries[-1].hash if entries else genesis_hash(self._settings(conn)["_json"])
            text = canonical_json(
                {
                    "seq": seq,
                    "utc": utc,
                    "label": label,
                    "events": event_json,
                    "epsilon_after": after.epsilon,
                    "method": after.method,
                    "versions": versions(),
                }
            )
            digest = entry_hash(prev, text)
            conn.execute(
                "INSERT INTO ledger_entries (seq, label, utc, entry, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?)",
                (seq, label, utc, text, prev, digest),
            )
            conn.execute("UPDATE ledger_head SET count = ?, hash = ? WHERE id = 1", (seq, digest))
        return after

    def verify(self, head: tuple[int, str] | None = None) -> PrivacySpent:
        """Check the file, recompose ε after every entry and compare with what was recorded; return the spend.

        Parameters
        ----------
        head : (int, str), optional
            A :attr:`head` kept elsewhere earlier: the file must still hold that entry, with that
            hash, at that position (a rewritten history fails).

        Raises
        ------
        LedgerIntegrityError
            When the chain is broken, a recorded ε differs from its recomposition, or ``head``
            is not in the file.
        """
        entries = self.history()
        if head is not None:
            count, digest = head
            ok = count == 0 or (0 < count <= len(entries) and entries[count - 1].hash == digest)
            if not ok:
                raise self._broken(f"it does not hold the head {head!r} kept earlier (its history was rewritten)")
        held: tuple[PrivacyEvent, ...] = ()
        for entry in entries:
            held = held + entry.events
            epsilon = self._compose(held).epsilon
            if not math.isclose(epsilon, entry.epsilon_after, rel_tol=1e-9, abs_tol=0.0):
                raise LedgerIntegrityError(
                    f"Entry {entry.seq} of the privacy ledger {self.path!r} records ε = {entry.epsilon_after!r}, but "
                    f"the history up to it composes to ε = {epsilon!r} with this installation (the entry was priced "
                    f"by {entry.versions}). Either the file was edited or the accountant changed between versions; "
                    "report the larger ε."
                )
        return self._compose(held)

    def __repr__(self) -> str:
        return (
            f"PrivacyLedger({self.path!r}, dataset={self.dataset!r}, epsilon={self.epsilon:g}, delta={self.delta:g}, "
            f"n_rows={self.n_rows}, neighbouring={self.neighbouring!r}, "
            f"spent={format_epsilon(self.spent().epsilon, 6)}, runs={len(self.labels)})"
        )


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")

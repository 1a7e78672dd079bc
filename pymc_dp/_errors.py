"""Errors raised while a run reads the data carry no values computed from the data.

PyMC's own messages may hold such values: ``SamplingError`` ("Initial evaluation of model at
starting point failed!") lists every term's log density at the start, observed variables
included, and NUTS's divergence and tuning messages quote energies. Such an error reaching
the caller would release them unclipped and unnoised (privacy contract, rule 3). A run wraps
the part that reads data in :func:`data_free_errors`: an exception raised by pymc-dp's own
code passes unchanged (its messages are written to hold public settings only, and tested for
it), and so does an ``ImportError`` (its text names a missing module, e.g. matplotlib for
PyMC 6's progress bar); any other is replaced by a :class:`PrivateRunError` that names its type
and where it was raised, never its text, and does not chain to it.

Python chains an exception raised while another is handled to it (``__context__``), even
with ``raise ... from None``, which only hides it from the printed traceback. So the
withheld exception is emptied in place (its arguments, notes, attributes and traceback),
and every public entry point that reads data is wrapped in :func:`withholds_chains`, which
drops the link (``__context__ = None``) from every exception whose context was suppressed
before it reaches the caller.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["PrivateRunError", "data_free_errors", "drop_withheld_context", "withholds_chains"]

_F = TypeVar("_F", bound=Callable[..., Any])

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


class PrivateRunError(RuntimeError):
    """A run failed after reading the data; the original message is withheld (it may hold data values).

    ``original_type`` is the withheld exception's class name and ``location`` the
    ``file:line`` of the code that raised it (public: both come from the code, not the data).
    """

    def __init__(self, message: str, original_type: str, location: str) -> None:
        super().__init__(message)
        self.original_type = original_type
        self.location = location


def _raised_in_package(error: BaseException) -> tuple[bool, str]:
    tb = error.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False, "unknown"
    filename = os.path.abspath(last.tb_frame.f_code.co_filename)
    location = f"{os.path.basename(filename)}:{last.tb_lineno}"
    return filename.startswith(_PACKAGE + os.sep), location


@contextlib.contextmanager
def data_free_errors(what: str) -> Iterator[None]:
    """Re-raise any exception from outside pymc-dp as a :class:`PrivateRunError` without its text.

    Parameters
    ----------
    what : str
        What was running (public), for the message, e.g. ``"pm.sample"``.
    """
    try:
        yield
    except ImportError as error:
        # Raised by the import system (a missing or broken optional dependency): its text names a
        # module and a file path, which come from the environment, not from the data; withheld,
        # the user would not learn which package to install. Whatever it was raised while handling
        # (an implicit __context__, possibly a PyMC error quoting log densities) is dropped.
        error.__cause__ = None
        error.__context__ = None
        error.__suppress_context__ = True
        raise
    except Exception as error:
        inside, location = _raised_in_package(error)
        if inside:
            drop_withheld_context(error)
            raise
        name = type(error).__name__
        _empty(error)
        raise PrivateRunError(
            f"{what} failed after reading the data with {name} (raised at {location}). Its message is withheld: "
            "it may hold values computed from the data (PyMC's messages quote log densities at the start point). "
            "Reproduce it on synthetic data of the same shape to see the full error.",
            name,
            location,
        ) from None


def _empty(error: BaseException) -> None:
    """Remove from ``error`` everything that may hold data: arguments, notes, attributes, traceback, chain."""
    error.args = ()
    error.__traceback__ = None
    error.__cause__ = None
    error.__context__ = None
    error.__suppress_context__ = True
    with contextlib.suppress(AttributeError, TypeError):
        vars(error).clear()  # PyTensor's errors keep the failing node and its inputs; also __notes__


def drop_withheld_context(error: BaseException) -> None:
    """Unlink every exception in ``error``'s chain from a context it suppresses (``raise ... from None``).

    A suppressed context is one whose text was withheld on purpose; it stays reachable as
    ``__context__`` unless the link is cut. Links that are shown (no ``from None``) are kept.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__suppress_context__:
            current.__context__ = None
        current = current.__cause__ if current.__cause__ is not None else current.__context__


def withholds_chains(function: _F) -> _F:
    """Decorate a public entry point: exceptions leave it without links to the errors they withhold.

    The re-raise (``raise`` without an argument) keeps the exception and its traceback and
    sets no new context, so what the caller catches has ``__context__ is None`` wherever its
    context was suppressed (:func:`drop_withheld_context`).
    """

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except BaseException as error:
            drop_withheld_context(error)
            raise

    return wrapper  # type: ignore[return-value]

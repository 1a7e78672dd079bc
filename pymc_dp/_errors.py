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
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["PrivateRunError", "data_free_errors"]

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
            raise
        name = type(error).__name__
        raise PrivateRunError(
            f"{what} failed after reading the data with {name} (raised at {location}). Its message is withheld: "
            "it may hold values computed from the data (PyMC's messages quote log densities at the start point). "
            "Reproduce it on synthetic data of the same shape to see the full error.",
            name,
            location,
        ) from None

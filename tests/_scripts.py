"""Run a repository script's ``main()`` in the test process, as ``python path *argv`` would (tests only)."""

import importlib.util
import sys
from pathlib import Path

from _doc_blocks import ROOT


def run_script_in_process(path: str, argv: list[str], capsys, monkeypatch) -> str:
    """Run the script at ``path`` (from the repository root) as ``python path *argv`` runs it; return its output.

    A script's body is its ``main()``, which its ``__main__`` guard alone calls (checked here). In-process,
    a test does not pay a second interpreter's start and PyMC import (about 3 CPU-s a run), and the
    script's warnings are errors here as in every test.
    """
    source = (ROOT / path).read_text()
    assert '\nif __name__ == "__main__":\n    main()\n' in source, f"{path} does not run main() as a script"
    spec = importlib.util.spec_from_file_location(f"script_{Path(path).stem}", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [path, *argv])
    capsys.readouterr()  # what came before is not the script's
    module.main()
    return capsys.readouterr().out

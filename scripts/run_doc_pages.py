"""Run the ```python blocks of README.md and every docs/*.md page, as written, at a small size.

The documentation build (``scripts/build_docs.sh``) calls this once, so every page is executed once
per CI run (the tutorials are executed by MyST-NB in the same build; the test suite checks the
pages' structure but does not run them again). Each page's blocks run in order in one fresh
interpreter (a block may use what an earlier block of its page defined), cut down by
``tests/_doc_blocks.py`` (draws, tune, chains, fit and sample sizes), with PyMC's default progress
bar on. Pages run ``--jobs`` at a time; a page that fails prints the end of its error output and the
script exits 1 after every page has been tried.

Usage::

    python scripts/run_doc_pages.py                    # every page, one per core
    python scripts/run_doc_pages.py docs/ledger.md     # some pages
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_doc_blocks", ROOT / "tests" / "_doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doc_blocks)

# Pages that need an optional dependency (in the test extra), skipped with a message where it is missing.
OPTIONAL = {"docs/jax.md": "jax"}
TIMEOUT_S = 600


def runnable_pages() -> list[str]:
    """README.md and the docs/*.md pages that have a runnable block, relative to the repository root."""
    return [p.relative_to(ROOT).as_posix() for p in doc_blocks.pages() if doc_blocks.runnable_blocks(p)]


def run_page(page: str) -> tuple[str, bool, float, str]:
    """Run one page's blocks in a fresh interpreter: (page, passed, seconds, error text, skip reason or "")."""
    module = OPTIONAL.get(page)
    if module is not None and importlib.util.find_spec(module) is None:
        return page, True, 0.0, f"skipped: needs `{module}`"
    env = {**os.environ, "MPLBACKEND": "Agg"}  # no display in CI
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-c", doc_blocks.script(ROOT / page)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return page, False, time.perf_counter() - start, f"did not finish within {TIMEOUT_S} s"
    passed = result.returncode == 0
    return page, passed, time.perf_counter() - start, "" if passed else result.stderr[-4000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", help="pages to run (default: README.md and every docs/*.md page)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pages run at a time")
    args = parser.parse_args(argv)
    pages = args.pages or runnable_pages()
    unknown = sorted(set(pages) - set(runnable_pages()))
    if unknown:
        parser.error(f"pages must be README.md or docs/*.md pages with a runnable block; got {unknown}")
    start = time.perf_counter()
    failed = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for page, passed, seconds, text in pool.map(run_page, pages):
            note = f" ({text})" if passed and text else ""
            print(f"{'ok  ' if passed else 'FAIL'} {page:32s} {seconds:6.1f} s{note}", flush=True)
            if not passed:
                failed.append(page)
                print(text, file=sys.stderr)
    print(f"{len(pages) - len(failed)} of {len(pages)} pages ran in {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

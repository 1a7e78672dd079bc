"""The README and every docs page run as written (at a small size, progress bars on).

Every ```python block of README.md and of every ``docs/*.md`` page is run (tests/_doc_blocks.py
finds and cuts them down; .ci/run uses the same module to run the README's first block right
after a bare ``pip install -e .``). The blocks of one page run in order in one fresh interpreter,
so a block may use what an earlier block of the same page defined (each page's first block
builds its own model). A block right after a ``<!-- no-run -->`` comment is skipped. Sizes are
cut down by rewriting the literal ``draws=``, ``tune=``, ``chains=``, ``fit(n=`` and ``.sample(``
arguments; PyMC's default progress bar stays on, so a progress-bar dependency missing from a
fresh install fails here.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest
from _doc_blocks import NO_RUN, README, ROOT, pages, runnable_blocks, script, shrink


def run_python(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg"}  # no display in CI
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_every_docs_page_is_collected_and_blocks_are_cut_down(tmp_path):
    collected = pages()
    for name in ("plain_pymc.md", "barker.md", "dpadvi.md", "exponential_family.md"):
        assert ROOT / "docs" / name in collected
    assert len(runnable_blocks(README)) >= 2
    assert shrink("pmdp.sample(draws=2000, tune=1000, chains=4)") == "pmdp.sample(draws=20, tune=20, chains=2)"
    assert shrink("draws=10_000, tune=1_000") == "draws=20, tune=20"
    assert shrink(".fit(2000, model=model); approx.sample(1000)") == ".fit(50, model=model); approx.sample(20)"
    probe = tmp_path / "probe.md"
    probe.write_text(f"{NO_RUN}\n```python\nskipped()\n```\n\n```python\nran()\n```\n\n```python\nnext()\n```\n")
    assert runnable_blocks(probe) == ["ran()\n", "next()\n"]
    assert script(probe, first_only=True) == "ran()\n"


# Pages allowed a ``<!-- no-run -->`` block, each with the reason it cannot run at a small size.
# docs/dpadvi.md's DPADVI-then-chain block runs on the page's own synthetic model.
SKIPPED: dict[str, str] = {
    "dask.md": "the `Client(address)` block connects to an existing scheduler, which a test machine does not have",
}


def test_a_skipped_block_says_why():
    skipped = {p.name for p in pages() if NO_RUN in p.read_text(encoding="utf-8")}
    assert skipped == set(SKIPPED)


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in pages() if runnable_blocks(p)])
def test_page_python_blocks_run(page):
    if page == "docs/jax.md":  # the JAX backend's page needs the optional `jax` (in the test extra)
        pytest.importorskip("jax")
    result = run_python(["-c", script(ROOT / page)])
    assert result.returncode == 0, f"{page} failed:\n{result.stderr[-4000:]}"


def test_readme_quick_start_command_runs():
    commands = re.findall(r"&& (python examples/quickstart\.py[^\n`]*)", README.read_text())
    assert commands, "the README's quick-start command line was not found"
    argv = shlex.split(commands[0])[1:]
    out = run_python([*argv, "--rows", "2000", "--draws", "50", "--tune", "50"]).stdout
    spent = re.search(r"Privacy spent: epsilon = ([0-9.]+) at delta = (\S+)", out)
    assert spent, out[-2000:]
    assert float(spent.group(1)) <= 4.0 and spent.group(1).count(".") == 1 and len(spent.group(1)) <= 6
    assert "Groups in the DP result: ['posterior', 'sample_stats']" in out

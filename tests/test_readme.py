"""The README's quick-start command runs, and the rules that run README.md and docs/*.md as written.

Every ```python block of README.md and of every ``docs/*.md`` page is run once per CI run, by the
documentation build (scripts/build_docs.sh calls scripts/run_doc_pages.py; the tutorials are executed
by MyST-NB in the same build), not again here: the blocks of one page run in order in one fresh
interpreter, cut down by tests/_doc_blocks.py (the literal ``draws=``, ``tune=``, ``chains=``,
``fit(n=`` and ``.sample(`` arguments), with PyMC's default progress bar on. A block right after a
``<!-- no-run -->`` comment is skipped. .ci/run also runs the README's first block right after a bare
``pip install -e .`` on both Python lines. Here: the cutting-down and skipping rules, that every page
is found by the runner, and the README's quick-start command line at a small size.
"""

import importlib.util
import re
import shlex

from _doc_blocks import NO_RUN, README, ROOT, SKIPPED, pages, runnable_blocks, script, shrink
from _scripts import run_script_in_process


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


def test_a_skipped_block_says_why():
    skipped = {p.name for p in pages() if NO_RUN in p.read_text(encoding="utf-8")}
    assert skipped == set(SKIPPED)


def test_the_page_runner_runs_every_page_with_a_block():
    spec = importlib.util.spec_from_file_location("run_doc_pages", ROOT / "scripts" / "run_doc_pages.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    expected = [p.relative_to(ROOT).as_posix() for p in pages() if runnable_blocks(p)]
    assert runner.runnable_pages() == expected and "README.md" in expected and len(expected) >= 10
    assert "scripts/run_doc_pages.py" in (ROOT / "scripts" / "build_docs.sh").read_text()


def test_readme_quick_start_command_runs(capsys, monkeypatch):
    commands = re.findall(r"&& (python examples/quickstart\.py[^\n`]*)", README.read_text())
    assert commands, "the README's quick-start command line was not found"
    script_path, *argv = shlex.split(commands[0])[1:]
    # The smallest run that still goes through every step the README promises (plan, release, NUTS on the
    # release, the non-private comparison, the printout): one chain of 20 + 20 NUTS iterations. Measured on 3.11
    # under load, one run each: 57 s CPU against 71 s for two chains of 50 + 50 (mixing is not what is checked).
    # The script runs in this process, as its `__main__` guard runs it (issue 38: no second interpreter's start and
    # imports, and this process's compile caches and gcc flags; with empty caches, CPU-s of this test 38.6 -> 30.8
    # on Python 3.11 and 38.2 -> 32.8 on 3.12), its warnings errors as in every test. That a bare `pip install -e .`
    # runs the README as a user's would is .ci/run's check (the top snippet, in a fresh venv, outside the clone).
    out = run_script_in_process(
        script_path, [*argv, "--rows", "2000", "--draws", "20", "--tune", "20", "--chains", "1"], capsys, monkeypatch
    )
    spent = re.search(r"Privacy spent: epsilon = ([0-9.]+) at delta = (\S+)", out)
    assert spent, out[-2000:]
    assert float(spent.group(1)) <= 4.0 and spent.group(1).count(".") == 1 and len(spent.group(1)) <= 6
    assert "Groups in the DP result: ['posterior', 'sample_stats']" in out

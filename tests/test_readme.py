"""The README and the docs pages it links run as written (at a small size, progress bars on).

Every ```python block of README.md, and of each ``docs/*.md`` page the README names, is run;
the blocks of one page run in order in one fresh interpreter, so a block may use what an earlier
block of the same page defined (the README's first block builds its own model). A block right
after a ``<!-- no-run -->`` comment is skipped. Sizes are cut down by rewriting the literal
``draws=``, ``tune=``, ``chains=``, ``fit(n=`` and ``.sample(`` arguments; PyMC's default progress
bar stays on, so a progress-bar dependency missing from a fresh install fails here.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NO_RUN = "<!-- no-run -->"
BLOCK = re.compile(r"^(?P<marker><!-- no-run -->\n)?```python\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)
SMALL = [
    (re.compile(r"\bdraws=\d+"), "draws=20"),
    (re.compile(r"\btune=\d+"), "tune=20"),
    (re.compile(r"\bchains=\d+"), "chains=2"),
    (re.compile(r"\bfit\(n=\d+"), "fit(n=50"),
    (re.compile(r"\bfit\(\d+"), "fit(50"),
    (re.compile(r"\.sample\(\d+\)"), ".sample(20)"),
]


def linked_pages() -> list[Path]:
    """README.md and the docs pages whose path it names."""
    names = sorted(set(re.findall(r"docs/[A-Za-z0-9_]+\.md", README.read_text())))
    return [README, *(ROOT / name for name in names)]


def runnable_blocks(page: Path) -> list[str]:
    return [m["code"] for m in BLOCK.finditer(page.read_text()) if not m["marker"]]


def shrink(code: str) -> str:
    for pattern, replacement in SMALL:
        code = pattern.sub(replacement, code)
    return code


def run_python(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg"}  # no display in CI
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_readme_links_pages_and_has_runnable_blocks(tmp_path):
    pages = linked_pages()
    assert ROOT / "docs" / "plain_pymc.md" in pages
    assert len(runnable_blocks(README)) >= 2
    assert shrink("pmdp.sample(draws=2000, tune=1000, chains=4)") == "pmdp.sample(draws=20, tune=20, chains=2)"
    probe = tmp_path / "probe.md"
    probe.write_text(f"{NO_RUN}\n```python\nskipped()\n```\n\n```python\nran()\n```\n")
    assert runnable_blocks(probe) == ["ran()\n"]


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in linked_pages() if runnable_blocks(p)])
def test_page_python_blocks_run(page):
    blocks = runnable_blocks(ROOT / page)
    script = "\n\n".join(shrink(code) for code in blocks)
    result = run_python(["-c", script])
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

"""The ```python blocks of README.md and docs/*.md, cut down to a test size.

Used by scripts/run_doc_pages.py (every block of every page, run once per CI run by the docs
build), by tests/test_readme.py (the cutting-down and skipping rules) and by .ci/run, which runs the
README's first block right after the README's install command in a fresh virtual environment, where
nothing but ``pip install -e .`` is installed: this module needs only the standard library.

Command line: ``python tests/_doc_blocks.py PAGE [--first]`` prints the page's runnable blocks
(or only the first), joined and cut down, ready to be run by ``python FILE``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NO_RUN = "<!-- no-run -->"
BLOCK = re.compile(r"^(?P<marker><!-- no-run -->\n)?```python\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)
# Literal sizes rewritten to a test size (digits may be grouped with underscores: draws=10_000).
SMALL = [
    (re.compile(r"\bdraws=[\d_]+"), "draws=20"),
    (re.compile(r"\btune=[\d_]+"), "tune=20"),
    (re.compile(r"\bchains=[\d_]+"), "chains=2"),
    (re.compile(r"\bfit\(n=[\d_]+"), "fit(n=50"),
    (re.compile(r"\bfit\([\d_]+"), "fit(50"),
    (re.compile(r"\.sample\([\d_]+\)"), ".sample(20)"),
]
# Pages allowed a ``<!-- no-run -->`` block, each with the reason it cannot run at a small size
# (tests/test_readme.py checks that no other page skips a block).
SKIPPED: dict[str, str] = {
    "dask.md": "the `Client(address)` block connects to an existing scheduler, which a test machine does not have",
    "centred.md": "the usage sketch takes the reader's model, θ̂, κ and budget (named in the text), not data of its own",
    "exponential_family.md": "the grouped-release sketch takes the reader's X, y and group arrays, not data of its own",
}


def pages() -> list[Path]:
    """README.md and every docs/*.md page (linked from the README or not)."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def runnable_blocks(page: Path) -> list[str]:
    """The page's ```python blocks in order, less any right after a ``<!-- no-run -->`` line."""
    return [m["code"] for m in BLOCK.finditer(page.read_text(encoding="utf-8")) if not m["marker"]]


def shrink(code: str) -> str:
    """``code`` with its literal draws/tune/chains/fit/sample sizes cut down (see :data:`SMALL`)."""
    for pattern, replacement in SMALL:
        code = pattern.sub(replacement, code)
    return code


def script(page: Path, first_only: bool = False) -> str:
    """The page's runnable blocks, cut down and joined into one script."""
    blocks = runnable_blocks(page)
    if not blocks:
        raise ValueError(f"{page} has no runnable ```python block.")
    return "\n\n".join(shrink(code) for code in (blocks[:1] if first_only else blocks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="a Markdown page, e.g. README.md")
    parser.add_argument("--first", action="store_true", help="only the page's first runnable block")
    args = parser.parse_args()
    print(script(args.page, first_only=args.first))


if __name__ == "__main__":
    main()

"""The documentation site's sources are consistent (no Sphinx needed; the build itself is
``scripts/build_docs.sh``, run by .ci/run on Python 3.12).

Every tutorial in docs/tutorials/ is a jupytext-paired MyST notebook that MyST-NB can execute
(the jupytext/kernelspec header), has a ``parameters`` cell that reads PYMC_DP_DOCS_SIZE (small by
default, full on demand) and is listed in the tutorials' toctree; every docs/*.md page is in the
site; the runner of README.md and docs/*.md blocks (scripts/run_doc_pages.py, through
tests/_doc_blocks.py) does not pick up the tutorials, which MyST-NB executes instead.
"""

import re

from _doc_blocks import ROOT, pages

DOCS = ROOT / "docs"
TUTORIALS = sorted(p for p in (DOCS / "tutorials").glob("*.md") if p.name != "index.md")
HEADER = re.compile(r"\A---\njupytext:\n(?:.*\n)*?kernelspec:\n(?:.*\n)*?  name: python3\n---\n")
PARAMETERS = re.compile(r"```\{code-cell\} ipython3\n:tags: \[parameters\]\n\n(?P<code>.*?)```", re.DOTALL)


def toctree_entries(page):
    text = page.read_text(encoding="utf-8")
    entries = []
    for block in re.findall(r"```\{toctree\}\n(.*?)```", text, re.DOTALL):
        entries += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith(":")]
    return entries


def test_every_tutorial_is_an_executable_notebook_with_a_size_parameter():
    assert len(TUTORIALS) >= 10
    for page in TUTORIALS:
        text = page.read_text(encoding="utf-8")
        assert HEADER.match(text), f"{page.name}: no jupytext/kernelspec header"
        cells = PARAMETERS.findall(text)
        assert len(cells) == 1, f"{page.name}: needs exactly one parameters cell, found {len(cells)}"
        assert 'os.environ.get("PYMC_DP_DOCS_SIZE", "small") == "full"' in cells[0], page.name
        assert text.index(":tags: [parameters]") < text.index("import pymc_dp"), f"{page.name}: parameters first"


def test_every_page_is_in_the_site():
    listed = {f"tutorials/{name}" for name in toctree_entries(DOCS / "tutorials" / "index.md")}
    assert listed == {f"tutorials/{p.stem}" for p in TUTORIALS}
    top = set(toctree_entries(DOCS / "index.md"))
    assert {"tutorials/index", "guides", "api", "results", "changelog"} <= top
    guides = set(toctree_entries(DOCS / "guides.md"))
    site_pages = {p.stem for p in DOCS.glob("*.md")} - {"index", "guides", "api", "results", "changelog"}
    assert site_pages == guides, f"docs pages missing from guides.md: {sorted(site_pages - guides)}"


def test_doc_block_tests_leave_the_tutorials_to_myst_nb():
    collected = pages()
    assert all("tutorials" not in p.parts for p in collected)
    assert DOCS / "index.md" in collected and DOCS / "api.md" in collected


def test_the_api_page_lists_every_public_name():
    import pymc_dp

    text = (DOCS / "api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^   (\w+)$", text, re.MULTILINE))
    public = set(pymc_dp.__all__) - {"__version__"}
    assert listed == public, f"missing: {sorted(public - listed)}, unknown: {sorted(listed - public)}"

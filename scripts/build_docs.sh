#!/usr/bin/env bash
# Build the documentation site (docs/ → docs/_build/html) with warnings as errors, executing every
# tutorial notebook (docs/tutorials/*.md, MyST-NB, cached in docs/_build/.jupyter_cache: an unchanged
# notebook is not re-run), then run the ```python blocks of README.md and every docs/*.md page as
# written, at a small size (scripts/run_doc_pages.py, a page per core, beside the sphinx build): every
# page of the site is executed once per build. Needs the docs extra: python -m pip install -e '.[docs]'.
#
#   scripts/build_docs.sh                           # small size (the tutorials' parameter cells), as in CI
#   PYMC_DP_DOCS_SIZE=full scripts/build_docs.sh    # full size (tens of minutes)
#   scripts/build_docs.sh --fresh                   # drop the build and the execution cache first
#
# The size is not part of the cache key: after switching sizes, use --fresh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fresh" ]; then
    rm -rf docs/_build docs/api
elif [ $# -gt 0 ]; then
    echo "usage: $0 [--fresh]" >&2
    exit 2
fi
export PYMC_DP_DOCS_SIZE="${PYMC_DP_DOCS_SIZE:-small}"
# The pages run beside the sphinx build: sphinx executes one notebook at a time (one core), the pages
# a page per core, and neither reads what the other writes (the pages run from the repository root and
# write nothing under docs/). Their report is printed after the build's.
start=$(date +%s)
pages_log=$(mktemp)
trap 'rm -f "$pages_log"' EXIT
python scripts/run_doc_pages.py >"$pages_log" 2>&1 &
pages_pid=$!
sphinx_status=0
python -m sphinx -W --keep-going -b html docs docs/_build/html || sphinx_status=$?
echo "docs built in $(( $(date +%s) - start )) s (size: $PYMC_DP_DOCS_SIZE): docs/_build/html/index.html"
pages_status=0
wait "$pages_pid" || pages_status=$?
cat "$pages_log"
echo "README.md and docs/*.md pages run in $(( $(date +%s) - start )) s (beside the build)"
if [ "$sphinx_status" -ne 0 ]; then echo "the sphinx build failed" >&2; exit "$sphinx_status"; fi
exit "$pages_status"

#!/usr/bin/env bash
# The JAX backend's GPU figures (docs/jax.md) in one run, sized for a short lease on one GPU.
#
#   bash benchmarks/gpu_figures.sh [OUT_DIR]
#
# Each part writes OUT_DIR/<part>.log (default $OUT, else /tmp/gpu_figures) and is cut at its own
# time limit, most wanted first: DPHMC, DPPenaltyMH and DPBarkerMH at N = 10^6 (blocks in lax.scan
# against one call per iteration), DPADVI against d3p (d3p on JAX's threefry: see bench_d3p.py),
# the same at N = 10^7, then the GPU and block tests. Wheels in .whl/ (PyMC and what it needs
# where they are not installed; d3p for its comparison) are installed first into /tmp/site.
# SMALL=1 runs the same parts on small N (a dry run on a CPU); PYTHON picks the interpreter;
# PARTS="d3p tests" runs only the parts named; TESTS narrows the tests' -k expression.
set -u
out=${1:-${OUT:-/tmp/gpu_figures}}
mkdir -p "$out"
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ] && [ -z "${SKIP_WHEELS:-}" ]; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
if [ -n "${SMALL:-}" ]; then
    medium=10000 large=20000 huge=40000 iterations=20
else
    medium=100000 large=1000000 huge=10000000 iterations=256  # a multiple of the blocks of 64
fi

part() {  # part NAME SECONDS COMMAND...: run with a time limit, log to OUT_DIR/NAME.log
    local name=$1 limit=$2
    shift 2
    [ -z "${PARTS:-}" ] || [[ " $PARTS " == *" $name "* ]] || return 0
    echo "== $name ($(date +%T), limit ${limit} s)"
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "   exit $? at $(date +%T)"
    grep -v "^ *$" "$out/$name.log" | grep -iv "warn" | tail -n 25
}

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
part transition_large 160 "$python" benchmarks/bench_jax_transition.py --rows $large --iterations $iterations \
    --hmc-rows 0 --skip "per release"
part dpadvi 90 "$python" benchmarks/bench_dpadvi_jax.py --rows $medium $large --iterations $iterations \
    --backends jax jax-one-call --noise default
part d3p 80 "$python" benchmarks/bench_d3p.py --rows $medium $large $huge --iterations $iterations --rng-suite threefry
part dpadvi_huge 50 "$python" benchmarks/bench_dpadvi_jax.py --rows $huge --iterations $iterations --backends jax \
    --noise default
part transition_huge 170 "$python" benchmarks/bench_jax_transition.py --rows $huge --iterations $iterations \
    --hmc-rows 0 --skip "per release" "tuned" "DPBarkerMH"
part tests 90 "$python" -m pytest -q -p no:cacheprovider tests/test_jax_backend.py \
    -k "${TESTS:-blocks or gpu or whole_transition or linear}"

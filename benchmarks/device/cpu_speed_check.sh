#!/bin/bash
# Issue 37's speed measures on a second x86-64 machine (the device machine's host CPU, not its
# GPU): the predictor side by side (benchmarks/predictor_speed.py) and the exact sweep of
# benchmarks/sweep_3m_space.yaml against a 5,000-trial NSGA-II study, for this checkout and
# main before it. Made for the device tool's machine, which has no package registry: the
# packages it lacks travel as wheels in .whl/ and the baselines as checkouts in .devcarry/.
#
#   bash benchmarks/device/cpu_speed_check.sh NEW_LABEL BASE_DIR BASE_LABEL [BASE0_DIR BASE0_LABEL]
#
# Made here, before the call (both folders ignored through .git/info/exclude, both carried):
#   .whl/: `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12
#          --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64
#          -d .whl optuna==5.1.0 colorlog moocore==0.3.2 platformdirs sqlalchemy alembic mako
#          greenlet cffi pycparser` (what the sweep imports that the device image lacks);
#   .devcarry/base-X/: `git archive X | tar -x` trimmed to dse/, benchmarks/, pyproject.toml and
#          the surrogates/ of the GPUs run (h100_sxm for the predictor; + h200_sxm, a100_sxm
#          for the sweeps), under the tool's 64 MiB.
#
# BASE0 (optional, e.g. 8aa1249) is the first checkout of the side-by-side run (the ratios are
# to it); BASE is main before this work. Every process is pinned to its own core and runs on one
# BLAS/OpenMP thread; the predictor run first, alone (sweeps beside it slowed its workers by up
# to 40% in one round), then the sweeps of the two checkouts at the same time on separate cores,
# alternated twice. Writes machine.txt, predictor_speed.txt, sweeps.txt and the exact sweeps'
# byte comparison (cmp.txt) under $OUT.
set -u
new_label=$1 base=$(cd "$2" && pwd) base_label=$3 base0=${4:-} base0_label=${5:-}
here=$(pwd)
out=${OUT:-/tmp/cpu_speed_out}
mkdir -p "$out"
py=${PY:-python3}
if [ -z "${NO_WHEELS:-}" ] && ls .whl/*.whl > /dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0
pin() { if command -v taskset > /dev/null; then taskset -c "$@"; else shift; "$@"; fi; }
{
  lscpu 2> /dev/null || grep -m1 "model name" /proc/cpuinfo
  nproc
  "$py" -VV
  "$py" -c "import numpy, pandas; print('numpy', numpy.__version__, 'pandas', pandas.__version__)"
  uptime
} > "$out/machine.txt" 2>&1

# the side-by-side predictor run, its workers pinned to core SPEED_CORE (2)
codes=()
[ -n "$base0" ] && codes+=(--code "$(cd "$base0" && pwd)" --label "$base0_label")
codes+=(--code "$base" --label "$base_label" --code "$here" --label "$new_label")
(PYTHONPATH=$here pin "${SPEED_CORE:-2}" "$py" benchmarks/predictor_speed.py --n "${N:-20000}" --rounds "${ROUNDS:-5}" "${codes[@]}" \
  --no-write > "$out/predictor_speed.txt" 2>&1)
echo "predictor_speed rc=$?" >> "$out/predictor_speed.txt"

# one sweep, timed: CODE SAMPLER CORE TAG
sweep() {
  local code=$1 sampler=$2 core=$3 tag=$4 extra=()
  [ "$sampler" = nsga2 ] && extra=(--trials "${TRIALS:-5000}")
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$code" && PYTHONPATH=$code:/tmp/site DSE_SURROGATES=$code/surrogates pin "$core" \
    "$py" -m dse sweep benchmarks/sweep_3m_space.yaml --sampler "$sampler" "${extra[@]}" \
    --out "/tmp/sw-$tag" --no-report -q > "/tmp/sw-$tag.log" 2>&1)
  local rc=$?
  t1=$(date +%s.%N)
  echo "$tag rc=$rc wall_s=$(awk "BEGIN{print $t1 - $t0}")" >> "$out/sweeps.txt"
  [ $rc = 0 ] || tail -20 "/tmp/sw-$tag.log" >> "$out/sweeps.txt"
}
# Bytecode written first for both checkouts: with PYTHONDONTWRITEBYTECODE set (or a read-only
# checkout) every sweep would compile the dse modules from source, ~0.2-0.3 s a run.
for code in "$here" "$base"; do "$py" -m compileall -q "$code/dse" > /dev/null; done
for rep in 1 2; do
  rm -rf /tmp/sw-*-$rep
  if [ $rep = 1 ]; then a=$here; b=$base; la=$new_label; lb=$base_label
  else a=$base; b=$here; la=$base_label; lb=$new_label; fi
  sweep "$a" exact "${CORE_A:-4}" "$la-exact-$rep" & p1=$!
  sweep "$b" exact "${CORE_B:-5}" "$lb-exact-$rep" & p2=$!
  wait $p1 $p2
  sweep "$a" nsga2 "${CORE_A:-4}" "$la-nsga2-$rep" & p1=$!
  sweep "$b" nsga2 "${CORE_B:-5}" "$lb-nsga2-$rep" & p2=$!
  wait $p1 $p2
done
for f in trials.csv exact_front.csv front.csv catalogue.csv trials.parquet; do
  cmp "/tmp/sw-$new_label-exact-1/$f" "/tmp/sw-$base_label-exact-1/$f" > /dev/null \
    && echo "$f identical" || echo "$f DIFFERS"
done > "$out/cmp.txt" 2>&1
uptime >> "$out/machine.txt"

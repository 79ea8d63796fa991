#!/usr/bin/env bash
# The one command for a lent accelerator (bench/README.md, "Accelerator"):
#   device run, carry [".accel"], timeout_s 540:  bash bench/accelerator/check.sh
#   here, toy sizes on the CPU (a slow test runs it): bash bench/accelerator/check.sh --cpu-smoke
# Full mode installs repr_jax and the wheels of bench/accelerator/wheels.sh with --no-index (the
# machine reaches no registry), prints the devices and versions, then runs check.py's five steps,
# each in its own time box; results.json and check.log land in $OUT (a temp folder if unset).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$(mktemp -d)}"
mode=()
if [ "${1:-}" = "--cpu-smoke" ]; then
  mode=(--cpu-smoke --budget 600)
  export JAX_PLATFORMS=cpu
elif [ -n "${1:-}" ]; then
  echo "check.sh: unknown argument '$1' (only --cpu-smoke)" >&2; exit 2
else
  ls .accel/wheels/*.whl >/dev/null 2>&1 \
    || { echo "check.sh: no wheels in .accel/wheels: run bench/accelerator/wheels.sh here and carry .accel" >&2; exit 2; }
  t0=$(date +%s)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/accel-site \
      .accel/wheels/*.whl || exit 1
  export PYTHONPATH="/tmp/accel-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  # repr_jax itself from this tree: an editable install where setuptools allows, else the path.
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
    || echo "check.sh: repr_jax runs from PYTHONPATH ($PWD)"
  echo "installed in $(( $(date +%s) - t0 )) s"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
  mode=(--budget 480)
fi
export PYTHONUNBUFFERED=1
python3 -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())" \
  || exit 1
python3 bench/accelerator/check.py --out "$out" "${mode[@]}"
rc=$?
echo "results: $out/results.json, log: $out/check.log"
exit $rc

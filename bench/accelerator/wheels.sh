#!/usr/bin/env bash
# Downloads into .accel/wheels/ the cp312 manylinux wheels that the lent H200 machine lacks
# (it reaches no package registry): what repr_jax's data pipeline, the default experiment and the
# fast tests import there. Run here, where pip works; then `device run` carries .accel.
#   bash bench/accelerator/wheels.sh        # ~8 MiB; versions pinned to what CI installs
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.accel/wheels
mkdir -p "$dest"
# The machine has jax, flax, optax, orbax, chex, numpy, scipy, pyarrow, matplotlib, pillow, tqdm,
# safetensors, scikit-learn, tensorboard, protobuf, absl, etils, wrapt, attrs, six, cloudpickle,
# requests, tokenizers and pytest(-xdist) already; these are the missing ones and what they need.
wheels=(
  "tensorflow-datasets==4.9.10" "array_record==0.8.6" "grain==0.2.18" "mnist1d==0.0.2.post1"
  "tensorboardX==2.6.5" "simple-parsing==0.1.9" "docstring-parser==0.18.0"
  "tensorflow-metadata==1.21.0" "googleapis-common-protos==1.76.0" "promise==2.3"
  "dm-tree==0.1.10" "immutabledict==4.3.1" "termcolor==3.3.0" "toml==0.10.2"
  "importlib_resources==7.1.0" "portpicker==1.6.0" "pytrec-eval-terrier==0.5.11"
)
platforms=()
for p in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 \
         manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${p}_x86_64")
done
quiet() { "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
for w in "${wheels[@]}"; do
  # A package published only as source (promise) is built here into a pure-Python wheel.
  quiet python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${platforms[@]}" --platform any -d "$dest" "$w" 2>/dev/null \
    || quiet python3 -m pip wheel -q --no-deps -w "$dest" "$w"
done
ls "$dest"
echo "$(du -sm "$dest" | cut -f1) MiB in $dest ($(ls "$dest" | wc -l) wheels)"

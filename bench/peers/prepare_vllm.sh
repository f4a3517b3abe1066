#!/bin/bash
# Fills .gpu/peers/vllm (ignored; carried to the GPU machine) here, where the network is, with only the
# files of vLLM's published source that its TurboQuant decode needs (bench/peers/turboquant_decode.py
# imports them there, with its own stubs for the rest of vLLM): the Triton decode and store kernels, the
# split-KV reduction they reuse, the presets and the Lloyd-Max centroids.
#   bench/peers/prepare_vllm.sh SOURCE [REV (HEAD)]
# SOURCE: a git directory of vLLM (its published repository, vllm-project/vllm; REV picks the commit),
# a vLLM wheel (.whl), or pypi:VERSION (that release's wheel, through pip download).
set -eu
src=${1:?a git directory of vLLM, a vLLM wheel or pypi:VERSION} rev=${2:-HEAD}
cd "$(dirname "$0")/../.."
dest=.gpu/peers/vllm
ops=vllm/v1/attention/ops
tq=vllm/model_executor/layers/quantization/turboquant
needed="$ops/triton_turboquant_decode.py $ops/triton_turboquant_store.py $ops/triton_decode_attention.py
  $tq/config.py $tq/centroids.py"
# Copied where present, for the record: the backend that calls the kernels, and the CUDA kernels that
# some trees carry beside the Triton ones (the script reports them; it runs only what fits the presets).
optional="vllm/v1/attention/backends/turboquant_attn.py $ops/cuda_turboquant_decode.py
  $ops/csrc/tq_decode_warp_per_head.cu $ops/csrc/tq_store_cuda.cu"

rm -rf "$dest" && mkdir -p "$dest"
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
if [[ $src == pypi:* ]]; then
  pip download "vllm==${src#pypi:}" --no-deps --only-binary :all: -d "$tmp" -q
  src=$(ls "$tmp"/vllm-*.whl)
fi
if [[ $src == *.whl ]]; then
  for f in $needed $optional; do unzip -q -o "$src" "$f" -d "$dest" 2>/dev/null || true; done
  unzip -q -o "$src" vllm/_version.py -d "$tmp"
  # The wheel's _version.py names the commit it was built from (setuptools-scm: 'g' + short hash).
  python3 - "$tmp/vllm/_version.py" "$(basename "$src")" > "$dest/COMMIT" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
version = re.search(r"__version__ = version = '([^']+)'", text).group(1)
commit = re.search(r"commit_id = '?([^'\n]+)'?", text).group(1)
print(f"{commit.removeprefix('g')} (vllm {version}, {sys.argv[2]})")
EOF
  unzip -Z1 "$src" | grep -m1 -E '\.dist-info/(licenses/)?LICENSE$' | xargs -r -I{} unzip -q -o -j "$src" {} -d "$dest"
else
  have=$(git --git-dir="$src" ls-tree -r --name-only "$rev" -- $needed $optional)
  git --git-dir="$src" archive "$rev" LICENSE $have | tar -x -C "$dest"
  git --git-dir="$src" rev-parse "$rev" > "$dest/COMMIT"
fi
for f in $needed; do [ -f "$dest/$f" ] || { echo "prepare_vllm: $f is not in $src" >&2; exit 1; }; done
du -sh "$dest" && (cd "$dest" && find . -type f | sort) && echo "vLLM $(cat "$dest/COMMIT")"

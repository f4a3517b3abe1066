#!/bin/bash
# Builds one variant of the library for a side-by-side device call: the bench and test programs of a
# source tree (a git worktree of a branch, say), for sm_90a, with extra nvcc flags (an experiment's
# switch), into .gpu/cvar/NAME/ of this checkout — the bundle layout bench/conv_ab.sh reads.
#
#   bench/build_variant.sh NAME [SRC] [-- NVCC_FLAGS...]
#
# TARGETS (environment) narrows the programs built, e.g. TARGETS="spconv test_sparse_conv" for a conv
# experiment (about half the time on two cores); by default spconv, test_sparse_conv, decode_attention
# and test_attention.
# SRC defaults to this checkout. The build tree is .gpu/build-NAME (kept: a second call rebuilds what
# changed). The programs link the CUDA runtime statically, so they run on the GPU machine as they are:
#   tar -C .gpu -cJf CALL_DIR/bundle.tar.xz cvar/A cvar/B   (then, there: bench/conv_ab.sh BUNDLE ... A B)
set -eu
HERE=$(cd "$(dirname "$0")/.." && pwd)
name=$1; shift
src=$HERE
if [ $# -gt 0 ] && [ "$1" != "--" ]; then src=$(cd "$1" && pwd); shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
flags="$*"
build=$HERE/.gpu/build-$name out=$HERE/.gpu/cvar/$name
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_CUDA_ARCHS=90a -DFRUGAL_PYTHON=OFF \
  -DFRUGAL_TOOLS=OFF "-DCMAKE_CUDA_FLAGS=$flags" > "$build.log" 2>&1 || { tail -20 "$build.log"; exit 1; }
targets=${TARGETS:-spconv test_sparse_conv decode_attention test_attention}
ninja -C "$build" $targets >> "$build.log" 2>&1 || { tail -20 "$build.log"; exit 1; }
mkdir -p "$out"
for t in $targets; do
  case $t in test_*) cp "$build/tests/$t" "$out/";; *) cp "$build/bench/$t" "$out/";; esac
done
echo "$out: $(cd "$src" && git log --oneline -1 2> /dev/null || echo "$src")${flags:+ + $flags}"

#!/usr/bin/env bash
# Packs spconv 2.3.8 (cu126) and what it imports into one xz tarball small enough for a device call
# (the wheel alone is 70.5 MB; unpacked and recompressed the whole set is ~40 MB).
# Usage (here, where pip works): bench/pack_spconv.sh .gpu/spconv
# There: mkdir -p /tmp/site && tar -xJf .gpu/spconv/spconv-site.tar.xz -C /tmp/site &&
#        PYTHONPATH=/tmp/site:<frugal's python dir> python3 bench/spconv_peer.py
set -euo pipefail
dest=${1:?destination folder}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work/whl" spconv-cu126==2.3.8 "cumm-cu126==0.7.11" pccm ccimport fire lark termcolor
mkdir -p "$work/site" "$dest"
for w in "$work"/whl/*.whl; do unzip -q -o "$w" -d "$work/site"; done
tar -cf - -C "$work/site" . | xz -T2 -9e > "$dest/spconv-site.tar.xz"
ls -la "$dest/spconv-site.tar.xz"

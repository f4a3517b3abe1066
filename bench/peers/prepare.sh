#!/bin/bash
# Fills .gpu/peers (ignored; carried to the GPU machine) here, where the network is: FlexGEMM's source
# tree from a git directory of it (its published repository, JeffreyXiang/FlexGEMM) and spconv 2.3.8's
# packed site (bench/pack_spconv.sh, from PyPI), unless already there.
#   bench/peers/prepare.sh FLEXGEMM_GIT_DIR [REV (HEAD)]
set -eu
git_dir=${1:?a git directory of FlexGEMM} rev=${2:-HEAD}
cd "$(dirname "$0")/../.."
dest=.gpu/peers/FlexGEMM
rm -rf "$dest" && mkdir -p "$dest"
git --git-dir="$git_dir" archive "$rev" | tar -x -C "$dest"
rm -rf "$dest/assets"  # the README's figures
git --git-dir="$git_dir" rev-parse "$rev" > "$dest/COMMIT"
[ -f .gpu/peers/spconv-site.tar.xz ] || bash bench/pack_spconv.sh .gpu/peers
du -sh .gpu/peers/* && echo "FlexGEMM $(cat "$dest/COMMIT")"

#!/bin/bash
# The sparse-conv peer benchmarks in one device call: FlexGEMM built from .gpu/peers/FlexGEMM, spconv
# 2.3.8 unpacked from .gpu/peers/spconv-site.tar.xz, frugal's Python module built into BUILD, all at
# once, and FlexGEMM's Triton kernels compiled ahead by PARTS processes while frugal builds; then the
# training step (bench/spconv_train_peer.py) and the forward conv in four row orders (its --forward)
# within TOTAL seconds from the start; the short tables last (the full ones in OUT/tables.md).
#   bash bench/peers/run.sh                         (the call's carry: .gpu/peers)
# TOTAL (480 s): the whole call's budget. TRAIN_SHARE (55): the percentage of what the preparations
# leave that the training rows get. TRAIN_ARGS / FORWARD_ARGS: more arguments for each (e.g. "--rows
# 1024:64"; the precompile gets them too). PRECOMPILE_S (120): the most the precompile may take; 0: none.
# OUT receives the logs, the JSON lines, tables.md and flexgemm_autotune.json (FlexGEMM's tuning on
# this GPU: carried back as .gpu/peers/flexgemm_autotune.json it spares a later call the tuning).
set -u
cd "$(dirname "$0")/../.."
R0=$PWD OUT=${OUT:-/tmp/out} TOTAL=${TOTAL:-480} P=.gpu/peers PARTS=${PARTS:-8} PRE=${PRECOMPILE_S:-120}
B=${BUILD:-.gpu/build}; case $B in /*) ;; *) B=$R0/$B ;; esac
mkdir -p "$OUT"; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
say() { echo "$*" | tee -a "$OUT/info.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/info.txt"
site=/tmp/peer-site; mkdir -p $site
export PYTHONUNBUFFERED=1 PYTHONPATH=$site:/tmp/flexgemm:$B/python:$R0/bench${PYTHONPATH:+:$PYTHONPATH}
export FLEXGEMM_DIR=/tmp/flexgemm FLEXGEMM_COMMIT=$(cat $P/FlexGEMM/COMMIT 2>/dev/null || echo ?)
export FLEX_GEMM_AUTOTUNE_CACHE_PATH=/tmp/flexgemm_autotune.json
if [ -f $P/flexgemm_autotune.json ]; then
  cp $P/flexgemm_autotune.json $FLEX_GEMM_AUTOTUNE_CACHE_PATH; PRE=0; say "FlexGEMM: its autotune cache carried (no precompile)"
fi

(cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_CUDA_ARCHS=${ARCHS:-90a} -DFRUGAL_TOOLS=OFF \
   -DFRUGAL_PYTHON=ON && ninja -C "$B" _frugal frugal_py_sources) > "$OUT/frugal_build.log" 2>&1 &
fpid=$!
precompile() {  # PARTS processes for the training rows and as many for the forward rows, each a share of the configs
  local i
  for i in $(seq 0 $((PARTS - 1))); do
    timeout $((PRE + 30)) python3 bench/spconv_train_peer.py --precompile $i/$PARTS --budget $PRE ${TRAIN_ARGS:-} &
    timeout $((PRE + 30)) python3 bench/spconv_train_peer.py --forward --precompile $i/$PARTS --budget $PRE ${FORWARD_ARGS:-} &
  done
  wait
}
(MAX_JOBS=8 bash bench/peers/build_flexgemm.sh $P/FlexGEMM /tmp/flexgemm && echo "FlexGEMM built t=$(el)s" &&
 if [ "$PRE" -gt 0 ]; then precompile > "$OUT/precompile.log" 2>&1; echo "precompiled t=$(el)s"; fi) \
  > "$OUT/flexgemm_build.log" 2>&1 &
gpid=$!
if [ -f $P/spconv-site.tar.xz ]; then tar -xJf $P/spconv-site.tar.xz -C $site; say "spconv unpacked rc=$? t=$(el)s"
else say "spconv: no $P/spconv-site.tar.xz (bench/pack_spconv.sh makes it)"; fi
wait $fpid; rc=$?; say "frugal module rc=$rc t=$(el)s"
[ $rc -ne 0 ] && { grep -E 'error|Error' -m 20 "$OUT/frugal_build.log"; exit 1; }
wait $gpid; rc=$?; say "FlexGEMM build (+ precompile) rc=$rc t=$(el)s: $(grep -E '^(FlexGEMM built|precompiled)' "$OUT/flexgemm_build.log" | tr '\n' ' ')"
[ $rc -ne 0 ] && tail -15 "$OUT/flexgemm_build.log"
[ -f "$OUT/precompile.log" ] && say "precompile: $(grep -c ': [0-9.]* s$' "$OUT/precompile.log") rows done, $(grep -vc ': [0-9.]* s$' "$OUT/precompile.log") other lines"

left=$((TOTAL - $(el) - 20))
train=$((left * ${TRAIN_SHARE:-55} / 100)); [ $train -lt 10 ] && train=10
timeout $((train + 60)) python3 bench/spconv_train_peer.py --budget $train --out "$OUT/spconv_train_peer.jsonl" \
  ${TRAIN_ARGS:-} > "$OUT/train.log" 2>&1
say "training rows rc=$? t=$(el)s (budget ${train}s)"
left=$((TOTAL - $(el) - 15)); [ $left -lt 10 ] && left=10
timeout $((left + 60)) python3 bench/spconv_train_peer.py --forward --budget $left \
  --out "$OUT/spconv_forward_peer.jsonl" ${FORWARD_ARGS:-} > "$OUT/forward.log" 2>&1
say "forward rows rc=$? t=$(el)s (budget ${left}s)"
[ -f $FLEX_GEMM_AUTOTUNE_CACHE_PATH ] && cp $FLEX_GEMM_AUTOTUNE_CACHE_PATH "$OUT/flexgemm_autotune.json"

grep -h -E 'not run|Error|error' "$OUT/train.log" "$OUT/forward.log" | grep -v '^{' | sort | uniq -c | head -8
python3 bench/spconv_train_peer.py --summary "$OUT/spconv_train_peer.jsonl" "$OUT/spconv_forward_peer.jsonl" > "$OUT/tables.md"
python3 bench/spconv_train_peer.py --short --summary "$OUT/spconv_train_peer.jsonl" "$OUT/spconv_forward_peer.jsonl"

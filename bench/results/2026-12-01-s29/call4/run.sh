#!/bin/bash
# Session 29 call 4: does the stagger's lead last? SW / SW6 (exp-stagger + the FRUGAL_EXP_WAITS diagnostic;
# 4 / 6 weight stages) at FRUGAL_STAGGER_NS 0 / 500 / 2000, C = 64 R = 1024 and 512: per launch, the blocks'
# mean full-wait cycles a unit of warp 0 (first warpgroup) and warp 4 (second), and how far warp 4's loop
# ends trail warp 0's (cycles a unit, same SM clock). Prints the bench's conv_ms beside.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/b4 && tar -xJf bundle.tar.xz -C /tmp/b4
python3 ../../../shells.py 1024 512 > /dev/null
for R in 1024 512; do
  for v in SW SW6; do
    for ns in 0 500 2000; do
      FRUGAL_WAITS=1 FRUGAL_STAGGER_NS=$ns timeout 120 /tmp/b4/cvar/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 \
        --out /tmp/o --mma-only 1 --samples 4096 --reps 5 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
      echo "$v R=$R ns=$ns $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) | $(grep WAITS /tmp/b.err | tail -1)" | tee -a $OUT/waits.txt
    done
  done
done

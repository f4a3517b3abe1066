#!/bin/bash
# Session 25 call 4: the shared A/B and burst tools (bench/conv_ab.sh, bench/conv_burst.py) on their
# first run; S3 (branch exp-s3: 3 weight stages at BN = 64) against main b7cac07 (NB) and 00ce4a5 (M).
cd "$(dirname "$0")"; H=$(pwd); B=$(cd $H/../../../.. && pwd)
bash $B/bench/conv_ab.sh $H/bundle.tar.xz --test S3 --sanitize S3 --rounds 2 M NB S3
python3 $B/bench/conv_burst.py --spconv /tmp/conv_ab_bundle/cvar/NB/spconv --trials 2 > $OUT/burst_table.txt 2>&1
cat $OUT/burst_table.txt

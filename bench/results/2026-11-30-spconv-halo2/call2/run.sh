#!/bin/bash
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/ceiling.txt
./wgmma_ceiling 20000 | tee -a $OUT/ceiling.txt
./wgmma_ceiling 20000 | tee -a $OUT/ceiling2.txt | tail -3

#!/bin/bash
# Session 19 final call (main's head): every test suite, sanitizers on the conv's halo tests, the Python
# module (built here against the carried libfrugal) with pytest, spconv 2.3.8 side by side at C = 128
# (paired bursts), and the C++ bench's defaults. Carried: .gpu/spconv/spconv-site.tar.xz, .gpu/fpy.tar.xz.
cd "$(dirname "$0")"; H=$(pwd); R0=$(cd ../../../.. && pwd); T0=$(date +%s)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
for t in test_core test_kv_codebook test_kv_cache test_sparse_conv test_attention; do
  timeout 240 $X/$t > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/$t.txt | tr "\n" " ") $(grep -cE '^\[  SKIPPED \] [A-Z]' $OUT/$t.txt) skipped t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
  grep -E "^\[  FAILED  \] [A-Z]" $OUT/$t.txt | head -5 >> $OUT/info.txt
done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*:SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.MapEntries*"
timeout 150 compute-sanitizer --tool memcheck $X/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 100 compute-sanitizer --tool racecheck $X/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1) t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
mkdir -p /tmp/fpy /tmp/site && tar -xJf $R0/.gpu/fpy.tar.xz -C /tmp/fpy && tar -xJf $R0/.gpu/spconv/spconv-site.tar.xz -C /tmp/site
cmake -S /tmp/fpy/pyproj -B /tmp/pyb -G Ninja -DCMAKE_PREFIX_PATH=/tmp/fpy/inst -DFRUGAL_SRC=$R0 -DCMAKE_BUILD_TYPE=Release > $OUT/pyb.log 2>&1 && ninja -C /tmp/pyb >> $OUT/pyb.log 2>&1; echo "python module rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cp $R0/python/frugal/*.py /tmp/pyb/frugal/
PYTHONPATH=/tmp/pyb timeout 200 python3 -m pytest -q -p no:cacheprovider $R0/python/tests > $OUT/pytest.log 2>&1; echo "pytest rc=$? $(tail -1 $OUT/pytest.log) t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cd $R0/bench && PYTHONPATH=/tmp/site:/tmp/pyb:$R0/bench timeout 240 python3 spconv_peer.py --rows 196:128,256:128,512:128,1024:128 --rep 5 --back-to-back 10 --paired 5 > $OUT/peer.txt 2>&1; echo "peer rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cd $H
PYTHONPATH=$R0/bench python3 -c "
import torch, shells
for R in (196, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # R C
  timeout 90 $X/spconv --coords /tmp/coords_$1.bin --channels $2 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "R=$1 C=$2 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "R=$1 C=$2 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)" >> $OUT/table.txt
}
for R in 196 512 1024; do run $R 128; done; for R in 512 1024; do run $R 64; done
cat $OUT/info.txt $OUT/table.txt
grep -A7 "calls back to back" $OUT/peer.txt; grep -A7 "Paired bursts" $OUT/peer.txt; grep -E "^ +[0-9]+ +[0-9]+>" $OUT/peer.txt | head -5

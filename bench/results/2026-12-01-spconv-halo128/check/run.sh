#!/bin/bash
# Session 19 check call (main 480a2d9: the device-side decision on a map's first call at Ci > 64): the
# conv's suite and sanitizers, the Python suites (the GPU module built there against the carried
# libfrugal; a CPU-only module built there from source, one compiler, for the CPU suites), spconv side
# by side at C = 128 with the run-to-run bitwise check. Carried: .gpu/spconv, .gpu/fpy.tar.xz.
cd "$(dirname "$0")"; H=$(pwd); R0=$(cd ../../../.. && pwd); T0=$(date +%s)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 200 $X/test_sparse_conv > $OUT/test_sparse_conv.txt 2>&1; echo "test_sparse_conv rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_sparse_conv.txt | tr "\n" " ") t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
grep -E "^\[  FAILED  \] [A-Z]|Failure" -A4 $OUT/test_sparse_conv.txt | head -30 >> $OUT/info.txt
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*:SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.MapEntries*"
timeout 150 compute-sanitizer --tool memcheck $X/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 100 compute-sanitizer --tool racecheck $X/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/test_sparse_conv --gtest_filter="SpconvCudaWgmma.PipelinedHalo*" > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1) t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
mkdir -p /tmp/fpy /tmp/site && tar -xJf $R0/.gpu/fpy.tar.xz -C /tmp/fpy && tar -xJf $R0/.gpu/spconv/spconv-site.tar.xz -C /tmp/site
cmake -S /tmp/fpy/pyproj -B /tmp/pyb -G Ninja -DCMAKE_PREFIX_PATH=/tmp/fpy/inst -DFRUGAL_SRC=$R0 -DCMAKE_BUILD_TYPE=Release > $OUT/pyb.log 2>&1 && ninja -C /tmp/pyb >> $OUT/pyb.log 2>&1; echo "gpu module rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cp $R0/python/frugal/*.py /tmp/pyb/frugal/
cmake -S $R0 -B /tmp/cpub -G Ninja -DFRUGAL_CUDA=OFF -DFRUGAL_TESTS=OFF -DFRUGAL_BENCH=OFF -DFRUGAL_TOOLS=OFF -DFRUGAL_PYTHON=ON -DCMAKE_BUILD_TYPE=Release > $OUT/cpub.log 2>&1 && ninja -C /tmp/cpub >> $OUT/cpub.log 2>&1; echo "cpu module rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
PYTHONPATH=/tmp/cpub/python timeout 120 python3 -m pytest -q -p no:cacheprovider $R0/python/tests > $OUT/pytest_cpu.log 2>&1; echo "pytest (cpu-only module, one compiler) rc=$? $(tail -1 $OUT/pytest_cpu.log)" >> $OUT/info.txt
for f in test_torch test_spconv test_frameworks test_kv; do
  PYTHONPATH=/tmp/pyb timeout 120 python3 -m pytest -q -p no:cacheprovider $R0/python/tests/$f.py > $OUT/pytest_gpu_$f.log 2>&1; echo "pytest $f (gpu module, mixed compilers) rc=$? $(grep -v '^Extension' $OUT/pytest_gpu_$f.log | tail -1 | cut -c1-150)" >> $OUT/info.txt
done
cd $R0/bench && PYTHONPATH=/tmp/site:/tmp/pyb:$R0/bench timeout 200 python3 spconv_peer.py --rows 196:128,512:128,1024:128,512:128:64 --rep 5 --back-to-back 10 --paired 4 > $OUT/peer.txt 2>&1; echo "peer rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cat $OUT/info.txt
grep -A6 "Paired bursts" $OUT/peer.txt | tail -6; grep -E "^ +[0-9]+ +[0-9]+>" $OUT/peer.txt | head -4

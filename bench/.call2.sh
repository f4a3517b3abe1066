B=$PWD/.gpu/build
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_CUDA_ARCHS=90a -DFRUGAL_TOOLS=OFF -DFRUGAL_PYTHON=OFF > $OUT/cmake.log 2>&1
ninja -C $B > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
(nvcc -O3 -std=c++20 -arch=sm_90a -Isrc -Iinclude .gpu/mapv/mapv.cu -o /tmp/mapv > $OUT/mapv.log 2>&1 && /tmp/mapv >> $OUT/mapv.log 2>&1) &
MP=$!
cd $B
( ./tests/test_exact_rows; ./tests/test_attention; ./tests/test_paged ) > $OUT/tests.log 2>&1
./tests/test_parity --gtest_filter='*attention*:*paged*' > $OUT/parity.log 2>&1; echo parity rc $? >> $OUT/parity.log
compute-sanitizer --tool memcheck ./tests/test_exact_rows --gtest_filter='ExactRowsCuda.*' > $OUT/memcheck.log 2>&1; echo memcheck rc $? >> $OUT/memcheck.log
compute-sanitizer --tool racecheck ./tests/test_exact_rows --gtest_filter='ExactRowsCuda.DecodeAttentionF32*:ExactRowsCuda.Large*' > $OUT/racecheck.log 2>&1; echo racecheck rc $? >> $OUT/racecheck.log
wait $MP
./bench/decode_attention --exact 32,4 > $OUT/bench.log 2>&1
./bench/decode_attention --exact 128,4 >> $OUT/bench.log 2>&1
cd $OUT && tar czf logs.tgz *.log
grep -E "^\[  (PASSED|FAILED) |FAILED TEST|Failure" $OUT/tests.log | head
grep -E "PASSED|FAILED|rc" $OUT/parity.log | tail -4
grep -E "ERROR SUMMARY|rc |RACECHECK SUMMARY" $OUT/memcheck.log $OUT/racecheck.log
grep -E "exact rows|only 16" $OUT/bench.log
tail -25 $OUT/mapv.log

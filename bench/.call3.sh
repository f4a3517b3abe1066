B=$PWD/.gpu/build
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_CUDA_ARCHS=90a -DFRUGAL_TOOLS=OFF -DFRUGAL_PYTHON=OFF > $OUT/cmake.log 2>&1
ninja -C $B > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
cd $B
( ./tests/test_exact_rows ) > $OUT/tests.log 2>&1
compute-sanitizer --tool memcheck ./tests/test_exact_rows --gtest_filter='ExactRowsCuda.*' > $OUT/memcheck.log 2>&1; echo memcheck rc $? >> $OUT/memcheck.log
compute-sanitizer --tool racecheck ./tests/test_exact_rows --gtest_filter='ExactRowsCuda.DecodeAttentionF32*:ExactRowsCuda.Large*' > $OUT/racecheck.log 2>&1; echo racecheck rc $? >> $OUT/racecheck.log
./bench/decode_attention --exact 32,4 > $OUT/bench.log 2>&1
./bench/decode_attention --exact 128,4 >> $OUT/bench.log 2>&1
cd $OUT && tar czf logs.tgz *.log
grep -E "^\[  (PASSED|FAILED) |FAILED TEST|Failure" $OUT/tests.log | head
grep -E "ERROR SUMMARY|rc |RACECHECK SUMMARY" $OUT/memcheck.log $OUT/racecheck.log
grep -E "exact rows|only 16" $OUT/bench.log

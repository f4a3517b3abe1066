#!/bin/bash
# attn7's one device call. A/: branch attn7 at b872110 (candidate rule: the bulk ring from work 2^20);
# B/: 31c7239 (the rule as on main; both without the two-stage ring, with the init __syncwarp).
# sm_90a, static cudart, stripped. At most 8 files under $OUT; the table last.
cd "$(dirname "$0")" && tar -xJf bins.tar.xz
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $L
compute-sanitizer --version | tail -1 | tee -a $L
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
# step NAME MAX_SECONDS cmd...: runs under min(MAX, what is left of 225 s); skipped when < 5 s are left.
step() {
  local name=$1 max=$2; shift 2
  local left=$(( 225 - ($(date +%s) - t0) )); local t=$(( max < left ? max : left ))
  if [ $t -lt 5 ]; then echo "== $name: skipped (time)" | tee -a $L; return; fi
  echo "== $name (limit ${t}s, at $(el))" | tee -a $L
  timeout $t "$@"; echo "rc=$? ($(el))" | tee -a $L
}
step "tests A (all)" 50 bash -c "./A/test_attention > $OUT/tests.txt 2>&1"
grep -E "PASSED|FAILED|Failure|rel error vs" $OUT/tests.txt | head -30 | tee -a $L
step "racecheck A, bulk tests" 70 bash -c "compute-sanitizer --tool racecheck ./A/test_attention --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTable*' > $OUT/san.txt 2>&1"
grep -E "PASSED|FAILED|SUMMARY|Race reported|access at" $OUT/san.txt | head -12 | tee -a $L
if ! grep -q "RACECHECK SUMMARY: 0 hazards" $OUT/san.txt; then
  echo "### racecheck hazard report, small test" >> $OUT/san.txt
  step "racecheck A hazards (small)" 25 bash -c "compute-sanitizer --tool racecheck --racecheck-report hazard ./A/test_attention --gtest_filter='*SmallWrappedSlices' 2>&1 | head -400 >> $OUT/san.txt"
fi
step "bench A run 1" 30 bash -c "./A/decode_attention --quick --loops --json $OUT/ours.json > $OUT/bench.txt 2>&1"
step "sdpa" 40 bash -c "python3 torch_sdpa.py --ours $OUT/ours.json --out $OUT > /tmp/sdpa.txt 2>&1"
grep "^SDPA" /tmp/sdpa.txt | tee -a $L
step "memcheck A, bulk tests" 45 bash -c "compute-sanitizer --tool memcheck ./A/test_attention --gtest_filter='DecodeAttentionCuda.F16BulkRing*:DecodeAttentionCuda.F16LoopFallbacks*' >> $OUT/san.txt 2>&1"
grep -E "PASSED|FAILED|SUMMARY" $OUT/san.txt | tail -3 | tee -a $L
step "racecheck A, default paths" 25 bash -c "compute-sanitizer --tool racecheck ./A/test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.RingWrapMixedLengthsAndEmptySequences' >> $OUT/san.txt 2>&1"
grep -E "PASSED|FAILED|SUMMARY" $OUT/san.txt | tail -2 | tee -a $L
step "synccheck A, small bulk" 15 bash -c "compute-sanitizer --tool synccheck ./A/test_attention --gtest_filter='*SmallWrappedSlices' >> $OUT/san.txt 2>&1"
grep -E "PASSED|FAILED|SUMMARY" $OUT/san.txt | tail -2 | tee -a $L
step "tests B (loop tests)" 20 bash -c "./B/test_attention --gtest_filter='DecodeAttentionCuda.F16Loop*:DecodeAttentionCuda.F16BulkRing*' >> $OUT/tests.txt 2>&1"
grep -E "PASSED|FAILED|Failure" $OUT/tests.txt | tail -3 | tee -a $L
step "bench A runs 2, 3" 30 bash -c "./A/decode_attention --quick --loops --json /tmp/o2.json >> $OUT/bench.txt 2>&1; ./A/decode_attention --quick --loops --json /tmp/o3.json >> $OUT/bench.txt 2>&1"
python3 -c "import json; json.dump([json.load(open(f))['rows'] for f in ('/tmp/o2.json','/tmp/o3.json') if __import__('os').path.exists(f)], open('$OUT/runs.json','w'))"
echo "== table ($(el))" | tee -a $L
grep -E "^\|" /tmp/sdpa.txt | head -3 >> $L
python3 summ.py $OUT 2>&1 | tee -a $L

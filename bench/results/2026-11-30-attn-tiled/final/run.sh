#!/bin/bash
# Session 15, final call (main): every suite + memcheck + pytest (gpu_check), memcheck of the warp-specialized conv over
# a few hundred tiles, racecheck of the attention wide loop / GQA / ring tests and of the conv tiny input, the full
# attention table against SDPA fp16, the default conv on the R = 512 / 1024 shells.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $S
OUT=/tmp/gc bash $B/bench_py/gpu_check.sh $B > /tmp/check.txt 2>&1
tail -n 22 /tmp/check.txt >> $S
grep -h "^\[  FAILED" /tmp/gc/*.log 2>/dev/null | head >> $S
timeout 120 compute-sanitizer --tool memcheck $B/tests/test_sparse_conv --gtest_filter='SpconvCudaWgmma.WarpSpecializedOnAFewHundredTiles' > /tmp/mc.log 2>&1; echo "memcheck conv ws few-hundred-tiles rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $S
timeout 150 compute-sanitizer --tool racecheck $B/tests/test_attention --gtest_filter='DecodeAttentionCuda.F16WideTable*:DecodeAttentionCuda.F16PathGqa*:DecodeAttentionCuda.RingWrap*' > /tmp/rca.log 2>&1; echo "racecheck attention rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rca.log | tail -1)" >> $S
timeout 60 compute-sanitizer --tool racecheck $B/tests/test_sparse_conv --gtest_filter='SpconvCuda.EveryKernelOnATinyInput' > /tmp/rc1.log 2>&1; echo "racecheck conv tiny rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc1.log | tail -1)" >> $S
timeout 200 $B/bench/decode_attention --json $OUT/attn.json > $OUT/attn.txt 2>&1; echo "attention bench rc=$?" >> $S
timeout 200 python3 $B/bench_py/torch_sdpa.py --ours $OUT/attn.json --out /tmp > $OUT/sdpa.txt 2>&1; echo "sdpa rc=$?" >> $S
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
for rc in 1024:64 1024:128 512:64; do
  R=${rc%:*}; C=${rc#*:}
  timeout 90 $B/bench/spconv --coords /tmp/coords_$R.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>&1 || echo "spconv R=$R C=$C rc=$?" >> $S
  tail -1 /tmp/b.json >> $OUT/conv.jsonl
  echo "conv R=$R C=$C $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)" >> $OUT/conv.txt
done
grep "^|" $OUT/sdpa.txt | head -40
cat $OUT/conv.txt
cat $S

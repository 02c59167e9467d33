#!/usr/bin/env bash
# bloomery: one GPU-machine call for gpt-oss-20b side by side (issue 26): llama.cpp built in the
# background while the attention tests run, then bloomery and llama.cpp timed on the same synthetic
# file once nothing else loads the host. Logs to $OUT.
set -u
OUT=${OUT:-/tmp/out}
S=$SECONDS
F=/tmp/bl/gpt-oss-20b.gguf
left() { echo $(( ${1} - (SECONDS - S) )); }
JOBS=16 bash scripts/device-peers.sh build:llama
TEST_TIMEOUT=300 bash scripts/device-ab.sh synth:gpt-oss-20b:MXFP4 tests:${TESTS:-test/cuda-attn-window.test.ts} > /dev/null
grep -E "positions:|worst|\(fail\)| pass$| fail$" "$OUT/tests.log" | head -30
echo "t=$((SECONDS - S)) tests done"
BLOOMERY_CUDA_PROFILE=1 timeout 60 /tmp/bl/bun src/cli/main.ts bench -m $F -p 4096 -n 0 -r 1 > "$OUT/prof-pp.log" 2>&1
bash scripts/device-peers.sh wait:$(left 420)
echo "t=$((SECONDS - S)) build waited"
AB_TIMEOUT=120 bash scripts/device-ab.sh "new:-m+$F+-p+512,4096+-n+128+-r+2" "new:-m+$F+-p+0+-n+128+-d+4096+-r+2" > /dev/null
cat "$OUT/new.log"
echo "t=$((SECONDS - S)) ours done"
if [ -x /tmp/peers/llama/b/bin/llama-bench ]; then
  PB_TIMEOUT=$(left 585) bash scripts/device-peers.sh "llama:-m+$F+-ngl+99+-fa+1+-p+512,4096+-n+128+-r+2"
  PB_TIMEOUT=$(left 595) bash scripts/device-peers.sh "llama:-m+$F+-ngl+99+-fa+1+-p+0+-n+128+-d+4096+-r+2"
fi
echo "t=$((SECONDS - S)) end"

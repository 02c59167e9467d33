#!/usr/bin/env bash
# bloomery: the third GPU-machine call for issue 26 (after -s1 and -s2): gpt-oss-120b the way a
# 24 GB card runs it - bloomery's --card-budget 24576, the peers' experts of the first 25 of 36
# layers in host RAM (the rest fit 24 GiB) - then, time left, the GPU tests named by TESTS.
set -u
OUT=${OUT:-/tmp/out}
S=$SECONDS
left() { echo $(( ${1} - (SECONDS - S) )); }
B=/dev/shm/oss120.gguf
AB_TIMEOUT=150 bash scripts/device-ab.sh "new:-m+$B+--card-budget+24576+-t+16+-p+4096+-n+64+-r+2" > /dev/null
cat "$OUT/new.log"; echo "t=$((SECONDS - S)) ours"
PB_TIMEOUT=$(left 300) bash scripts/device-peers.sh "ik:-m+$B+-ngl+99+-fa+1+--n-cpu-moe+25+-t+16+-p+4096+-n+64+-r+1"
PB_TIMEOUT=$(left 470) bash scripts/device-peers.sh "llama:-m+$B+-ngl+99+-fa+1+-ncmoe+25+-t+16+-p+4096+-n+64+-r+1"
echo "t=$((SECONDS - S)) peers"
if [ -n "${TESTS:-}" ] && [ $(left 590) -gt 60 ]; then
  TEST_TIMEOUT=$(left 590) bash scripts/device-ab.sh tests:$TESTS > /dev/null
  grep -E "\(fail\)| pass$| fail$|error" "$OUT/tests.log" | head -40
fi
echo "t=$((SECONDS - S)) end"

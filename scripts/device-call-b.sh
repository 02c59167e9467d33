#!/usr/bin/env bash
# bloomery: one GPU-machine call for gpt-oss-120b beside the card (issue 26): synth into /dev/shm,
# bloomery with --cpu-moe and a 24 GiB --card-budget, then llama.cpp's --cpu-moe and the -ot run
# that keeps the last 11 layers' experts on the card (the same 24 GiB), where its build is on the
# machine from call A. Logs to $OUT.
set -u
OUT=${OUT:-/tmp/out}
S=$SECONDS
B=/dev/shm/oss120.gguf
left() { echo $(( ${1} - (SECONDS - S) )); }
mount -o remount,size=110G /dev/shm
mkdir -p /tmp/bl
bash scripts/device-ab.sh > /dev/null 2>&1 # unpacks the runtime and libraries when the machine is fresh
[ -f $B ] || ( time timeout 200 /tmp/bl/bun src/cli/main.ts synth gpt-oss-120b:MXFP4 -o $B ) 2>&1 | tail -3
ls -la $B; echo "t=$((SECONDS - S)) synth"
AB_TIMEOUT=150 bash scripts/device-ab.sh "new:-m+$B+-cmoe+-t+16+-p+4096+-n+64+-r+2" > /dev/null
AB_TIMEOUT=150 bash scripts/device-ab.sh "new:-m+$B+--card-budget+24576+-t+16+-p+4096+-n+64+-r+2" > /dev/null
cat "$OUT/new.log"; echo "t=$((SECONDS - S)) ours"
if [ -x /tmp/peers/llama/b/bin/llama-bench ]; then
  PB_TIMEOUT=$(left 450) bash scripts/device-peers.sh "llama:-m+$B+-ngl+99+-fa+1+-ncmoe+36+-t+16+-p+4096+-n+64+-r+1"
  PB_TIMEOUT=$(left 590) bash scripts/device-peers.sh "llama:-m+$B+-ngl+99+-fa+1+-ncmoe+25+-t+16+-p+4096+-n+64+-r+1"
fi
echo "t=$((SECONDS - S)) end"

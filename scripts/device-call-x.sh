#!/usr/bin/env bash
# bloomery: the first of two GPU-machine calls back to back for gpt-oss-120b side by side (issue 26):
# llama.cpp built in the background (setsid: it runs on after the call) while the host-expert GPU
# tests run and the 120b is synthesized into /dev/shm; then the build is waited for. The second call
# (scripts/device-call-b.sh) times both on a quiet machine. Logs to $OUT.
set -u
OUT=${OUT:-/tmp/out}
S=$SECONDS
left() { echo $(( ${1} - (SECONDS - S) )); }
mount -o remount,size=110G /dev/shm
JOBS=16 bash scripts/device-peers.sh build:llama
TEST_TIMEOUT=240 bash scripts/device-ab.sh tests:${TESTS:-./test/cuda-share-tune.test.ts,./test/cuda-hybrid.test.ts,./test/cuda-families.test.ts} > /dev/null
grep -E "share-tune:|--cpu-moe|\(fail\)| pass$| fail$|error" "$OUT/tests.log" | head -40
echo "t=$((SECONDS - S)) tests"
B=/dev/shm/oss120.gguf
[ -f $B ] || ( time timeout 200 /tmp/bl/bun src/cli/main.ts synth gpt-oss-120b:MXFP4 -o $B ) 2>&1 | tail -3
ls -la $B; echo "t=$((SECONDS - S)) synth"
bash scripts/device-peers.sh wait:$(left 570)
echo "t=$((SECONDS - S)) end"

#!/usr/bin/env bash
# bloomery: the first of three GPU-machine calls back to back for issue 26's side-by-side tables:
# both peers (llama.cpp, ik_llama.cpp) built in the background (setsid: they run on after the call)
# while the share's GPU tests run and gpt-oss-20b and -120b are synthesized into /dev/shm; then the
# builds are waited for. scripts/device-call-s2.sh and -s3.sh time the engines on a quiet machine.
set -u
OUT=${OUT:-/tmp/out}
S=$SECONDS
left() { echo $(( ${1} - (SECONDS - S) )); }
mount -o remount,size=110G /dev/shm
nproc; lscpu | grep -E "Model name|Socket|NUMA node\(s\)" ; free -g | head -2
JOBS=16 bash scripts/device-peers.sh build:llama,ik
TEST_TIMEOUT=200 bash scripts/device-ab.sh tests:${TESTS:-./test/cuda-share-tune.test.ts,./test/cuda-hybrid.test.ts} > /dev/null
grep -E "share-tune:|share climb|--cpu-moe|\(fail\)| pass$| fail$|error" "$OUT/tests.log" | head -40
echo "t=$((SECONDS - S)) tests"
for m in gpt-oss-120b:/dev/shm/oss120.gguf gpt-oss-20b:/dev/shm/oss20.gguf; do
  f=${m#*:}
  [ -f $f ] || ( time timeout 200 /tmp/bl/bun src/cli/main.ts synth ${m%%:*}:MXFP4 -o $f ) 2>&1 | tail -3
  ls -la $f
done
echo "t=$((SECONDS - S)) synth"
bash scripts/device-peers.sh wait:$(left 580)
echo "t=$((SECONDS - S)) end"

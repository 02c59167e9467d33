#!/usr/bin/env bash
# bloomery: one GPU-machine call for gpt-oss-120b's decode beside the card (issue 26): the card's
# share of a token's host picks pulled into card memory with its bias rows (NEW) against reading it
# in place (BASE: .device/base.tar.xz, the commit before), interleaved; fixed shares; the 24 GiB
# card; a profile of the split steps; then the GPU tests named in TESTS. Logs to $OUT.
set -u
OUT=${OUT:-/tmp/out}
S=$SECONDS
B=/dev/shm/oss120.gguf
mount -o remount,size=110G /dev/shm
mkdir -p /tmp/bl "$OUT"
bash scripts/device-ab.sh > /dev/null 2>&1 # unpacks the runtime, the libraries and the baseline
[ -f $B ] || ( time timeout 200 /tmp/bl/bun src/cli/main.ts synth gpt-oss-120b:MXFP4 -o $B ) 2>&1 | tail -3
ls -la $B; echo "t=$((SECONDS - S)) synth"
NEW="/tmp/bl/bun $PWD/src/cli/main.ts"
BASE="/tmp/bl/bun /tmp/base/src/cli/main.ts"
# one bench: a label, the side, the environment (VAR=VALUE,...; - for none), then bench's arguments
one() {
  local label=$1 side=$2 envs=$3
  shift 3
  local cli=$NEW
  [ "$side" = BASE ] && cli=$BASE
  echo "== $label ($side${envs:+, $envs}): bench $*" | tee -a "$OUT/c.log"
  ( [ "$envs" != - ] && for kv in ${envs//,/ }; do export "$kv"; done
    timeout ${AB_TIMEOUT:-150} $cli bench "$@" 2>&1 ) > "$OUT/last.log"
  grep -E "^\| gpt|error|host experts|placement|share" "$OUT/last.log" | tee -a "$OUT/c.log"
  echo "t=$((SECONDS - S))" | tee -a "$OUT/c.log"
}
left() { echo $(( ${1} - (SECONDS - S) )); }
T="-m $B -t 16"
one cmoe NEW - $T -cmoe -p 0 -n 64 -r 2
one cmoe BASE - $T -cmoe -p 0 -n 64 -r 2
TEST_TIMEOUT=150 bash scripts/device-ab.sh tests:./test/cuda-families.test.ts > /dev/null
grep -E "gpt-oss.*against|--cpu-moe|\(fail\)| pass$| fail$|error" "$OUT/tests.log" | head -30
cp "$OUT/tests.log" "$OUT/tests-families.log"
echo "t=$((SECONDS - S)) families"
one card24 NEW - $T --card-budget 24576 -p 4096 -n 64 -r 2
one cmoe-share2 NEW BLOOMERY_HYBRID_CARD_SHARE=2 $T -cmoe -p 0 -n 64 -r 2
one cmoe-profile NEW BLOOMERY_CUDA_PROFILE=1 $T -cmoe -p 0 -n 32 -r 1
grep -v "^|" "$OUT/last.log" | tail -40 > "$OUT/profile.log"
one card24 BASE - $T --card-budget 24576 -p 0 -n 64 -r 2
TL=$(left 590)
if [ "$TL" -gt 40 ]; then
  TEST_TIMEOUT=$TL bash scripts/device-ab.sh tests:./test/cuda-attn-window.test.ts,./scripts/probe-attn-window.test.ts > /dev/null
  grep -E "positions|worst|slot|\(fail\)| pass$| fail$|error" "$OUT/tests.log" | head -60
fi
echo "t=$((SECONDS - S)) end"

#!/usr/bin/env bash
# bloomery: checks and an A/B on the GPU machine between the working tree (NEW) and a baseline
# (BASE: another commit's sources and native libraries), both run from their sources by one Bun
# runtime, interleaved in one lease. Expects .device/ (carried, git-ignored): bun.xz (the runtime),
# node_modules.tar.xz, build.tar.xz (this tree's build/libbloomery_{cpu,cuda}.so), base.tar.xz (the
# baseline's src/ ffi/ ... and build/ libraries; BASE_TAR and BASE_DIR name another), fixtures.tar.xz
# (BLOOMERY_FIXTURES). Logs to $OUT.
# Usage: scripts/device-ab.sh VERB...  with VERB one of
#   tests:FILE,FILE   the GPU test files, one log each
#   model             synth qwen3-30b-a3b:Q4_K_M (the benchmark file) into /tmp/bl/q.gguf, once
#   ab:ARGS           `bench -m q.gguf ARGS` (ARGS with '+' for spaces), NEW and BASE alternated over two rounds
#   new:ARGS          `bench ARGS` on NEW alone ('+' for spaces)
#   synth:MODEL:QUANT synth MODEL:QUANT into /tmp/bl/MODEL.gguf with NEW, once
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/bl
D=.device
[ -x /tmp/bl/bun ] || { xz -dc $D/bun.xz > /tmp/bl/bun && chmod +x /tmp/bl/bun; }
[ -d node_modules ] || tar -xJf $D/node_modules.tar.xz
[ -f build/libbloomery_cuda.so ] || tar -xJf $D/build.tar.xz
BT=${BASE_TAR:-$D/base.tar.xz} BD=${BASE_DIR:-/tmp/base} # another baseline: BASE_TAR and BASE_DIR
if [ ! -d $BD/src ] && [ -f $BT ]; then
  mkdir -p $BD && tar -xJf $BT -C $BD && ln -sfn "$PWD/node_modules" $BD/node_modules
fi
if [ ! -d /tmp/fix ] && [ -f $D/fixtures.tar.xz ]; then mkdir -p /tmp/fix && tar -xJf $D/fixtures.tar.xz -C /tmp/fix; fi
export BLOOMERY_FIXTURES=/tmp/fix
BUN=/tmp/bl/bun
NEW="$BUN $PWD/src/cli/main.ts"
BASE="$BUN $BD/src/cli/main.ts"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
for what in "$@"; do
  verb=${what%%:*}
  arg=${what#*:}
  arg=${arg//+/ }
  case "$verb" in
    tests)
      # one bun test over the files (one runtime start), a log of all
      echo "== tests ${arg//,/ }"
      timeout ${TEST_TIMEOUT:-400} $BUN test --timeout 240000 ${arg//,/ } > "$OUT/tests.log" 2>&1
      grep -E "^\(fail\)| pass$| fail$| skip$|^Ran |max \||greedy [0-9]|on the card:|error:" "$OUT/tests.log" | head -80 ;;
    model)
      [ -f /tmp/bl/q.gguf ] || ( time timeout 200 $NEW synth qwen3-30b-a3b:Q4_K_M -o /tmp/bl/q.gguf ) 2>&1 | tail -4 | tee -a "$OUT/synth.log"
      sha=$(head -c 200000000 /tmp/bl/q.gguf | sha256sum | cut -c1-16); echo "q.gguf first 200 MB sha256 $sha" | tee -a "$OUT/synth.log" ;;
    ab)
      for round in 1 2; do
        if [ $round = 1 ]; then order="NEW BASE"; else order="BASE NEW"; fi
        for side in $order; do
          if [ $side = NEW ]; then cli=$NEW; else cli=$BASE; fi
          echo "== $side round $round: bench $arg" | tee -a "$OUT/ab.log"
          timeout ${AB_TIMEOUT:-300} $cli bench -m /tmp/bl/q.gguf $arg 2>&1 | grep -E "^\||error|t/s|host experts|share" | grep -v "^| ---\|^| model" | tee -a "$OUT/ab.log"
        done
      done ;;
    synth)
      name=${arg%%:*}
      [ -f /tmp/bl/$name.gguf ] || ( time timeout 300 $NEW synth $arg -o /tmp/bl/$name.gguf ) 2>&1 | tail -4 | tee -a "$OUT/synth.log" ;;
    new)
      echo "== NEW: bench $arg" | tee -a "$OUT/new.log"
      timeout ${AB_TIMEOUT:-300} $NEW bench $arg 2>&1 | grep -E "^\||error|t/s|placement|host experts" | tee -a "$OUT/new.log" ;;
    *) echo "unknown verb $what" ;;
  esac
done

#!/usr/bin/env bash
# bloomery: CUDA checks on the GPU machine, run from the repository root there. Expects .device/
# (carried, git-ignored): bloomery-serve.xz (the executable, built with BLOOMERY_CUDA_ARCH=sm_90),
# build.tar.xz (build/libbloomery_{cpu,cuda}.so for the tests) and fixtures/. Writes logs to $OUT.
# Usage: scripts/device-cuda.sh [clocks] [check] [tests] [launch] [probe] [profile] [bench-quick|bench|tg] [nopdl] [carveout]
#        [cpuhost] [server] [sanitize] [ncu] [hybrid] [bench-hybrid] [npl]
# npl: batched decode (bench -npl 1,2,4,8 -p 128 -n 128 -r 2; NPL_ARGS overrides), then the card's
# per-section profile of its batched steps at -npl 8 -r 1 (NPL_PROFILE_ARGS overrides); $OUT/npl.log.
# hybrid: test/cuda-hybrid.test.ts (experts in host memory beside the card); bench-hybrid: the
# cpu-moe and half (--n-cpu-moe 24) cells on 16 threads (HYBRID_ARGS overrides the bench arguments).
# check: the new one-token kernels' logits against the round-1 kernels' (fast 15) on the synthetic
# model; where some differ, BLOOMERY_CUDA_FAST is set to the agreeing set for the verbs after it
# (so a failing new kernel does not cost the bench). ncu: per-kernel times of a few decode steps
# (Nsight Compute, graphs off, clocks left alone; NCU_ARGS: the bench's arguments, e.g. "-npl 8 -p 16 -n 32 -r 1").
# env:NAME=VALUE: exported for the verbs after it; launch: the launch-cost probe (test/cuda-kernels.test.ts -t launch); probe: decode per configuration
# (scripts/device-cuda-probe.ts); cpuhost: the CPU bench on all host cores with --membw; server: the
# server on the card (scripts/device-server-check.ts).
# SRC=1 runs the CLI from the sources and build/ (the executable only as the Bun runtime), so a
# changed library needs no new executable.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/bl
D=.device
xz -dc $D/bloomery-serve.xz > /tmp/bl/bloomery-serve && chmod +x /tmp/bl/bloomery-serve
tar -xJf $D/build.tar.xz
export BLOOMERY_FIXTURES=$PWD/$D/fixtures
BS=/tmp/bl/bloomery-serve
CLI=$BS
[ "${SRC:-0}" = 1 ] && CLI="env BUN_BE_BUN=1 $BS src/cli/main.ts"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/gpu.txt"
nvidia-smi -q 2>/dev/null | grep -iE "Virtualization Mode|Confidential|CC Mode|CC State|MIG Mode|Persistence Mode|Compute Mode|Host VGPU|Addressing Mode" | tee -a "$OUT/gpu.txt"
CLK=
model() {
  if [ ! -f /tmp/bl/q.gguf ]; then
    ( time timeout 150 $CLI synth qwen3-30b-a3b:Q4_K_M -o /tmp/bl/q.gguf ) 2>&1 | tee "$OUT/synth.log"
  fi
}
# DEADLINE=<seconds>: verbs named in OPTIONAL (probe, profile, ncu by default) are skipped once
# the script has run that long, and ncu gets at most what is left
DEADLINE=${DEADLINE:-100000}
OPTIONAL=${OPTIONAL:-probe profile ncu}
for what in "$@"; do
  if [[ " $OPTIONAL " == *" $what "* ]] && [ $SECONDS -ge $DEADLINE ]; then
    echo "== $what skipped: $SECONDS s spent (deadline $DEADLINE s)"
    continue
  fi
  case "$what" in
    clocks)
      # SM clock, power and throttle reasons every 250 ms while the rest runs (read only)
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 250 > "$OUT/clocks.csv" 2>&1 &
      CLK=$! ;;
    tests)
      fails=0
      for f in test/cuda-kernels.test.ts test/cuda-model.test.ts test/cuda-hybrid.test.ts; do
        echo "== $f"
        BUN_BE_BUN=1 timeout ${TEST_TIMEOUT:-240} $BS test "$f" > "$OUT/$(basename "$f" .test.ts).log" 2>&1 || fails=1
        grep -E "^\(fail\)| pass$| fail$|max \||greedy|steps|long context|error|int8|one-token|1100 positions" "$OUT/$(basename "$f" .test.ts).log" | head -60
      done
      [ $fails = 1 ] && echo "== some CUDA tests failed (the logs: cuda-kernels.log, cuda-model.log)" ;;
    check)
      model
      echo "== new one-token kernels against the round-1 kernels (each set in its own process)"
      : > "$OUT/check.log"
      for bits in 47 31; do
        BUN_BE_BUN=1 timeout 60 $BS scripts/device-cuda-probe.ts /tmp/bl/q.gguf ${CHECK_DEPTHS:-64,600,4096} check $bits 2>&1 | tee -a "$OUT/check.log"
      done
      SAFE=4193999 # the library's default set (4194047: all but the opt-in picks and att8) without the two checked bits (16, 32)
      grep -q '^AGREES=47' "$OUT/check.log" && SAFE=$((SAFE | 32))
      grep -q '^AGREES=31' "$OUT/check.log" && SAFE=$((SAFE | 16))
      export BLOOMERY_SAFE_FAST=$SAFE
      if [ "$SAFE" != 4194047 ]; then
        export BLOOMERY_CUDA_FAST=$SAFE
        echo "== BLOOMERY_CUDA_FAST=$SAFE for what follows"
      fi ;;
    ncu)
      model
      echo "== ncu: kernel times of decode steps (graphs off)"
      left=$((DEADLINE - SECONDS)); [ $left -gt ${NCU_TIMEOUT:-120} ] && left=${NCU_TIMEOUT:-120}
      BLOOMERY_CUDA_GRAPHS=0 timeout $left ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        --print-units base --launch-skip ${NCU_SKIP:-1000} --launch-count ${NCU_COUNT:-500} --csv $CLI bench -m /tmp/bl/q.gguf ${NCU_ARGS:--p 0 -n 32 -r 1} \
        > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
      echo "ncu rc=$? lines $(wc -l < "$OUT/ncu.csv")"
      awk -F'","' 'NR>1 && $0 ~ /gpu__time_duration/ {k=$5; gsub(/\(.*/, "", k); v=$NF; gsub(/[",]/, "", v); s[k]+=v; n[k]++} END {for (k in s) printf "%9.2f us a launch, %5d launches: %s\n", s[k]/n[k]/1000, n[k], k}' "$OUT/ncu.csv" | sort -n -r | head -24 ;;
    env:*)
      # env:NAME=VALUE exports for the verbs after it (e.g. env:BLOOMERY_CUDA_CARVEOUT=100 profile)
      export "${what#env:}"
      echo "== ${what#env:}" ;;
    launch)
      echo "== launch-cost probe"
      BUN_BE_BUN=1 timeout 120 $BS test test/cuda-kernels.test.ts -t launch > "$OUT/launch.log" 2>&1
      grep -E "launch probe|pass|fail" "$OUT/launch.log" ;;
    probe)
      model
      echo "== decode per configuration (carveout, PDL, graphs)"
      BUN_BE_BUN=1 timeout 200 $BS scripts/device-cuda-probe.ts /tmp/bl/q.gguf ${PROBE_DEPTHS:-64,4096} 2>&1 | tee "$OUT/probe.log" ;;
    cpuhost)
      model
      echo "== CPU only, $(nproc) cores"
      timeout 200 $CLI bench -m /tmp/bl/q.gguf -ngl 0 -t $(nproc) -p 512 -n 32 -r 1 --membw 2>&1 | tee "$OUT/cpuhost.log" ;;
    server)
      model
      echo "== server on the card"
      BUN_BE_BUN=1 timeout 300 $BS scripts/device-server-check.ts /tmp/bl/q.gguf "$OUT/server.log" 2>&1 | tee "$OUT/server-check.log" ;;
    hybrid)
      echo "== test/cuda-hybrid.test.ts"
      BUN_BE_BUN=1 timeout ${TEST_TIMEOUT:-240} $BS test test/cuda-hybrid.test.ts > "$OUT/cuda-hybrid.log" 2>&1 || echo "== cuda-hybrid failed"
      grep -E "^\(fail\)| pass$| fail$|max \||error|Error|expect" "$OUT/cuda-hybrid.log" | head -40 ;;
    bench-hybrid)
      model
      for pl in "-cmoe" "-ncmoe 24"; do
        echo "== bench $pl ${HYBRID_ARGS:--p 512 -n 64 -r 2}"
        timeout ${HYBRID_TIMEOUT:-200} $CLI bench -m /tmp/bl/q.gguf $pl -t $(nproc) ${HYBRID_ARGS:--p 512 -n 64 -r 2} 2>&1 | tee -a "$OUT/bench-hybrid.log" | grep -vE "^\{"
      done ;;
    npl)
      model
      echo "== bench ${NPL_ARGS:--npl 1,2,4,8 -p 128 -n 128 -r 2}" | tee "$OUT/npl.log"
      timeout ${NPL_TIMEOUT:-300} $CLI bench -m /tmp/bl/q.gguf ${NPL_ARGS:--npl 1,2,4,8 -p 128 -n 128 -r 2} 2>&1 | tee -a "$OUT/npl.log"
      echo "== profile of the batched steps (BLOOMERY_CUDA_PROFILE=1: graphs off, an event per section) ${NPL_PROFILE_ARGS:--npl 8 -p 128 -n 128 -r 1}" | tee -a "$OUT/npl.log"
      BLOOMERY_CUDA_PROFILE=1 timeout ${NPL_TIMEOUT:-300} $CLI bench -m /tmp/bl/q.gguf ${NPL_PROFILE_ARGS:--npl 8 -p 128 -n 128 -r 1} 2>&1 | grep -E "profile|^\|" | tee -a "$OUT/npl.log" ;;
    tg)
      model
      echo "== tg128"
      timeout 120 $CLI bench -m /tmp/bl/q.gguf -p 0 -n 128 -r 2 2>&1 | grep -E "tg128|CUDA|placement" | tee -a "$OUT/profile.log" ;;
    carveout)
      echo "== tg128 with every kernel preferring the largest shared-memory carveout"
      BLOOMERY_CUDA_CARVEOUT=100 timeout 120 $CLI bench -m /tmp/bl/q.gguf -p 0 -n 128 -r 2 2>&1 | grep -E "tg128" | tee -a "$OUT/profile.log" ;;
    nopdl)
      echo "== tg128 without programmatic dependent launch"
      BLOOMERY_CUDA_PDL=0 timeout 120 $CLI bench -m /tmp/bl/q.gguf -p 0 -n 128 -r 2 2>&1 | grep -E "tg128" | tee -a "$OUT/profile.log" ;;
    sanitize)
      BUN_BE_BUN=1 timeout 240 compute-sanitizer --tool memcheck --print-limit 20 $BS test test/cuda-model.test.ts -t "tiny" 2>&1 | tail -40 ;;
    profile|bench-quick|bench)
      model
      if [ "$what" = profile ]; then
        echo "== profile (graphs off, an event per section)"
        BLOOMERY_CUDA_PROFILE=1 timeout 200 $CLI bench -m /tmp/bl/q.gguf -p 512 -n 32 -r 1 2>&1 | grep -E "profile|t/s|CUDA" | tee "$OUT/profile.log"
        BLOOMERY_CUDA_GRAPHS=0 timeout 200 $CLI bench -m /tmp/bl/q.gguf -p 0 -n 64 -r 1 2>&1 | grep -E "tg64" | sed 's/^/graphs off: /' | tee -a "$OUT/profile.log"
        continue
      fi
      if [ "$what" = bench ]; then args="-p 512,4096 -n 128 -d 0,4096 -r 2"; else args="-p 512 -n 128 -r 1"; fi
      echo "== bench $args"
      timeout 330 $CLI bench -m /tmp/bl/q.gguf $args -o md -oe jsonl 2> "$OUT/bench-$what.jsonl" | tee "$OUT/bench-$what.md"
      tail -5 "$OUT/bench-$what.jsonl" | grep -v '^{' ;;
  esac
done
if [ -n "$CLK" ]; then
  kill "$CLK" 2>/dev/null
  awk -F', ' '{c=$2+0; if (c>0) {n++; s+=c; if (c>mx) mx=c; if (mn==0||c<mn) mn=c}} END {if (n) printf "SM clock over %d samples: min %d, mean %.0f, max %d MHz\n", n, mn, s/n, mx}' "$OUT/clocks.csv"
fi

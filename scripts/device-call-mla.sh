#!/usr/bin/env bash
# bloomery: DeepSeek V3's latent attention on the GPU machine (issue 28). Starts llama.cpp's build in
# the background (scripts/device-peers.sh), runs the MLA suites, synthesises a cut of deepseek-v3:IQ2_XXS
# (LAYERS layers: the first three dense, the rest MoE) and benches bloomery on it whole card and with
# --cpu-moe, then llama.cpp on the same file (when its build is done in time; a later call with
# PHASE=peers runs that part alone). Expects .device/ as scripts/device-ab.sh does and
# .device/peers/llama.tar.xz. Logs to $OUT.
set -u
OUT=${OUT:-/tmp/out}
LAYERS=${LAYERS:-5}
PHASE=${PHASE:-all}
start=$(date +%s)
M=/tmp/bl/deepseek-v3.gguf
if [ "$PHASE" = all ]; then
  JOBS=${JOBS:-12} bash scripts/device-peers.sh build:llama
  mkdir -p /tmp/fix && tar -xJf .device/fixtures-small.tar.xz -C /tmp/fix
  TEST_TIMEOUT=240 bash scripts/device-ab.sh tests:test/cuda-mla.test.ts,test/cuda-families.test.ts synth:deepseek-v3:IQ2_XXS+--layers+$LAYERS
  B="/tmp/bl/bun src/cli/main.ts bench -m $M"
  {
    echo "== bloomery whole card"
    timeout 150 $B -p 512,4096 -n 128 -r 2 2>&1 | grep -E "^\||error|placement"
    timeout 90 $B -p 0 -n 128 -d 4096 -r 1 2>&1 | grep -E "^\| deep|error"
    echo "== bloomery sections (BLOOMERY_CUDA_PROFILE=1, graphs off)"
    BLOOMERY_CUDA_PROFILE=1 timeout 90 $B -p 4096 -n 32 -r 1 2>&1 | grep -E "^\| deep|error|profile"
    echo "== bloomery --cpu-moe -t 16"
    timeout 150 $B -cmoe -t 16 -p 4096 -n 64 -r 2 2>&1 | grep -E "^\| deep|error|placement|host experts"
  } 2>&1 | tee -a "$OUT/bench.log"
fi
left=$((580 - ($(date +%s) - start)))
[ $left -lt 30 ] && { echo "== no time left for the peers (PHASE=peers runs them)"; exit 0; }
bash scripts/device-peers.sh wait:$((left - 20 > 0 ? left - 20 : 1))
[ -x /tmp/peers/llama/b/bin/llama-bench ] || exit 0
PB_TIMEOUT=150 bash scripts/device-peers.sh llama:-m+$M+-ngl+99+-fa+1+-p+512,4096+-n+128+-r+2 \
  llama:-m+$M+-ngl+99+-fa+1+-p+0+-n+128+-d+4096+-r+1 llama:-m+$M+-ngl+99+-fa+1+-ncmoe+99+-t+16+-p+4096+-n+64+-r+2

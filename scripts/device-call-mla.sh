#!/usr/bin/env bash
# bloomery: DeepSeek V3's latent attention on the GPU machine (issue 28). Starts llama.cpp's build in
# the background (scripts/device-peers.sh), runs the GPU suites in TESTS while it builds, synthesises a
# cut of deepseek-v3:IQ2_XXS (LAYERS layers: the first three dense, the rest MoE), waits for the build,
# then benches bloomery and llama.cpp on that file one after the other with nothing else running:
# whole card, then --cpu-moe (llama.cpp: -ncmoe 99). Expects .device/ as scripts/device-ab.sh does and
# .device/peers/llama.tar.xz. Logs to $OUT (bench.log, peers.log, tests.log).
set -u
OUT=${OUT:-/tmp/out}
LAYERS=${LAYERS:-5}
TESTS=${TESTS:-test/cuda-mla.test.ts,test/cuda-families.test.ts}
start=$(date +%s)
M=/tmp/bl/deepseek-v3.gguf
JOBS=${JOBS:-16} bash scripts/device-peers.sh build:llama
mkdir -p /tmp/fix && tar -xJf .device/fixtures-small.tar.xz -C /tmp/fix
TEST_TIMEOUT=${TEST_TIMEOUT:-240} bash scripts/device-ab.sh tests:$TESTS synth:deepseek-v3:IQ2_XXS+--layers+$LAYERS
bash scripts/device-peers.sh wait:$((400 - ($(date +%s) - start)))
B="/tmp/bl/bun src/cli/main.ts bench -m $M"
{
  echo "== bloomery whole card"
  timeout 100 $B -p 512,4096 -n 128 -r 2 2>&1 | grep -E "^\| deep|error|placement"
  timeout 60 $B -p 0 -n 128 -d 4096 -r 1 2>&1 | grep -E "^\| deep|error"
} 2>&1 | tee -a "$OUT/bench.log"
L=/tmp/peers/llama/b/bin/llama-bench
[ -x $L ] && PB_TIMEOUT=100 bash scripts/device-peers.sh llama:-m+$M+-ngl+99+-fa+1+-p+512,4096+-n+128+-r+2 llama:-m+$M+-ngl+99+-fa+1+-p+0+-n+128+-d+4096+-r+1
{
  echo "== bloomery --cpu-moe -t 16"
  timeout 100 $B -cmoe -t 16 -p 4096 -n 64 -r 2 2>&1 | grep -E "^\| deep|error|host experts"
} 2>&1 | tee -a "$OUT/bench.log"
[ -x $L ] && PB_TIMEOUT=100 bash scripts/device-peers.sh llama:-m+$M+-ngl+99+-fa+1+-ncmoe+99+-t+16+-p+4096+-n+64+-r+2
echo "== done after $(($(date +%s) - start)) s"

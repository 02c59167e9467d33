#!/usr/bin/env bash
# bloomery: a MoE model larger than the card, side by side with its peers on the GPU machine (issue 28's
# runs): builds the peers in the background (scripts/device-peers.sh; PEERS: llama, ik or llama,ik),
# synthesises MODEL (synth's spec, e.g. deepseek-v3:IQ2_XXS or glm-4.5-air:Q4_K_M) cut to LAYERS layers,
# waits for the builds, then runs each engine alone, one after the other: --cpu-moe; a card budget of
# BUDGET MiB (bloomery --card-budget; the peers -ncmoe / --n-cpu-moe NCMOE, the layers whose experts stay on
# the CPU so that the rest fit that budget: give it); and bloomery with --expert-ram HOST MiB (bench's spelling: a RAM
# cache of HOST MiB for routed experts read from the file on demand, with the bytes a token read). Expects .device/ as scripts/device-ab.sh does and
# .device/peers/{llama,ik}.tar.xz. Logs to $OUT (bench.log, peers.log).
# Usage: MODEL=deepseek-v3:IQ2_XXS LAYERS=12 NCMOE=6 BUDGET=24576 HOST=... scripts/device-call-moe.sh
set -u
OUT=${OUT:-/tmp/out}
MODEL=${MODEL:?MODEL=name:QUANT}
LAYERS=${LAYERS:-0}
PEERS=${PEERS:-llama,ik}
BUDGET=${BUDGET:-24576}
NCMOE=${NCMOE:-}
HOST=${HOST:-}
T=${T:-16}
start=$(date +%s)
name=${MODEL%%:*}
M=/tmp/bl/$name.gguf
JOBS=${JOBS:-8} bash scripts/device-peers.sh build:$PEERS
cut=""
[ "$LAYERS" != 0 ] && cut="+--layers+$LAYERS"
bash scripts/device-ab.sh synth:$MODEL$cut
ls -la $M | tee -a "$OUT/bench.log"
bash scripts/device-peers.sh wait:$((${WAIT:-420} - ($(date +%s) - start))) stop
B="/tmp/bl/bun src/cli/main.ts bench -m $M"
run() { echo "== bloomery $*" | tee -a "$OUT/bench.log"; timeout ${BT:-200} $B "$@" 2>&1 | grep -E "^\| |error|host experts|expert cache|placement" | grep -v "^| ---\|^| model" | tee -a "$OUT/bench.log"; }
peer() { [ -x /tmp/peers/$1/b/bin/llama-bench ] && PB_TIMEOUT=${BT:-200} bash scripts/device-peers.sh "$1:$2"; }
run -cmoe -t $T -p 4096 -n 64 -r 2
peer llama "-m+$M+-ngl+99+-fa+1+-ncmoe+999+-t+$T+-p+4096+-n+64+-r+2"
peer ik "-m+$M+-ngl+99+-fa+1+-mla+3+-fmoe+1+--n-cpu-moe+999+-t+$T+-p+4096+-n+64+-r+2"
run --card-budget $BUDGET -t $T -p 4096 -n 64 -r 2
if [ -n "$NCMOE" ]; then
  peer llama "-m+$M+-ngl+99+-fa+1+-ncmoe+$NCMOE+-t+$T+-p+4096+-n+64+-r+2"
  peer ik "-m+$M+-ngl+99+-fa+1+-mla+3+-fmoe+1+--n-cpu-moe+$NCMOE+-t+$T+-p+4096+-n+64+-r+2"
fi
[ -n "$HOST" ] && run -cmoe --expert-ram $HOST -t $T -p 512 -n 32 -r 1
echo "== done after $(($(date +%s) - start)) s" | tee -a "$OUT/bench.log"

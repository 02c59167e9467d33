#!/usr/bin/env bash
# bloomery: glm4moe beside the card against llama.cpp on the GPU machine, after device-ab.sh's
# synth:glm-4.5-air:Q4_K_M (cut by --layers where the disk is short) and device-peers.sh's
# build:llama in the same lease. bloomery `bench` with every routed expert in host RAM (-cmoe) and
# with a 24 GiB card budget; llama.cpp's llama-bench with -ot exps=CPU and with --n-cpu-moe set to
# the host layers bloomery's 24 GiB plan left (its "host experts (N layers" line). Logs to $OUT.
set -u
OUT=${OUT:-/tmp/out}
M=${GLM:-/tmp/bl/glm-4.5-air.gguf}
BUN=/tmp/bl/bun
ARGS="-t 16 -p 4096 -n 64"
bash scripts/device-peers.sh wait:${WAIT_S:-240}
echo "== bloomery -cmoe" | tee -a "$OUT/glm.log"
timeout 240 $BUN src/cli/main.ts bench -m "$M" -cmoe $ARGS -r 2 2>&1 | grep -E "^\||error|host experts|placement" | grep -v "^| ---" | tee -a "$OUT/glm.log"
echo "== bloomery --card-budget 24576" | tee -a "$OUT/glm.log"
timeout 240 $BUN src/cli/main.ts bench -m "$M" --card-budget 24576 $ARGS -r 2 2>&1 | grep -E "^\||error|host experts|placement" | grep -v "^| ---" | tee "$OUT/glm-budget.log" | tee -a "$OUT/glm.log"
n=$(grep -oE "host experts \(([0-9]+) layers" "$OUT/glm-budget.log" | head -1 | grep -oE "[0-9]+")
echo "== bloomery's 24 GiB plan leaves ${n:-?} layers' experts on the host" | tee -a "$OUT/glm.log"
bash scripts/device-peers.sh "llama:-m+$M+-ngl+99+-fa+1+-ot+exps=CPU+-t+16+-p+4096+-n+64+-r+1"
[ -n "${n:-}" ] && bash scripts/device-peers.sh "llama:-m+$M+-ngl+99+-fa+1+--n-cpu-moe+$n+-t+16+-p+4096+-n+64+-r+1"
cat "$OUT/peers.log" >> "$OUT/glm.log"

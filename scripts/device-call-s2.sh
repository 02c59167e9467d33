#!/usr/bin/env bash
# bloomery: the second GPU-machine call for issue 26 (after scripts/device-call-s1.sh, the peers
# built and the files in /dev/shm): gpt-oss-20b on the whole card, then gpt-oss-120b with every
# routed expert in host RAM, bloomery then llama.cpp then ik_llama.cpp, one engine at a time on a
# quiet machine. llama-bench `-ngl 99 -fa 1`; ik_llama.cpp's tg at depth is its `-gp 4096,128`.
set -u
OUT=${OUT:-/tmp/out}
S=$SECONDS
left() { echo $(( ${1} - (SECONDS - S) )); }
bash scripts/device-peers.sh wait:$(left 240)
A=/dev/shm/oss20.gguf B=/dev/shm/oss120.gguf
if [ "${SKIP20:-0}" != 1 ]; then
  AB_TIMEOUT=150 bash scripts/device-ab.sh "new:-m+$A+-p+512,4096+-n+128+-r+2" "new:-m+$A+-p+0+-n+128+-d+4096+-r+2" > /dev/null
  PB_TIMEOUT=120 bash scripts/device-peers.sh "llama:-m+$A+-ngl+99+-fa+1+-p+512,4096+-n+128+-r+2" "llama:-m+$A+-ngl+99+-fa+1+-p+0+-n+128+-d+4096+-r+2"
  PB_TIMEOUT=120 bash scripts/device-peers.sh "ik:-m+$A+-ngl+99+-fa+1+-p+512,4096+-n+128+-r+2" "ik:-m+$A+-ngl+99+-fa+1+-p+0+-n+0+-gp+4096,128+-r+2"
  echo "t=$((SECONDS - S)) 20b"
fi
AB_TIMEOUT=150 bash scripts/device-ab.sh "new:-m+$B+-cmoe+-t+16+-p+4096+-n+64+-r+2" > /dev/null
cat "$OUT/new.log"; echo "t=$((SECONDS - S)) ours"
PB_TIMEOUT=$(left 420) bash scripts/device-peers.sh "ik:-m+$B+-ngl+99+-fa+1+-ot+exps=CPU+-t+16+-p+4096+-n+64+-r+1"
PB_TIMEOUT=$(left 590) bash scripts/device-peers.sh "llama:-m+$B+-ngl+99+-fa+1+-ot+exps=CPU+-t+16+-p+4096+-n+64+-r+1"
echo "t=$((SECONDS - S)) end"

#!/usr/bin/env bash
# bloomery: gpt-oss side by side on the GPU machine, in phases that each fit one call (the machine
# stays warm between calls only if the next comes within its idle window). Logs to $OUT.
#   prep   unpack, synth gpt-oss-20b (disk) and, in the background, gpt-oss-120b (/dev/shm), build the peers
#   ours20 bloomery on the 20b: pp512/pp4096/tg128, tg128@d4096, the old f32 path (FAST_Q8 off), profile
#   peers20 the peers on the 20b (after waiting for their builds)
#   big    the 120b: --cpu-moe and a 24 GiB card budget, bloomery and the peers
set -u
OUT=${OUT:-/tmp/out}
F=/tmp/bl/gpt-oss-20b.gguf
B=/dev/shm/oss120.gguf
NB="-ngl+99+-fa+1"
for ph in "$@"; do
  case $ph in
    prep)
      mount -o remount,size=110G /dev/shm
      scripts/device-ab.sh synth:gpt-oss-20b:MXFP4 > /dev/null 2>&1; ls -la $F
      R=$PWD; setsid nohup bash -c "cd $R && /tmp/bl/bun src/cli/main.ts synth gpt-oss-120b:MXFP4 -o $B > /tmp/bl/synth120.log 2>&1" > /dev/null 2>&1 < /dev/null &
      JOBS=7 scripts/device-peers.sh build ;;
    ours20)
      scripts/device-ab.sh "new:-m+$F+-p+512,4096+-n+128+-r+2" "new:-m+$F+-p+0+-n+128+-d+4096+-r+2"
      BLOOMERY_CUDA_FAST=1967128311 scripts/device-ab.sh "new:-m+$F+-p+0+-n+128+-r+2"
      BLOOMERY_CUDA_FAST=1965031167 scripts/device-ab.sh "new:-m+$F+-p+0+-n+128+-r+2"
      BLOOMERY_CUDA_PROFILE=1 timeout 120 /tmp/bl/bun src/cli/main.ts bench -m $F -p 0 -n 32 -r 1 > $OUT/prof.log 2>&1 ;;
    peers20)
      scripts/device-peers.sh wait:420
      scripts/device-peers.sh "llama:-m+$F+$NB+-p+512,4096+-n+128+-r+2" "ik:-m+$F+$NB+-p+512,4096+-n+128+-r+2"
      scripts/device-peers.sh "llama:-m+$F+$NB+-p+0+-n+128+-d+4096+-r+2" "ik:-m+$F+$NB+-p+0+-n+128+-d+4096+-r+2"
      scripts/device-ab.sh "new:-m+$F+-p+512,4096+-n+128+-r+2" ;;
    big)
      cat /tmp/bl/synth120.log; ls -la $B
      scripts/device-ab.sh "new:-m+$B+-cmoe+-t+16+-p+4096+-n+64+-r+2" "new:-m+$B+--card-budget+24576+-t+16+-p+4096+-n+64+-r+2"
      scripts/device-peers.sh "llama:-m+$B+$NB+-ot+exps=CPU+-t+16+-p+4096+-n+64+-r+2" "ik:-m+$B+$NB+-fmoe+1+-ot+exps=CPU+-t+16+-p+4096+-n+64+-r+2"
      OT='blk\.(1[3-9]|2[0-9]|3[0-5])\.ffn_.*_exps=CPU'
      scripts/device-peers.sh "llama:-m+$B+$NB+-ot+$OT+-t+16+-p+4096+-n+64+-r+2" "ik:-m+$B+$NB+-fmoe+1+-ot+$OT+-t+16+-p+4096+-n+64+-r+2" ;;
  esac
done

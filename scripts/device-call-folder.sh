#!/usr/bin/env bash
# bloomery: issue 29's folder-vs-GGUF run on the GPU machine. Synthesises gpt-oss-120b as openai ships it
# (MXFP4 experts, BF16 elsewhere: synth's MXFP4_BF16 mix) cut to LAYERS layers (the whole 63 GB file and its
# folder do not fit the machine's 64 GiB disk and 128 GiB RAM together), the GGUF in /dev/shm, writes its
# folder to /tmp (scripts/gguf-folder.ts), then times each one's load (bench's load line) and benches both
# on the card one after the other (whole card; then --cpu-moe). Expects .device/ as scripts/device-ab.sh
# does. Logs to $OUT/folder.log.
set -u
OUT=${OUT:-/tmp/out}
LAYERS=${LAYERS:-18}
mkdir -p "$OUT" /tmp/bl /dev/shm/bl
D=.device
[ -x /tmp/bl/bun ] || { xz -dc $D/bun.xz > /tmp/bl/bun && chmod +x /tmp/bl/bun; }
[ -d node_modules ] || tar -xJf $D/node_modules.tar.xz
[ -f build/libbloomery_cuda.so ] || tar -xJf $D/build.tar.xz
BUN=/tmp/bl/bun
G=/dev/shm/bl/oss.gguf H=/tmp/bl/oss-hf
{
  [ -f $G ] || ( time timeout 300 $BUN src/cli/main.ts synth gpt-oss-120b:MXFP4_BF16 --layers $LAYERS -o $G ) 2>&1 | tail -4
  [ -f $H/model.safetensors ] || ( time timeout 400 $BUN scripts/gguf-folder.ts $G $H ) 2>&1 | tail -4
  ls -la $G $H
  for m in $G $H; do
    echo "== $m whole card"
    timeout 150 $BUN src/cli/main.ts bench -m $m -p 512,4096 -n 128 -r 2 2>&1 | grep -E "^\| gpt|error|load:|placement"
  done
  for m in $G $H; do
    echo "== $m --cpu-moe -t 16"
    timeout 150 $BUN src/cli/main.ts bench -m $m -cmoe -t 16 -p 4096 -n 64 -r 2 2>&1 | grep -E "^\| gpt|error|host experts"
  done
} 2>&1 | tee -a "$OUT/folder.log"

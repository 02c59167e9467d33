#!/usr/bin/env bash
# bloomery: the peers (llama.cpp, ik_llama.cpp) on the GPU machine, built there from carried
# sources (.device/peers/{llama,ik}.tar.xz: git archives without models/, docs/, media/) and run
# with llama-bench on the same files as bloomery. Logs to $OUT/peers.log.
# Usage: scripts/device-peers.sh VERB...  with VERB one of
#   build[:NAMES]  unpack into /tmp/peers/{llama,ik} and build llama-bench for sm_90 with GGML_NATIVE,
#                  in new sessions (setsid: they run on after the call returns); NAMES: llama, ik or
#                  llama,ik (the default)
#   wait:SECONDS   wait for both builds, at most SECONDS; print how each ended
#   stop           end the builds still running (their session, by the pid each build wrote), so that
#                  no compiler shares the CPU with the benches; say which were stopped
#   llama:ARGS     llama.cpp's llama-bench ARGS ('+' for spaces)
#   ik:ARGS        ik_llama.cpp's llama-bench ARGS
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/peers
for what in "$@"; do
  verb=${what%%:*}
  arg=${what#*:}
  arg=${arg//+/ }
  case "$verb" in
    build)
      names=llama,ik
      [ "$arg" != build ] && names=$arg
      for p in ${names//,/ }; do
        [ -d /tmp/peers/$p ] && continue
        # llama.cpp's archive has no examples/ (llama-bench is a tool there); ik_llama.cpp's llama-bench is an example
        extra="-DLLAMA_BUILD_TESTS=OFF"
        [ $p = llama ] && extra="$extra -DLLAMA_BUILD_EXAMPLES=OFF"
        mkdir -p /tmp/peers/$p && tar -xJf .device/peers/$p.tar.xz -C /tmp/peers/$p --strip-components=1
        ( cd /tmp/peers/$p && mkdir -p pocs examples && { [ -d examples/server ] || { mkdir -p examples/server && touch examples/server/CMakeLists.txt; }; } && setsid nohup bash -c "echo \$\$ > pid; cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF $extra -DCMAKE_BUILD_TYPE=Release > cmake.log 2>&1 && cmake --build b --target llama-bench -j ${JOBS:-8} > build.log 2>&1; echo \$? > done" > /dev/null 2>&1 < /dev/null & )
      done
      echo "== peers building in the background" ;;
    wait)
      for ((s = 0; s < arg; s += 5)); do
        left=0
        for p in llama ik; do [ -d /tmp/peers/$p ] && [ ! -f /tmp/peers/$p/done ] && left=1; done
        [ $left = 0 ] && break
        sleep 5
      done
      for p in llama ik; do
        [ -d /tmp/peers/$p ] || continue
        echo "== $p: build rc $(cat /tmp/peers/$p/done 2>/dev/null || echo running) ($(ls /tmp/peers/$p/b/bin/llama-bench 2>/dev/null || echo no binary))" | tee -a "$OUT/peers.log"
        [ -f /tmp/peers/$p/done ] && [ "$(cat /tmp/peers/$p/done)" != 0 ] && tail -n 20 /tmp/peers/$p/cmake.log /tmp/peers/$p/build.log | tee -a "$OUT/peers.log"
      done ;;
    stop)
      for p in llama ik; do
        [ -d /tmp/peers/$p ] && [ ! -f /tmp/peers/$p/done ] || continue
        kill -- -"$(cat /tmp/peers/$p/pid)" 2>/dev/null; echo stopped > /tmp/peers/$p/done
        echo "== $p: build stopped unfinished (no bench of it this call)" | tee -a "$OUT/peers.log"
      done ;;
    llama | ik)
      echo "== $verb: llama-bench $arg" | tee -a "$OUT/peers.log"
      timeout ${PB_TIMEOUT:-300} /tmp/peers/$verb/b/bin/llama-bench $arg 2>&1 | grep -E "^\||error|failed|unknown|invalid" | grep -v "^| ---" | tee -a "$OUT/peers.log" ;;
    *) echo "unknown verb $what" ;;
  esac
done

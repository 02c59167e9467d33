#!/usr/bin/env bash
# bloomery: a branch's GPU tests on the GPU machine without checking it out here: its sources
# (.device/BRANCH-src.tar.xz, a git archive) and libraries (.device/build-BRANCH.tar.xz) unpacked
# into /tmp/BRANCH beside this tree's runtime and node_modules, then `bun test` of the named files
# there, with the fixtures (.device/fixtures.tar.xz). Usage: scripts/device-branch-tests.sh BRANCH FILE...
set -u
OUT=${OUT:-/tmp/out}
br=$1
shift
bash scripts/device-ab.sh > /dev/null 2>&1 # the runtime, node_modules and fixtures
D=/tmp/$br
mkdir -p $D && tar -xJf .device/${br}src.tar.xz -C $D && tar -xJf .device/build-$br.tar.xz -C $D && ln -sfn "$PWD/node_modules" $D/node_modules
cd $D && BLOOMERY_FIXTURES=/tmp/fix timeout ${TEST_TIMEOUT:-300} /tmp/bl/bun test --timeout 240000 "$@" > "$OUT/$br-tests.log" 2>&1
grep -E "\(fail\)|\(pass\)| pass$| fail$|error|Expected|Received" "$OUT/$br-tests.log" | head -80

#!/usr/bin/env bash
# Runs one shard of the Conformance tests of OpenCL devices on PoCL built for another CPU than
# this one: the x86-64 baseline (kernel library sse2, CPU athlon64), whose work-item loops are
# vectorised 4 wide where AVX2 builds use 8 and AVX-512 builds 16, through another code
# generator. Results that depend on how PoCL schedules and compiles the work-items of a group
# show up here on any x86-64 machine. (PoCL's other work-group method, workitemrepl, compiles
# the smallest attention_merge case twenty times slower than this whole pass takes.)
#   run.sh EJK_TESTS SHARD SHARDS [GTEST_FILTER]
set -uo pipefail
tests=$1 shard=$2 shards=$3 filter=${4:-*Conformance.MatchesTheReference/*opencl_0:*DeviceFillWrites*opencl_0:*DeviceDifference*opencl_0}
export POCL_KERNELLIB_NAME=sse2
cpu=athlon64

# Debian's PoCL picks its kernel library by CPU, and POCL_KERNELLIB_NAME chooses another that
# the CPU can run; opencl:0 must be that PoCL device.
first=$(clinfo -l 2>/dev/null | grep -m1 "Device #0" || true)
if [[ $first != *pthread-$cpu* ]]; then
  if [[ ${CI:-} == true ]]; then
    echo "opencl:0 is not PoCL built for $cpu: ${first:-no OpenCL device}" >&2
    exit 1
  fi
  echo "opencl:0 is not PoCL built for $cpu (${first:-no OpenCL device}): skipped"
  exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
EJK_TEST_OPENCL_DEVICE=pthread-$cpu GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard \
  "$tests" --gtest_filter="$filter" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if ! grep -q "^\[  PASSED  \] [1-9]" "$out"; then
  echo "no test passed in this shard"
  exit 1
fi
exit "$rc"

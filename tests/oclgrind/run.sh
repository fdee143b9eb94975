#!/usr/bin/env bash
# Runs one shard of the Conformance tests of OpenCL devices under Oclgrind, a simulator that
# checks every work-item: data races, uninitialised values, out-of-bounds accesses and API
# misuse. Any report fails the test. Oclgrind is the only OpenCL platform the program sees, so
# it is opencl:0, which the tests check (EJK_TEST_OPENCL_DEVICE).
#   run.sh EJK_TESTS KEEP_BUFFERS_LIBRARY SHARD SHARDS [GTEST_FILTER]
set -uo pipefail
tests=$1 keep=$2 shard=$3 shards=$4 filter=${5:-*Conformance.MatchesTheReference/*opencl_0:*DeviceFillWrites*opencl_0:*DeviceDifference*opencl_0}

if ! oclgrind=$(command -v oclgrind); then
  if [[ ${CI:-} == true ]]; then
    echo "oclgrind is not installed (scripts/setup installs it)" >&2
    exit 1
  fi
  echo "oclgrind is not installed: skipped"
  exit 77
fi
prefix=$(dirname "$(dirname "$(readlink -f "$oclgrind")")")
runtime=
for f in "$prefix/lib/oclgrind/liboclgrind-rt.so" "$prefix/lib/liboclgrind-rt.so"; do
  [[ -f $f ]] && runtime=$f && break
done
[[ -n $runtime ]] || { echo "liboclgrind-rt.so not found beside $oclgrind" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# -cl-opt-disable: Oclgrind 21.10's uninitialised-value checker stops at LLVM's `freeze`, which
# the optimiser emits.
env LD_PRELOAD="$keep:$runtime" OCLGRIND_DATA_RACES=1 OCLGRIND_UNINITIALIZED=1 OCLGRIND_CHECK_API=1 \
  OCLGRIND_BUILD_OPTIONS=-cl-opt-disable OCLGRIND_MAX_ERRORS=20 OCLGRIND_LOG="$work/reports" \
  EJK_TEST_OPENCL_DEVICE=Oclgrind GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$shard" \
  "$tests" --gtest_filter="$filter" 2>&1 | tee "$work/out"
rc=${PIPESTATUS[0]}
fail=0
if [[ -s $work/reports ]]; then
  echo "Oclgrind reported:"
  cat "$work/reports"
  fail=1
fi
if grep -q "OCLGRIND FATAL" "$work/out"; then fail=1; fi
if ! grep -q "^\[  PASSED  \] [1-9]" "$work/out"; then
  echo "no test passed in this shard"
  fail=1
fi
[[ $rc -eq 0 && $fail -eq 0 ]]

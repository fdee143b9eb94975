#!/bin/bash
B="-I kernels -DGROUP_M=8 -DTRANS_A=0 -DTRANS_B=0 -DBF16=0"
run() { timeout 60 ./probe2.tmp.bin kernels/matmul/matmul_mma.cl "$B $1" gemm $2 $3 $4 $5 2>&1 | grep -E "GEMM|Used|spill|rror|build -|->" | grep -v "0 bytes spill" | sed 's/-I kernels -DGROUP_M=8 -DTRANS_A=0 -DTRANS_B=0 -DBF16=0//' ; }
run "-DBM=128 -DBN=256 -DBK=16 -DWM=2 -DWN=4 -DSTAGES=4 -DSWIZZLE=1 -DPIPE=1" 128 256 2 4
run "-DBM=128 -DBN=256 -DBK=16 -DWM=2 -DWN=4 -DSTAGES=4 -DSWIZZLE=1 -DPIPE=0" 128 256 2 4
run "-DBM=128 -DBN=256 -DBK=16 -DWM=2 -DWN=4 -DSTAGES=3 -DSWIZZLE=0 -DPIPE=1" 128 256 2 4
run "-DBM=128 -DBN=256 -DBK=16 -DWM=2 -DWN=4 -DSTAGES=3 -DSWIZZLE=0 -DPIPE=0" 128 256 2 4
run "-DBM=256 -DBN=128 -DBK=16 -DWM=4 -DWN=2 -DSTAGES=4 -DSWIZZLE=1 -DPIPE=1" 256 128 4 2
run "-DBM=128 -DBN=128 -DBK=16 -DWM=2 -DWN=2 -DSTAGES=4 -DSWIZZLE=0 -DPIPE=1" 128 128 2 2
run "-DBM=128 -DBN=128 -DBK=16 -DWM=2 -DWN=2 -DSTAGES=4 -DSWIZZLE=0 -DPIPE=0" 128 128 2 2
run "-DBM=128 -DBN=256 -DBK=32 -DWM=2 -DWN=4 -DSTAGES=2 -DSWIZZLE=1 -DPIPE=0 -cl-nv-maxrregcount=224" 128 256 2 4
which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -2
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 120 $NCU --target-processes all -k regex:gemm -c 1 --section WarpStateStats --section SchedulerStats --section Occupancy --section ComputeWorkloadAnalysis ./probe2.tmp.bin kernels/matmul/matmul_mma.cl "$B -DBM=128 -DBN=128 -DBK=32 -DWM=2 -DWN=2 -DSTAGES=2 -DSWIZZLE=0 -DPIPE=0" gemm 128 128 2 2 2>&1 | grep -v "^    ---\|^$" | tail -60

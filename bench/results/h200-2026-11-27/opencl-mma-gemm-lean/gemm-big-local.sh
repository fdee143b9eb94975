R=$OUT/r; mkdir -p $R
run() { # options BM BN WM WN
  timeout 60 ./probe3.tmp.bin kernels/matmul/matmul_mma.cl "-I kernels -DGROUP_M=8 -DTRANS_A=0 -DTRANS_B=0 -DBF16=0 $1" gemm $2 $3 $4 $5 2>&1 | grep -E "GEMM|check|Used|spill|rror|build -|->|local mem" | grep -v "0 bytes spill" | sed "s|-I kernels -DGROUP_M=8 -DTRANS_A=0 -DTRANS_B=0 -DBF16=0||"
}
{
run "-DBM=128 -DBN=128 -DBK=32 -DWM=2 -DWN=2 -DSTAGES=2 -DSWIZZLE=0 -DPIPE=0" 128 128 2 2
run "-DBM=128 -DBN=128 -DBK=64 -DWM=2 -DWN=2 -DSTAGES=2 -DSWIZZLE=1 -DPIPE=0" 128 128 2 2
run "-DBM=128 -DBN=128 -DBK=32 -DWM=2 -DWN=2 -DSTAGES=4 -DSWIZZLE=1 -DPIPE=0" 128 128 2 2
run "-DBM=128 -DBN=128 -DBK=32 -DWM=2 -DWN=2 -DSTAGES=4 -DSWIZZLE=0 -DPIPE=0" 128 128 2 2
run "-DBM=128 -DBN=256 -DBK=32 -DWM=2 -DWN=4 -DSTAGES=3 -DSWIZZLE=1 -DPIPE=0" 128 256 2 4
run "-DBM=128 -DBN=128 -DBK=64 -DWM=2 -DWN=2 -DSTAGES=3 -DSWIZZLE=1 -DPIPE=0" 128 128 2 2
run "-DBM=128 -DBN=256 -DBK=64 -DWM=2 -DWN=4 -DSTAGES=3 -DSWIZZLE=1 -DPIPE=1" 128 256 2 4
} > $R/gemm-big-local.txt 2>&1
cat $R/gemm-big-local.txt
cd $OUT && tar -czf r.tgz r && rm -rf r

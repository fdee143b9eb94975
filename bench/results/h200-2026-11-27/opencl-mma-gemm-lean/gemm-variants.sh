mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
run() { # root options BM BN WM WN
  timeout 60 ./probe2.tmp.bin $1/matmul/matmul_mma.cl "-I $1 -DGROUP_M=8 -DTRANS_A=0 -DTRANS_B=0 -DBF16=0 $2" gemm $3 $4 $5 $6 2>&1 | grep -E "GEMM|Used|spill|rror|build -|->" | grep -v "0 bytes spill" | sed "s|-I $1 -DGROUP_M=8 -DTRANS_A=0 -DTRANS_B=0 -DBF16=0||; s|^|$1 |"
}
{
run old.tmp.k/kernels "-DBM=128 -DBN=128 -DBK=32 -DWM=2 -DWN=2 -DSTAGES=2 -DSWIZZLE=0 -DPIPE=0" 128 128 2 2
for o in "128 128 32 2 2 2 0 0" "128 128 32 2 2 2 0 1" "128 128 32 2 2 3 1 0" "128 128 32 2 2 3 1 1" "128 256 32 2 4 2 1 0" "128 256 32 2 4 2 1 1" \
         "256 128 32 4 2 2 1 0" "256 128 32 4 2 2 1 1" "256 128 16 4 2 4 1 0" "256 128 16 4 2 4 1 1" "128 256 16 2 4 4 1 1"; do
  set -- $o
  run kernels "-DBM=$1 -DBN=$2 -DBK=$3 -DWM=$4 -DWN=$5 -DSTAGES=$6 -DSWIZZLE=$7 -DPIPE=$8" $1 $2 $4 $5
done
run old.tmp.k/kernels "-DBM=128 -DBN=128 -DBK=32 -DWM=2 -DWN=2 -DSTAGES=2 -DSWIZZLE=0 -DPIPE=0" 128 128 2 2
} > $R/gemm.txt 2>&1
cat $R/gemm.txt
timeout 60 python3 peer.tmp.py > $R/peer.txt 2>&1; head -2 $R/peer.txt
(time timeout 200 ejk_tests --gtest_filter='*Matmul*opencl_0*:*GroupedMatmul*opencl_0*:*MatmulOpenCL*') > $R/tests.txt 2>&1; grep -E "FAILED|PASSED|real" $R/tests.txt | head
timeout 60 ejk run fa64.tmp.yaml > $R/fa64.txt 2>&1; cut -c1-20,130-400 $R/fa64.txt
timeout 60 python3 fapeer64.tmp.py > $R/fapeer64.txt 2>&1; cat $R/fapeer64.txt
cd $OUT && tar -czf r.tgz r && rm -rf r

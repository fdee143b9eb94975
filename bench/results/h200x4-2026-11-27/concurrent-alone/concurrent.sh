#!/usr/bin/env bash
# One rank alone on GPU 0, then one rank on each of GPUs 0 and 1 at the same time (two mpiruns):
# does a GPU attend slower while its neighbour works?
set -u
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export PMIX_MCA_preg=native PMIX_MCA_gds=hash NCCL_NVLS_ENABLE=0
command -v ssh >/dev/null || export OMPI_MCA_plm=isolated
export EJK_CACHE_DIR=$(mktemp -d)
mpirun=$(command -v mpirun || command -v mpirun.openmpi)
R=$OUT/c; mkdir -p $R
b() { $mpirun -n 1 --bind-to none ejk_ring_attention_bench --device $1 --dtype f16 --batch 1 --heads 16 --kv-heads 16 --dim 128 --shard 8192 --reps 20 > $R/$2.txt 2>&1; }
b cuda:0 alone0
for i in 1 2; do b cuda:0 pair$i-gpu0 & b cuda:1 pair$i-gpu1 & wait; done
b cuda:0 alone0-again
b cuda:1 alone1
for f in $R/*.txt; do echo "$(basename $f): $(grep -h summary $f | sed 's/.*pass=\([a-z]*\).*aggregate_tflops=\([0-9.]*\).*/\1 \2/' | tr '\n' ' ')"; done

# mla_decode on Vulkan: the merge with 4, 2 and 1 sequences a group (EJK_TMP_ROWS, an experimental build), pass by pass, alternating.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
for rows in 4 2 1 4 2 1 4 2 1; do EJK_TMP_ROWS=$rows timeout 60 ejk --device vulkan:0 run $S/mla.yaml --passes --check > $R/mla-passes-rows$rows.txt 2>&1; echo rows $rows; tail -4 $R/mla-passes-rows$rows.txt | cut -c1-20,125-160; done
cd $OUT && tar -czf r.tgz r && rm -rf r

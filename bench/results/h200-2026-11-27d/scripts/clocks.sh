mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $R/smi.txt 2>&1 &
SMI=$!
timeout 90 ejk run run.yaml > $R/run1.txt 2>&1; echo run1 $(date +%T.%N) >> $R/marks.txt
EJK_LOG_TUNE=1 timeout 100 ejk tune clocks.yaml > $R/tune2.txt 2>&1; echo tune2 $(date +%T.%N) >> $R/marks.txt
timeout 90 ejk run run.yaml > $R/run2.txt 2>&1; echo run2 $(date +%T.%N) >> $R/marks.txt
EJK_LOG_TUNE=1 timeout 100 ejk tune clocks.yaml --force > $R/tune3.txt 2>&1; echo tune3 $(date +%T.%N) >> $R/marks.txt
kill $SMI
cat $R/run1.txt $R/tune2.txt $R/run2.txt $R/tune3.txt | cut -c1-150
cat $R/marks.txt
cd $OUT && tar -czf r.tgz r && rm -rf r

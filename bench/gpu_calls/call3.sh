#!/usr/bin/env bash
# GPU call 3 (issue 64): the warm-process ratio of the last wave (a 6-test file under plain --aoti-debug, before and
# after), the tree of 7761002 as "before".
. .gpu_wheels/env.sh
nvidia-smi -L; nproc
timeout 585 python3 bench/warm_process_benchmark.py --device cuda --suite-only --before-tree .gpu_wheels/before --limit 260 > "$OUT/warm_suite.txt" 2>&1
echo "warm rc $?"
tail -40 "$OUT/warm_suite.txt"

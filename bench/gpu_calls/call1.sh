#!/usr/bin/env bash
# GPU call 1 (issues 61 and 64): tests/gpu, with issue 61's probes beside it (none of them is a timing).
. .gpu_wheels/env.sh
nvidia-smi -L; nproc; python3 -c "import torch, transformers, sys; print(torch.__version__, transformers.__version__, sys.version)"
( mkdir -p /tmp/probe; export OUT=/tmp/probe
  timeout 250 python3 bench/gpu_real_arch_probe.py precision > /tmp/probe/precision.txt 2>&1; echo "rc $?" >> /tmp/probe/precision.txt
  timeout 130 python3 bench/gpu_real_arch_probe.py assert-compile > /tmp/probe/assert_compile.txt 2>&1; echo "rc $?" >> /tmp/probe/assert_compile.txt
  timeout 130 python3 bench/gpu_real_arch_probe.py assert-compile --no-autotune > /tmp/probe/assert_compile_noautotune.txt 2>&1; echo "rc $?" >> /tmp/probe/assert_compile_noautotune.txt
) &
start=$(date +%s)
timeout 545 python3 -m pytest -p pytest_aoti.plugin tests/gpu -n 12 -p no:cacheprovider -rA > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $? in $(( $(date +%s) - start )) s"
wait
cp /tmp/probe/*.txt "$OUT"/ 2>/dev/null
tail -40 "$OUT/gpu_suite.log"
for f in /tmp/probe/*.txt; do echo "== $f"; tail -c 1500 "$f"; done

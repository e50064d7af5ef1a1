#!/usr/bin/env bash
# GPU call 2 (issue 63): the fleet bench's GPU form, 112 transformers models, one H100/H200, -n 15.
. .gpu_wheels/env.sh
nvidia-smi -L; nproc
timeout 585 python3 bench/fleet.py --models all --device cuda -n 15 > "$OUT/fleet_cuda.txt" 2>&1
echo "fleet rc $?"
tail -60 "$OUT/fleet_cuda.txt"

#!/usr/bin/env bash
# Builds .gpu_wheels/ (ignored by git), the folder a GPU call carries: what the device machine lacks (redis-server
# and its libraries, the redis client, pytest-html and pytest-metadata with their dist-info) and the tree of 7761002
# for the warm-process "before" run. Run it here, then each call as
#   run(command="bash bench/gpu_calls/call1.sh", carry=[".gpu_wheels"])
# (docs/gpu-validation.md lists the calls and what each one answers).
set -euo pipefail
cd "$(dirname "$0")/../.."
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -rf .gpu_wheels && mkdir -p .gpu_wheels/bin .gpu_wheels/lib .gpu_wheels/py .gpu_wheels/before
cp "$(command -v redis-server)" .gpu_wheels/bin/redis-server.bin
for library in liblzf.so.1 libjemalloc.so.2 libatomic.so.1; do cp -L "/lib/x86_64-linux-gnu/$library" .gpu_wheels/lib/; done
cat > .gpu_wheels/bin/redis-server <<'WRAPPER'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/redis-server.bin" "$@"
WRAPPER
chmod +x .gpu_wheels/bin/*
cp -r "$site/redis" "$site/pytest_html" "$site/pytest_metadata" .gpu_wheels/py/
# Their dist-info too: pytest finds pytest-html's plugin through its entry point.
cp -r "$site"/redis-*.dist-info "$site"/pytest_html-*.dist-info "$site"/pytest_metadata-*.dist-info .gpu_wheels/py/
git archive 7761002 | tar -x -C .gpu_wheels/before
cat > .gpu_wheels/env.sh <<'ENV'
export LD_PRELOAD=libstdc++.so.6
export PATH=$PWD/.gpu_wheels/bin:$PATH
export PYTHONPATH=$PWD:$PWD/.gpu_wheels/py
ENV
.gpu_wheels/bin/redis-server --version
du -sh .gpu_wheels

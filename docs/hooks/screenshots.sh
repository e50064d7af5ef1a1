#!/usr/bin/env bash
# Screenshots of the main pages of the built site (docs/screenshots/*.png), as headless Chromium renders them.
# Usage: .venv/bin/mkdocs build --strict && bash docs/hooks/screenshots.sh   (needs `apt-get install chromium`)
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${PORT:-8765}
.venv/bin/python -m http.server "$port" --bind 127.0.0.1 --directory site >/dev/null 2>&1 &
server=$!
trap 'kill "$server"' EXIT
sleep 1
mkdir -p docs/screenshots
for page in index getting-started debugging cache ci goldens pictures troubleshooting architecture reference/options \
    reference/markers-fixtures reference/hooks reference/exceptions; do
    url="http://127.0.0.1:$port/${page%index}"
    [[ $page == index ]] || url+=/
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1600 \
        --screenshot="docs/screenshots/${page//\//-}.png" "$url" 2>/dev/null
done

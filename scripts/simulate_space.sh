#!/usr/bin/env bash
# A Hugging Face Space's first start, simulated on this machine: a fresh virtualenv from requirements.txt alone, a
# copy of the repository's tracked files, `python app.py` with SPACE_ID set, an empty HOME and no other variable,
# then one visitor's generation through the page (scripts/drive_page.py, Debian's Chromium) with its defaults.
#
#   bash scripts/simulate_space.sh [VENV]      # VENV: default /tmp/space (made when missing)
#
# Heavy (the 1.5B model is prepared from scratch in the empty HOME, ~7 GB written): run it under a lock where the
# machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/space}
port=${PORT:-7871}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -r requirements.txt
fi
work=$(mktemp -d /tmp/space-run-XXXXXX)
mkdir "$work/home" "$work/repo"
git ls-files -z | xargs -0 cp --parents -t "$work/repo"
echo "repository copy: $work/repo, HOME: $work/home (empty), log: $work/app.log"
(cd "$work/repo" && exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$work/home" SPACE_ID=simulated/bass \
   PORT="$port" "$venv/bin/python" app.py) > "$work/app.log" 2>&1 &
app=$!
trap 'kill $app 2>/dev/null; wait $app 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -fs "http://127.0.0.1:$port/" >/dev/null && break
  kill -0 $app 2>/dev/null || { tail -40 "$work/app.log"; exit 1; }
  sleep 1
done
"$venv/bin/python" scripts/drive_page.py "http://127.0.0.1:$port/"
echo "--- the app's log (last 25 lines) ---"
tail -25 "$work/app.log"

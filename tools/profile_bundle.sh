#!/usr/bin/env bash
# Profile the bundled networks on the GPU host, resuming from a carried SQLite cache.
# Usage (on the GPU host, repo root): bash tools/profile_bundle.sh SECONDS "net batch precision layout policy" ...
# Writes $OUT/profiles.tar (the .profile.json.gz files), $OUT/cache.sqlite.gz and $OUT/profile.log.
set -u
budget=$1; shift
deadline=$(( $(date +%s) + budget ))
cache=${CACHE:-.gpucache/profiles.sqlite}
[ -f "$cache.gz" ] && [ ! -f "$cache" ] && gunzip -c "$cache.gz" > "$cache"
mkdir -p "$(dirname "$cache")" /tmp/profiles
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
for spec in "$@"; do
  read -r net batch prec layout policy <<<"$spec"
  left=$(( deadline - $(date +%s) ))
  if (( left < 20 )); then echo "SKIP (no time left): $spec" | tee -a $OUT/profile.log; continue; fi
  out=/tmp/profiles/${gpu}-${net}-b${batch}-${prec}-${layout,,}-${policy}.profile.json.gz
  echo "== $spec (time left ${left}s)" | tee -a $OUT/profile.log
  timeout $left python3 -m engine profile --network "$net" --batch "$batch" --dtype "$prec" --layout "$layout" \
      --policy "$policy" --cache "$cache" -o "$out" 2>&1 | tr '\r' '\n' | grep -v '^\[' | tee -a $OUT/profile.log
done
(cd /tmp/profiles && tar cf $OUT/profiles.tar *.profile.json.gz 2>/dev/null)
gzip -c "$cache" > $OUT/cache.sqlite.gz

#!/usr/bin/env bash
# The GPU runs behind the reports (issue 10). Usage (GPU host, repo root, $OUT set):
#   bash tools/reports_gpu.sh STAGE [STAGE...]     stages run in order, each writing under $OUT:
#   labels:    tools/label_notes.py relabels assets/profiles in place (starts no file after 420 s; a rerun skips the
#              files done) -> $OUT/profiles.tar, $OUT/label-notes.log
#   side:      benchmarks/side_by_side.py measure --torch (3 runs) -> $OUT/side_by_side_results.json.gz, side_by_side.log
#   profiling: benchmarks/profiling.py measure (2 cold, 5 warm) -> $OUT/profiling.json, $OUT/profiling.log
# Back here: tar xf profiles.tar -C assets/profiles; copy the rest into benchmarks/reports/; then
# `python benchmarks/side_by_side.py report` and `python benchmarks/profiling.py report`.
set -uo pipefail
export PYTHONUNBUFFERED=1
for stage in "$@"; do
  case "$stage" in
    labels)
      # the policy-`all` profile last: the side-by-side benchmark does not read it
      python3 tools/label_notes.py --budget-s 420 $(ls assets/profiles/*.profile.json.gz | grep -v -- -all.profile) \
        assets/profiles/*-all.profile.json.gz 2>&1 | tee -a "$OUT/label-notes.log"
      (cd assets/profiles && tar cf "$OUT/profiles.tar" *.profile.json.gz) ;;
    side)
      python3 benchmarks/side_by_side.py measure --torch --budget-s 420 -o "$OUT/side_by_side_results.json.gz" 2>&1 \
        | tee "$OUT/side_by_side.log" ;;
    profiling)
      python3 benchmarks/profiling.py measure -o "$OUT/profiling.json" 2>&1 | tee "$OUT/profiling.log" ;;
    *) echo "unknown stage $stage (labels, side, profiling)" >&2; exit 2 ;;
  esac
done

#!/usr/bin/env bash
# The GPU runs behind the reports (issue 10), one stage per device call (each well inside 10 minutes).
# Usage (GPU host, repo root, $OUT set): bash tools/reports_gpu.sh labels | side | profiling
#   labels:    tools/label_notes.py relabels assets/profiles in place -> $OUT/profiles.tar, $OUT/label-notes.log
#              (a file it finished is skipped by a rerun, so a second call resumes)
#   side:      benchmarks/side_by_side.py measure --torch -> $OUT/side_by_side_results.json.gz, $OUT/side_by_side.log
#   profiling: benchmarks/profiling.py measure -> $OUT/profiling.json, $OUT/profiling.log
# Back here: tar xf profiles.tar -C assets/profiles; copy the rest to benchmarks/reports/; then run
# `python benchmarks/side_by_side.py report` and `python benchmarks/profiling.py report`.
set -uo pipefail
export PYTHONUNBUFFERED=1
case "${1:?stage: labels, side or profiling}" in
  labels)
    python3 tools/label_notes.py --budget-s 420 assets/profiles/*.profile.json.gz 2>&1 | tee "$OUT/label-notes.log"
    (cd assets/profiles && tar cf "$OUT/profiles.tar" *.profile.json.gz) ;;
  side)
    python3 benchmarks/side_by_side.py measure --torch --budget-s 420 -o "$OUT/side_by_side_results.json.gz" 2>&1 \
      | tee "$OUT/side_by_side.log" ;;
  profiling)
    python3 benchmarks/profiling.py measure -o "$OUT/profiling.json" 2>&1 | tee "$OUT/profiling.log" ;;
  *) echo "unknown stage $1" >&2; exit 2 ;;
esac

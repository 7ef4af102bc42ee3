#!/usr/bin/env bash
# Issue 23's GPU acceptance on the modern torchvision models, one part per call (each under 9 minutes on one
# H100), run from the repository root on a GPU host; results and a log under $OUT:
#   benchmarks/modern_gpu.sh memory     # memory_training: MobileNetV3-Large, EfficientNet-B0, ConvNeXt-Tiny,
#                                       #   RegNetY-1.6GF, ViT-B/16 under liveness, vdnn-all-p, sn-recompute
#                                       #   (their profiles and calibration first); repeat until it says "all done"
#   benchmarks/modern_gpu.sh torch      # torch_training: MobileNetV3-Large, EfficientNet-B0, ConvNeXt-Tiny TF32,
#                                       #   stock-free, legacy-64, wr-64-free, wr-256-free (profiles first)
#   benchmarks/modern_gpu.sh examples   # examples/optimize_user_model.py on the three: loss and gradients vs stock
# A part resumes from the results in benchmarks/reports (copied into $OUT first): copy $OUT's files back there
# (the *_profile_cache folder and memory_training_profiles/profile-cache.sqlite are git-ignored caches: carry them
# to the next call to skip what they hold), then write the reports and README blocks on any host:
#   python benchmarks/memory_training.py report benchmarks/reports/memory_training.json
#   python benchmarks/torch_training.py report benchmarks/reports/torch_training.json
# (the reports in $OUT are for a look at the device's results only). FP16=1 adds the fp16 channels_last AMP rows to
# `torch`.
set -o pipefail
OUT=${OUT:-.}
R=benchmarks/reports
MODERN="mobilenet_v3_large efficientnet_b0 convnext_tiny regnet_y_1_6gf vit_b_16"
PLANNED="mobilenet_v3_large efficientnet_b0 convnext_tiny"
mkdir -p "$OUT"
header() {
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
  echo "code: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
}
keep() {  # results so far, into $OUT (not over what a run there already wrote)
  for f in "$@"; do [ -e "$R/$f" ] && [ ! -e "$OUT/$f" ] && cp -r "$R/$f" "$OUT/"; done
  return 0
}
case "$1" in
  memory)
    keep memory_training.json memory_training_time_params.json memory_training_profiles
    {
      header
      python3 benchmarks/memory_training.py measure -o "$OUT/memory_training.json" --resume --configs $MODERN \
        --parts calibrate policies --policies liveness vdnn-all-p sn-recompute --budget-s 400 --timeout 120
      echo "exit $?"
      python3 benchmarks/memory_training.py report "$OUT/memory_training.json" -o "$OUT/memory_training.md"
    } 2>&1 | tee -a "$OUT/memory_training-modern.log"
    ;;
  torch)
    keep torch_training.json torch_training_profile_cache
    configs=$(for n in $PLANNED; do echo -n "$n:tf32 "; [ -n "$FP16" ] && echo -n "$n:fp16 "; done)
    {
      header
      python3 benchmarks/torch_training.py measure -o "$OUT/torch_training.json" --resume --configs $configs \
        --profile-cache "$OUT/torch_training_profile_cache" --engines heuristics --budget-s 420
      echo "exit $?"
      python3 benchmarks/torch_training.py report "$OUT/torch_training.json" -o "$OUT/torch_training.md"
    } 2>&1 | tee -a "$OUT/torch_training-modern.log"
    ;;
  examples)
    keep torch_training_profile_cache
    mkdir -p "$OUT/torch_training_profile_cache"
    failed=0
    {
      header
      for n in $PLANNED; do
        echo "== optimize(model, budget='64MiB') on torchvision:$n b64, loss and every gradient against stock"
        python3 examples/optimize_user_model.py --model "torchvision:$n" --batch 64 --steps 2 --engines heuristics \
          --cache "$OUT/torch_training_profile_cache/profiles.sqlite"
        rc=$?; echo "exit $rc"; [ $rc -eq 0 ] || failed=1
      done
      echo "all three: $([ $failed -eq 0 ] && echo passed || echo FAILED)"
      exit $failed
    } 2>&1 | tee -a "$OUT/optimize-modern.log"
    ;;
  *)
    echo "usage: benchmarks/modern_gpu.sh memory|torch|examples" >&2
    exit 2
    ;;
esac

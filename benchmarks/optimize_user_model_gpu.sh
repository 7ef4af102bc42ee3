#!/usr/bin/env bash
# The GPU check of issue 22's one-line API on a model of one's own (examples/user_model.py), as run for
# benchmarks/reports/optimize-user-model.log: optimize() in a fresh process (loss and gradients against
# stock), a second fresh process on the same cache (measures nothing), then torch-plan's plan file applied
# in a fresh process without trust; and optimize() in strict fp32. Run from the repository root on a GPU host; logs to ${OUT:-.}/log.
set -o pipefail
OUT=${OUT:-.}
CACHE=${CACHE:-/tmp/ucudnn-optimize-user.sqlite}
rm -f "$CACHE"
{
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, cudnn; v = cudnn.backend_version(); print(f'torch {torch.__version__} (CUDA {torch.version.cuda}), cuDNN {v // 10000}.{v % 10000 // 100}.{v % 100}, frontend {cudnn.__version__}, {torch.cuda.get_device_name()}')"
  echo "code: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
  echo "== 1: optimize(model, budget='64MiB') in a fresh process, empty cache"
  python3 examples/optimize_user_model.py --engines heuristics --cache "$CACHE" --steps 3; echo "exit $?"
  echo "== 2: the same in a second fresh process, same cache"
  python3 examples/optimize_user_model.py --engines heuristics --cache "$CACHE" --steps 3; echo "exit $?"
  echo "== 3: torch-plan for the same model, then apply_plan of that file in a fresh process (no trust)"
  python3 -m engine torch-plan --network examples.user_model:build@3x64x64 --batch 32 --budget 64MiB \
    --engines heuristics --cache "$CACHE" -o /tmp/user.plan.json; echo "exit $?"
  python3 examples/optimize_user_model.py --apply /tmp/user.plan.json --steps 3; echo "exit $?"
  echo "== 4: optimize in strict fp32 (TF32 off), fresh process"
  python3 examples/optimize_user_model.py --engines heuristics --cache "$CACHE" --steps 3 --fp32; echo "exit $?"
} 2>&1 | tee "$OUT/log"

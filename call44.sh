#!/usr/bin/env bash
# call 44 (5384892): the profiler's GPU tests and the Dask tests (CPU fakes and the real-GPU one) after Dask
# workers may share a GPU (gpu_lock) and measure_on_gpu takes the GPU's lock.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site out/whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD/out/pydeps:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
  python3 -c "import torch,cudnn,cupy,distributed;print('torch',torch.__version__,'cudnn',torch.backends.cudnn.version(),'frontend',cudnn.__version__,'cupy',cupy.__version__,'distributed',distributed.__version__)"; echo code 5384892; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
python3 -m pytest -q -p no:benchmark -p no:cacheprovider tests/test_gpu.py tests/test_distributed_profile.py 2>&1 | tail -15 | tee $OUT/tests.log

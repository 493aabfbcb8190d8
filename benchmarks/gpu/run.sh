#!/usr/bin/env bash
# The GPU benchmark in one unattended run, on a GPU machine without network that has torch, transformers and
# accelerate but not the rest of the trainer's needs. Here first: python benchmarks/gpu/wheelhouse.py build (makes
# .gpu/); carry .gpu to the machine, then, from the repository's root there:
#     bash benchmarks/gpu/run.sh            # writes $OUT/gpu_trainer_speed.json and $OUT/log.txt
# BUDGET (seconds, default 400) bounds the training runs; the install and checks take about half a minute more.
# Arguments go to trainer_speed.py (--dry-run: a CPU run of the same code).
set -euo pipefail
OUT=${OUT:-$PWD/gpu-out}
VENV=${VENV:-/tmp/agentfly-venv}
mkdir -p "$OUT"
# A venv that sees the machine's own packages (torch) through a .pth file, so that what it installs shadows them
# without touching them; the machine's pip installs into it (the venv has none of its own).
rm -rf "$VENV"
python3 -m venv --without-pip "$VENV"
system_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
venv_site=$("$VENV"/bin/python -c 'import site; print(site.getsitepackages()[0])')
echo "$system_site" >"$venv_site/agentfly-system.pth"
python3 -m pip --python "$VENV"/bin/python install -q --no-index --find-links .gpu/wheels \
    trl datasets gymnasium hydra-core omegaconf math-verify
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
"$VENV"/bin/python benchmarks/gpu/wheelhouse.py check | tee "$OUT/log.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/log.txt" || true
"$VENV"/bin/python benchmarks/gpu/trainer_speed.py --out "$OUT/gpu_trainer_speed.json" \
    --budget "${BUDGET:-400}" "$@" 2>&1 | tee -a "$OUT/log.txt"

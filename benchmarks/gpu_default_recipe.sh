#!/usr/bin/env bash
# bench_recipe.py default-recipe's grid on one GPU host, in lanes run side by side (the GPU is launch-bound at these
# sizes, so concurrent processes add throughput): every lane of benchmarks/gpu_default_recipe.cells is one process.
#
# Prepare here (the host has neither PyAV nor OpenImageIO; .gpu/ is git-ignored and travels as a carried path):
#     mkdir -p .gpu/stub && .venv/bin/python benchmarks/bench_recipe.py default-recipe --save-decoded .gpu/clips.npz
#     echo '"""Stand-in: the benchmark reads no image files."""' > .gpu/stub/OpenImageIO.py
# Run there:  bash benchmarks/gpu_default_recipe.sh OUT_DIR [START_DEADLINE_S] [KILL_AFTER_S]
# No cell starts after START_DEADLINE_S (default 330 s); a lane still running at KILL_AFTER_S (default 480 s) is
# stopped and loses only its running cell. OUT_DIR gets default_recipe_gpu.json (every finished row), log.txt and
# table.md. Environment: PY (python, default python3), DEVICE (default cuda), CELLS (default the .cells file).
set -u
out=${1:?usage: gpu_default_recipe.sh OUT_DIR [START_DEADLINE_S] [KILL_AFTER_S]}
start_deadline=${2:-330}
kill_after=${3:-480}
py=${PY:-python3}
here=$(cd "$(dirname "$0")" && pwd)
cells=${CELLS:-$here/gpu_default_recipe.cells}
lanes=$(mktemp -d)
export PYTHONPATH="$here/../.gpu/stub${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true; \
 "$py" -c 'import torch; print("torch", torch.__version__)') | tee "$out/log.txt"
awk -v d="$lanes" '!/^#/ && NF == 6 {f = $1; $1 = ""; print substr($0, 2) > (d "/" f ".txt")}' "$cells"
for f in "$lanes"/*.txt; do
    timeout "$kill_after" "$py" "$here/bench_recipe.py" default-recipe --device "${DEVICE:-cuda}" \
        --decoded "$here/../.gpu/clips.npz" --cells "$f" --deadline "$start_deadline" --threads 1 \
        --json "${f%.txt}.json" >"${f%.txt}.log" 2>&1 &
done
wait
for f in "$lanes"/*.log; do echo "== $(basename "$f")"; cat "$f"; done >>"$out/log.txt"
"$py" - "$lanes" "$out/default_recipe_gpu.json" <<'PY'
import json, sys
from pathlib import Path
rows = [r for f in sorted(Path(sys.argv[1]).glob("*.json")) for r in json.loads(f.read_text())["rows"]]
Path(sys.argv[2]).write_text(json.dumps({"rows": rows}, indent=1))
print(len(rows), "rows")
PY
"$py" "$here/bench_recipe.py" default-recipe --from-json "$out/default_recipe_gpu.json" | tee "$out/table.md"

"""Step overhead of the gradient-noise-scale measurement (trainer/noise_scale.py), 1 rank at sync 1 (the halves
split), against the c47904a forward/backward, alternating runs; prints median images/s and the ratio.

Usage: python benchmarks/bench_noise_overhead.py INPUT_DIR TARGET_DIR {fp32,auto} [RUN_ROOT]
Run it under the heavy lock; a loaded machine gives meaningless ratios.
"""
import statistics, sys, time, contextlib
import torch
from trainer import train as T
from trainer.config import TrainConfig
from trainer.envvars import DistEnv
from trainer.rundir import RunPaths, read_metrics

pairs = sys.argv[1:3]
root = sys.argv[4] if len(sys.argv) > 4 else __import__("tempfile").mkdtemp(prefix="noise_overhead_")
orig_fb, orig_mn = T._Loop._forward_backward, T._Loop._measure_noise

def plain_fb(self, model, batch):  # the c47904a body
    with self.precision.autocast():
        out = model(batch.input)
    per_crop = (out.float() - batch.target).abs().mean(dim=(1, 2, 3))
    loss_sum = per_crop.sum() / self.sampler.local_batch * self.loss_weight / self.env.sync_interval
    self.scaler.scale(loss_sum).backward()
    return per_crop.detach()

res = {"noise": [], "plain": []}
for rep in range(3):
    for mode in ("plain", "noise"):
        T._Loop._forward_backward = orig_fb if mode == "noise" else plain_fb
        T._Loop._measure_noise = orig_mn if mode == "noise" else (lambda self: None)
        c = TrainConfig(input_dir=pairs[0], target_dir=pairs[1], run_dir=f"{root}/ov_{mode}_{rep}", steps=60,
                        batch_size=8, crop_size=64, log_interval=20, checkpoint_interval=1000,
                        contact_sheet_interval=1000, precision=sys.argv[3])
        T.train(c, DistEnv(distributed=False))
        rows = read_metrics(RunPaths.of(c.run_dir))
        res[mode].append(statistics.median(r["images_per_s"] for r in rows[1:]))
p, n = statistics.median(res["plain"]), statistics.median(res["noise"])
print(sys.argv[3], "images/s plain", res["plain"], "noise", res["noise"], f"overhead {100*(p/n-1):.1f}%")

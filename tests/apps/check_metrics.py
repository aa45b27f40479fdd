#!/usr/bin/env python3
"""check_metrics.py FILE STEPS RANKS [LR MIN_LR WARMUP]: the --metrics file holds one JSON
object per logged step with the fields DESIGN.md promises; the file (removed before the run)
holds exactly STEPS lines. With LR, MIN_LR and WARMUP (the run's --lr, --min-lr and
--warmup-steps), each step's lr is the documented schedule's: a linear warm-up to LR over
WARMUP steps, then a half cosine that reaches MIN_LR at the last step."""
import json
import math
import sys

path, steps, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def scheduled_lr(step, lr, min_lr, warmup):
    """The rate of step `step` (1-based, as logged) of a run of `steps` steps."""
    if step <= warmup:
        return lr * step / warmup
    decaying = steps - warmup  # steps after the warm-up; the first at LR, the last at MIN_LR
    if decaying <= 1:
        return lr
    done = (step - warmup - 1) / (decaying - 1)
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * done)) / 2

rows = [json.loads(line) for line in open(path)]
assert [r["step"] for r in rows] == list(range(1, steps + 1)), rows
for r in rows:
    for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mfu"):
        assert key in r and r[key] is not None, (key, r)
    assert math.isfinite(r["loss"]) and r["loss"] > 0, r
    for key in ("peak_param_bytes", "peak_grad_bytes", "peak_optimizer_bytes", "peak_activation_bytes"):
        assert len(r[key]) == ranks and all(b > 0 for b in r[key]), (key, r)
assert "val_loss" in rows[-1], rows[-1]
if len(sys.argv) > 4:
    lr, min_lr, warmup = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
    for r in rows:
        want = scheduled_lr(r["step"], lr, min_lr, warmup)
        assert abs(r["lr"] - want) <= 1e-6 * want, (r["step"], r["lr"], want)
    print(f"ok: lr {[r['lr'] for r in rows]}")
print(f"ok: {len(rows)} metrics lines")

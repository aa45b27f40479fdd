#!/usr/bin/env python3
"""check_metrics.py FILE STEPS RANKS: the --metrics file holds one JSON object per logged
step with the fields DESIGN.md promises; the file (removed before the run) holds exactly
STEPS lines."""
import json
import math
import sys

path, steps, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(line) for line in open(path)]
assert [r["step"] for r in rows] == list(range(1, steps + 1)), rows
for r in rows:
    for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mfu"):
        assert key in r and r[key] is not None, (key, r)
    assert math.isfinite(r["loss"]) and r["loss"] > 0, r
    for key in ("peak_param_bytes", "peak_grad_bytes", "peak_optimizer_bytes", "peak_activation_bytes"):
        assert len(r[key]) == ranks and all(b > 0 for b in r[key]), (key, r)
assert "val_loss" in rows[-1], rows[-1]
print(f"ok: {len(rows)} metrics lines")

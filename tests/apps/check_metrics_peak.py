#!/usr/bin/env python3
"""check_metrics_peak.py FILE -- COMMAND...: runs COMMAND (a run whose parameters are held
only around their use: ZeRO 3, 16-bit storage), which logs every step to --metrics FILE; each
line's peak_param_bytes must be the peak its log reports ('parameters X' between steps,
'peak parameters in a pass Y', MiB), the larger of the two, on every rank."""
import json
import os
import re
import subprocess
import sys

path, command = sys.argv[1], sys.argv[3:]
if os.path.exists(path):
    os.remove(path)
run = subprocess.run(command, capture_output=True, text=True, timeout=120)
log = run.stdout + run.stderr
if run.returncode != 0:
    sys.exit(f"FAIL: the run exited {run.returncode}:\n{log[-2000:]}")
held = re.search(r"memory of rank 0 \(MiB\): parameters ([0-9.]+),.*peak parameters in a pass ([0-9.]+)", log)
if not held:
    sys.exit(f"FAIL: no 'peak parameters in a pass' in the log:\n{log[-2000:]}")
want = max(float(held.group(1)), float(held.group(2)))
rows = [json.loads(line) for line in open(path)]
for r in rows:
    got = [b / 2**20 for b in r["peak_param_bytes"]]
    if any(abs(g - want) > 1e-6 for g in got):
        sys.exit(f"FAIL: step {r['step']}: peak_param_bytes {r['peak_param_bytes']} ({got} MiB), the log's peak {want} MiB")
print(f"ok: {len(rows)} lines with peak_param_bytes {rows[0]['peak_param_bytes']} ({want} MiB, the log's peak)")

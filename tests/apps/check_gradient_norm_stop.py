#!/usr/bin/env python3
"""dtrain-gpt stops before the update when a step's loss is finite but its gradient norm is
not: a checkpoint whose final LayerNorm bias h5py set to 3.3e38 gives every token the same
huge logits (a finite loss near 1e38) whose embedding gradients overflow fp32 when the two
data-parallel ranks add them. The run must exit with status 2 and the divergence message,
having written no checkpoint of the step it refused.

usage: check_gradient_norm_stop.py MPIEXEC NPFLAG GPT SCRATCH   (exit 77 = skipped: no h5py)
"""
import os
import shutil
import subprocess
import sys

from check_checkpoint import checksum  # exits 77 itself where h5py is missing
import h5py
import numpy as np

mpiexec, npflag, gpt, scratch = sys.argv[1:5]
MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "16",
         "--micro-batch", "2", "--global-batch", "8", "--eval-every", "0", "--log-every", "1"]


def run(ranks, *args):
    command = [mpiexec, npflag, str(ranks), gpt, *MODEL, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    print("$", " ".join(command), "->", done.returncode)
    print(done.stdout + done.stderr)
    return done


shutil.rmtree(scratch, ignore_errors=True)
first, second = os.path.join(scratch, "first"), os.path.join(scratch, "second")
if run(2, "--steps", "1", "--save-dir", first, "--save-every", "1").returncode != 0:
    sys.exit("FAIL: the first step did not train")
poisoned = os.path.join(scratch, "poisoned.h5")
shutil.copyfile(os.path.join(first, "step_00000001.h5"), poisoned)
with h5py.File(poisoned, "r+") as f:
    bias = f["model/ln_f.bias"]
    value = np.full(bias.shape, 3.3e38, dtype="<f4")
    bias[...] = value
    bias.attrs["checksum"] = np.uint64(checksum(value))

done = run(2, "--steps", "2", "--resume", poisoned, "--save-dir", second, "--save-every", "1")
out = done.stdout + done.stderr
failures = []
if done.returncode != 2:
    failures.append("exit status %d, expected 2" % done.returncode)
if "training diverged: the gradient norm of step 2 is inf" not in out:
    failures.append("no divergence message naming the gradient norm")
if "the loss of step 2" in out:
    failures.append("the loss, not the gradient norm, was reported non-finite")
if os.path.isdir(second) and any(n.startswith("step_") for n in os.listdir(second)):
    failures.append("a checkpoint was written: %s" % os.listdir(second))
for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)

"""check_safetensors.py TOOL CHECKPOINT OUT: `TOOL export CHECKPOINT OUT`, then parses the
safetensors file with numpy alone (the documented way) and compares every tensor bitwise with
h5py's reading of /model. Exits 77 (skipped) where h5py is missing."""
import json
import subprocess
import sys

import numpy as np

try:
    import h5py
except ImportError:
    print("h5py not available: skipped")
    sys.exit(77)

tool, ckpt, out = sys.argv[1:4]
subprocess.run([tool, "export", ckpt, out], check=True)

with open(out, "rb") as f:
    blob = f.read()
n = int.from_bytes(blob[:8], "little")
assert n % 8 == 0, f"header length {n} is not a multiple of 8"
header = json.loads(blob[8:8 + n])
data = memoryview(blob)[8 + n:]
meta = header.pop("__metadata__")
assert meta["format"] == "dtrain-checkpoint", meta

with h5py.File(ckpt, "r") as f:
    names = sorted(f["model"].keys())
    assert sorted(header) == names, (sorted(header), names)
    assert int(meta["step"]) == int(f.attrs["step"])
    end = 0
    for name in names:
        t = header[name]
        assert t["dtype"] == "F32", t
        begin, stop = t["data_offsets"]
        assert begin == end, f"{name}: gap or overlap at {begin}"
        end = stop
        a = np.frombuffer(data[begin:stop], dtype="<f4").reshape(t["shape"])
        b = f["model"][name][...]
        assert a.shape == b.shape, (name, a.shape, b.shape)
        assert np.array_equal(a.view("<u4"), b.astype("<f4").view("<u4")), f"{name} differs"
    assert end == len(data), f"data is {len(data)} bytes, offsets end at {end}"
print(f"ok: {len(names)} tensors match h5py bitwise")

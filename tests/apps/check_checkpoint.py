#!/usr/bin/env python3
"""Reads a dtrain checkpoint with h5py (not dtrain) and checks it against
docs/checkpoint-format.md: format attributes, the documented checksum of every dataset
(/model/wte first), moments beside their parameters.

usage: check_checkpoint.py FILE EXPECTED_STEP   (exit 77 = skipped: no h5py)
"""
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("h5py/numpy not available: skipped")
    sys.exit(77)

M64 = (1 << 64) - 1


def checksum(data):
    """sum over elements of the high 32 bits of splitmix64(i * golden + bits), mod 2^64."""
    bits = np.ascontiguousarray(data, dtype="<f4").reshape(-1).view("<u4").astype(np.uint64)
    x = np.arange(bits.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + bits
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return int((x >> np.uint64(32)).sum(dtype=np.uint64)) & M64


def put_nan(f, path, index):
    """h5py edit: a NaN at element index of dataset path, its checksum made to match."""
    data = f[path][...]
    data.flat[index] = np.nan
    f[path][...] = data
    with np.errstate(over="ignore"):
        f[path].attrs["checksum"] = np.uint64(checksum(data))


def main(path, step):
    with np.errstate(over="ignore"), h5py.File(path, "r") as f:
        assert f.attrs["format"] == b"dtrain-checkpoint", f.attrs["format"]
        assert int(f.attrs["format_version"]) == 1
        assert f.attrs["checksum_algorithm"] == b"sum-splitmix64-hi32-v1"
        assert int(f.attrs["step"]) == step, (int(f.attrs["step"]), step)
        wte = f["model/wte"]
        assert wte.dtype == np.float32
        assert wte.shape == (int(f["model"].attrs["vocab"]), int(f["model"].attrs["d_model"])), wte.shape
        assert checksum(wte[...]) == int(wte.attrs["checksum"]), "checksum of /model/wte"
        n = 0
        for name, d in f["model"].items():
            assert checksum(d[...]) == int(d.attrs["checksum"]), "checksum of /model/" + name
            for m in ("exp_avg", "exp_avg_sq"):
                s = f["optimizer"][name][m]
                assert s.shape == d.shape, name + "/" + m
                assert checksum(s[...]) == int(s.attrs["checksum"]), "checksum of /optimizer/%s/%s" % (name, m)
            n += 1
        assert int(f["optimizer"].attrs["step"]) == step
        assert (f["optimizer/wte/exp_avg_sq"][...] >= 0).all()
        print("ok: %s, %d tensors, step %d, checksums verified" % (path, n, step))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

#!/usr/bin/env python3
"""An independent reference for the built-in GPT: GPT-2's forward and backward and AdamW,
written in NumPy float64 from docs/model.md (pre-LayerNorm blocks, eps 1e-5, tanh GELU,
causal attention scaled by 1/sqrt(head size), a tied or separate LM head, mean next-token
cross-entropy over the real vocabulary; weight decay on the 2-D tensors only) and the
PyTorch form of AdamW, checked against what gpt_reference_run wrote through the C ABI:

- the reference's own backward against central finite differences of its forward;
- each step's loss and gradient norm, from the parameters dtrain had before the step;
- the first and second moments after each step, from the reference's gradient and
  dtrain's moments before it; the parameters after each step, from AdamW's formula applied
  to dtrain's parameters and moments (so one step's rounding does not carry into the next);
- the loss dt_gpt_evaluate() gave after the steps and dt_gpt_decode()'s logits.

usage: check_gpt_reference.py DIR     (DIR: gpt_reference_run's OUT_DIR/npN;
                                       exit 77 = skipped: no h5py or NumPy)
"""
import math
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("h5py/numpy not available: skipped")
    sys.exit(77)

# Bounds, relative to the largest magnitude of the compared tensor (dtrain computes in fp32,
# unit roundoff 6e-8; a sum over a few thousand terms loses a few digits more).
LOSS_TOL = 1e-6
GRAD_TOL = 1e-5
PARAM_TOL = 2e-6


def read_values(path):
    values = {}
    with open(path) as f:
        for line in f:
            key, *rest = line.split()
            values[key] = rest
    return values


def read_checkpoint(path):
    with h5py.File(path, "r") as f:
        params = {name: f["model"][name][...].astype(np.float64) for name in f["model"]}
        moments = {name: (f["optimizer"][name]["exp_avg"][...].astype(np.float64),
                          f["optimizer"][name]["exp_avg_sq"][...].astype(np.float64))
                   for name in f["optimizer"] if isinstance(f["optimizer"][name], h5py.Group)}
        opt = {k: float(f["optimizer"].attrs[k]) for k in ("beta1", "beta2", "eps", "weight_decay")}
        return int(f.attrs["step"]), int(f["optimizer"].attrs["step"]), params, moments, opt


class Gpt:
    def __init__(self, layers, heads, tied):
        self.layers, self.heads, self.tied = layers, heads, tied

    @staticmethod
    def layer_norm(x, w, b):
        mu = x.mean(-1, keepdims=True)
        rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
        xhat = (x - mu) * rstd
        return xhat * w + b, (xhat, rstd, w)

    @staticmethod
    def layer_norm_back(dy, cache):
        xhat, rstd, w = cache
        dxhat = dy * w
        dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
        return dx, (dy * xhat).reshape(-1, w.size).sum(0), dy.reshape(-1, w.size).sum(0)

    @staticmethod
    def gelu(x):
        s = math.sqrt(2.0 / math.pi)
        t = np.tanh(s * (x + 0.044715 * x ** 3))
        return 0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3 * 0.044715 * x * x)

    def head(self, p):
        return p["wte"] if self.tied else p["lm_head.weight"]

    def attention(self, qkv):
        B, T, C3 = qkv.shape
        C, H = C3 // 3, self.heads
        split = lambda z: z.reshape(B, T, H, C // H).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(qkv[..., i * C:(i + 1) * C]) for i in range(3))
        scale = 1.0 / math.sqrt(C // H)
        s = np.einsum("bhtd,bhsd->bhts", q, k) * scale
        s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
        prob = np.exp(s - s.max(-1, keepdims=True))
        prob /= prob.sum(-1, keepdims=True)
        out = np.einsum("bhts,bhsd->bhtd", prob, v)
        return out.transpose(0, 2, 1, 3).reshape(B, T, C), (q, k, v, prob, scale)

    @staticmethod
    def attention_back(dout, cache):
        q, k, v, prob, scale = cache
        B, H, T, D = q.shape
        do = dout.reshape(B, T, H, D).transpose(0, 2, 1, 3)
        dprob = np.einsum("bhtd,bhsd->bhts", do, v)
        dv = np.einsum("bhts,bhtd->bhsd", prob, do)
        ds = prob * (dprob - (dprob * prob).sum(-1, keepdims=True)) * scale
        dq = np.einsum("bhts,bhsd->bhtd", ds, k)
        dk = np.einsum("bhts,bhtd->bhsd", ds, q)
        merge = lambda z: z.transpose(0, 2, 1, 3).reshape(B, T, H * D)  # noqa: E731
        return np.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1)

    def forward(self, p, tokens):
        """Logits [B, T, V] and what backward needs."""
        T = tokens.shape[1]
        x = p["wte"][tokens] + p["wpe"][:T]
        caches = []
        for i in range(self.layers):
            h = f"h.{i}."
            a, ln1 = self.layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
            qkv = a @ p[h + "attn.c_attn.weight"].T + p[h + "attn.c_attn.bias"]
            y, att = self.attention(qkv)
            x = x + y @ p[h + "attn.c_proj.weight"].T + p[h + "attn.c_proj.bias"]
            m, ln2 = self.layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
            u = m @ p[h + "mlp.c_fc.weight"].T + p[h + "mlp.c_fc.bias"]
            g, dg = self.gelu(u)
            x = x + g @ p[h + "mlp.c_proj.weight"].T + p[h + "mlp.c_proj.bias"]
            caches.append((a, ln1, y, att, m, ln2, g, dg))
        f, lnf = self.layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
        return f @ self.head(p).T, (tokens, caches, f, lnf)

    @staticmethod
    def loss_and_dlogits(logits, targets):
        z = logits - logits.max(-1, keepdims=True)
        prob = np.exp(z)
        prob /= prob.sum(-1, keepdims=True)
        n = targets.size
        rows = np.arange(n)
        flat = prob.reshape(n, -1)
        loss = -np.log(flat[rows, targets.reshape(-1)]).mean()
        d = flat.copy()
        d[rows, targets.reshape(-1)] -= 1.0
        return loss, (d / n).reshape(logits.shape)

    def loss(self, p, tokens, targets):
        return self.loss_and_dlogits(self.forward(p, tokens)[0], targets)[0]

    def loss_and_grads(self, p, tokens, targets):
        logits, (tokens, caches, f, lnf) = self.forward(p, tokens)
        loss, dlogits = self.loss_and_dlogits(logits, targets)
        V, C = self.head(p).shape
        g = {name: np.zeros_like(value) for name, value in p.items()}
        g["wte" if self.tied else "lm_head.weight"] += dlogits.reshape(-1, V).T @ f.reshape(-1, C)
        dx, g["ln_f.weight"], g["ln_f.bias"] = self.layer_norm_back(dlogits @ self.head(p), lnf)
        for i in reversed(range(self.layers)):
            h = f"h.{i}."
            a, ln1, y, att, m, ln2, gl, dg = caches[i]
            W = p[h + "mlp.c_proj.weight"]
            g[h + "mlp.c_proj.weight"] = dx.reshape(-1, C).T @ gl.reshape(-1, W.shape[1])
            g[h + "mlp.c_proj.bias"] = dx.reshape(-1, C).sum(0)
            du = (dx @ W) * dg
            g[h + "mlp.c_fc.weight"] = du.reshape(-1, du.shape[-1]).T @ m.reshape(-1, C)
            g[h + "mlp.c_fc.bias"] = du.reshape(-1, du.shape[-1]).sum(0)
            dm, g[h + "ln_2.weight"], g[h + "ln_2.bias"] = self.layer_norm_back(du @ p[h + "mlp.c_fc.weight"], ln2)
            dx = dx + dm
            g[h + "attn.c_proj.weight"] = dx.reshape(-1, C).T @ y.reshape(-1, C)
            g[h + "attn.c_proj.bias"] = dx.reshape(-1, C).sum(0)
            dqkv = self.attention_back(dx @ p[h + "attn.c_proj.weight"], att)
            g[h + "attn.c_attn.weight"] = dqkv.reshape(-1, 3 * C).T @ a.reshape(-1, C)
            g[h + "attn.c_attn.bias"] = dqkv.reshape(-1, 3 * C).sum(0)
            da, g[h + "ln_1.weight"], g[h + "ln_1.bias"] = self.layer_norm_back(dqkv @ p[h + "attn.c_attn.weight"], ln1)
            dx = dx + da
        np.add.at(g["wte"], tokens, dx)
        g["wpe"][: tokens.shape[1]] += dx.sum(0)
        return loss, g


class Checker:
    def __init__(self):
        self.failures = 0
        self.checks = 0

    def close(self, what, got, want, tol):
        """got within tol of want, relative to the largest |want| (or 1e-30)."""
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        scale = max(float(np.abs(want).max()), 1e-30)
        gap = float(np.abs(got - want).max()) / scale
        self.checks += 1
        if not gap <= tol:
            self.failures += 1
            print(f"FAIL {what}: relative gap {gap:.3e} > {tol:.0e}")
        return gap


def finite_difference_check(model, p, tokens, targets, grads, check, rng):
    """The reference's backward against its own forward: 4 entries of every tensor."""
    worst = 0.0
    for name, value in p.items():
        for flat in rng.choice(value.size, size=min(4, value.size), replace=False):
            idx = np.unravel_index(flat, value.shape)
            h = 1e-5
            saved = value[idx]
            value[idx] = saved + h
            up = model.loss(p, tokens, targets)
            value[idx] = saved - h
            down = model.loss(p, tokens, targets)
            value[idx] = saved
            fd = (up - down) / (2 * h)
            err = abs(fd - grads[name][idx]) / max(abs(fd), 1e-4)
            worst = max(worst, err)
            check.checks += 1
            if err > 1e-5:
                check.failures += 1
                print(f"FAIL reference backward {name}{idx}: {grads[name][idx]:.9g} vs finite difference {fd:.9g}")
    return worst


def main(directory):
    values = read_values(f"{directory}/values.txt")
    integer = lambda key: int(values[key][0])  # noqa: E731
    numbers = lambda key: np.array([float(x) for x in values[key]])  # noqa: E731
    B, T = 4, integer("seq_len")
    tokens = np.array([int(x) for x in values["tokens"]]).reshape(B, T)
    targets = np.array([int(x) for x in values["targets"]]).reshape(B, T)
    prompt = np.array([int(x) for x in values["prompt"]]).reshape(1, -1)
    lr, losses, norms = numbers("lr"), numbers("loss"), numbers("grad_norm")
    model = Gpt(integer("layers"), integer("heads"), integer("tied") != 0)
    check = Checker()

    step, opt_step, p, moments, opt = read_checkpoint(f"{directory}/ckpt/step_00000000.h5")
    assert (step, opt_step) == (0, 0), (step, opt_step)
    for key in opt:  # the file's settings are the header's defaults the run printed
        check.close(f"optimizer attribute {key}", opt[key], float(values[key][0]), 1e-7)
    assert ("lm_head.weight" in p) != model.tied
    assert p["wte"].shape == (integer("vocab"), integer("d_model"))
    b1, b2, eps, wd = opt["beta1"], opt["beta2"], opt["eps"], opt["weight_decay"]

    gaps = {"loss": 0.0, "grad_norm": 0.0, "moments": 0.0, "params": 0.0}
    loss, grads = model.loss_and_grads(p, tokens, targets)
    fd_worst = finite_difference_check(model, p, tokens, targets, grads, check, np.random.default_rng(7))
    for s in range(len(lr)):
        if s > 0:
            loss, grads = model.loss_and_grads(p, tokens, targets)
        gaps["loss"] = max(gaps["loss"], check.close(f"step {s + 1} loss", losses[s], loss, LOSS_TOL))
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        gaps["grad_norm"] = max(gaps["grad_norm"], check.close(f"step {s + 1} gradient norm", norms[s], norm, GRAD_TOL))
        t = s + 1
        step, opt_step, after, after_moments, _ = read_checkpoint(f"{directory}/ckpt/step_{t:08d}.h5")
        assert (step, opt_step) == (t, t), (step, opt_step, t)
        for name, value in p.items():
            m0, v0 = moments[name]
            m1, v1 = after_moments[name]
            g = grads[name]
            gaps["moments"] = max(gaps["moments"],
                                  check.close(f"step {t} {name} exp_avg", m1, b1 * m0 + (1 - b1) * g, GRAD_TOL),
                                  check.close(f"step {t} {name} exp_avg_sq", v1, b2 * v0 + (1 - b2) * g * g, GRAD_TOL))
            decay = wd if value.ndim == 2 else 0.0
            update = (m1 / (1 - b1 ** t)) / (np.sqrt(v1 / (1 - b2 ** t)) + eps)
            want = value - lr[s] * (update + decay * value)
            gaps["params"] = max(gaps["params"], check.close(f"step {t} {name}", after[name], want, PARAM_TOL))
        p, moments = after, after_moments

    gaps["loss"] = max(gaps["loss"], check.close("evaluate after the steps", losses[-1], model.loss(p, tokens, targets), LOSS_TOL))
    logits = model.forward(p, prompt)[0][0, -1]
    gaps["logits"] = check.close("dt_gpt_decode logits", numbers("logits"), logits, LOSS_TOL)

    print(f"reference backward vs finite differences: worst relative {fd_worst:.2e}; dtrain against the reference: "
          + ", ".join(f"{k} {v:.2e}" for k, v in gaps.items()) + " (relative to each tensor's largest value)")
    if check.failures:
        print(f"gpt reference: {check.failures} of {check.checks} checks failed")
        return 1
    print(f"gpt reference: all {check.checks} checks passed")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))

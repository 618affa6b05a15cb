#!/usr/bin/env python3
"""One SiameseNorm sub-layer's backward pass by the formulas of docs/siamesenorm.md (sections 3 and 4), against
PyTorch autograd, in float64. Prints the relative error of every gradient and exits 1 if one is above the bound.

    /usr/bin/python3 docs/check_boundary_backward.py            # the doc's formulas: every error ~1e-16
    /usr/bin/python3 docs/check_boundary_backward.py --mutate no-depth-scale   # a planted mistake: must FAIL

The sub-layer (block l, c_l = sqrt(2(l+1)), shared by the block's two sub-layers):

    xh = LN_x(x);  sum = xh + LN_y(y);  u = LN_in(sum);  z = F(u);  x' = xh + z / c_l;  y' = y + z

with F(u) = gelu(u W1 + b1) W2 + b2 (an MLP: the formulas do not depend on what F is, only on its backward), and a
loss L = sum(gx' * x') + sum(gy' * y') for fixed random gx', gy', so that dL/dx' = gx' and dL/dy' = gy' are the
gradients that come down from above, as in the doc.
"""
import argparse
import math
import sys

try:
    import torch
except ImportError:
    sys.exit("error: this check needs PyTorch (Debian: apt-get install python3-torch; or run it with /usr/bin/python3)")

EPS = 1e-5  # the reference's LayerNorm epsilon
# float64 (unit roundoff 1.1e-16): the formulas and autograd compute the same sums in different orders over rows of
# C = 16 channels and a few dozen operations, so they agree to ~1e-15 relative; 1e-10 leaves five orders of magnitude
# of margin and is still ten orders below what a mistake does (a missing 1/c_l or projection term: errors ~1e-1..1).
BOUND = 1e-10
MUTATIONS = ("no-depth-scale", "no-projection", "no-y-identity", "no-sum-to-xh")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2, argparse's)"""

    def error(self, message):
        print("error: %s (see %s --help)" % (message, self.prog), file=sys.stderr)
        sys.exit(2)


def layernorm(v, g, b):
    """o = g * vhat + b with vhat = (v - mean) * r, r = 1/sqrt(var + eps); returns o and (vhat, r) for backward."""
    mu = v.mean(-1, keepdim=True)
    r = 1.0 / torch.sqrt(((v - mu) ** 2).mean(-1, keepdim=True) + EPS)
    vhat = (v - mu) * r
    return g * vhat + b, (vhat, r)


def layernorm_backward(d, g, cache, mutate=""):
    """Section 3: with gg = g * d, dL/dv = r * (gg - mean(gg) - vhat * mean(gg * vhat)); dg = sum d*vhat, db = sum d."""
    vhat, r = cache
    gg = g * d
    proj = 0 if mutate == "no-projection" else vhat * (gg * vhat).mean(-1, keepdim=True)
    dv = r * (gg - gg.mean(-1, keepdim=True) - proj)
    return dv, (d * vhat).sum(0), d.sum(0)


def gelu(a):
    return 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))


def gelu_backward(a):
    k = math.sqrt(2 / math.pi)
    t = torch.tanh(k * (a + 0.044715 * a ** 3))
    return 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * k * (1 + 3 * 0.044715 * a * a)


def main():
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mutate", choices=MUTATIONS, help="plant a mistake in the formulas (the check must then fail)")
    p.add_argument("--block", type=int, default=2, help="block index l (default 2: c_l = sqrt(6))")
    args = p.parse_args()
    torch.manual_seed(0)
    N, C, H = 8, 16, 64  # rows (tokens), channels, MLP hidden width
    dt = torch.float64
    c = math.sqrt(2 * (args.block + 1))
    x, y = torch.randn(N, C, dtype=dt), 3 * torch.randn(N, C, dtype=dt)  # y: a pre-norm stream, larger
    P = {name: (1 + 0.3 * torch.randn(C, dtype=dt)) if name.startswith("g") else 0.3 * torch.randn(C, dtype=dt)
         for name in ("gx", "bx", "gy", "by", "gi", "bi")}
    W1, b1 = torch.randn(C, H, dtype=dt) / math.sqrt(C), 0.1 * torch.randn(H, dtype=dt)
    W2, b2 = torch.randn(H, C, dtype=dt) / math.sqrt(H), 0.1 * torch.randn(C, dtype=dt)
    gx1, gy1 = torch.randn(N, C, dtype=dt), torch.randn(N, C, dtype=dt)  # dL/dx', dL/dy' from above

    # ---- autograd
    leaves = dict(x=x, y=y, W1=W1, b1=b1, W2=W2, b2=b2, **P)
    leaves = {k: v.clone().requires_grad_(True) for k, v in leaves.items()}
    L_ = leaves
    xh, _ = layernorm(L_["x"], L_["gx"], L_["bx"])
    ly, _ = layernorm(L_["y"], L_["gy"], L_["by"])
    u, _ = layernorm(xh + ly, L_["gi"], L_["bi"])
    z = gelu(u @ L_["W1"] + L_["b1"]) @ L_["W2"] + L_["b2"]
    loss = (gx1 * (xh + z / c)).sum() + (gy1 * (L_["y"] + z)).sum()
    loss.backward()
    auto = {k: v.grad for k, v in leaves.items()}

    # ---- the doc's formulas, forward line by line, then backward in reverse
    m = args.mutate or ""
    xh, cx = layernorm(x, P["gx"], P["bx"])
    ly, cy = layernorm(y, P["gy"], P["by"])
    sum_ = xh + ly  # the doc's sum (sum_ here: Python has a sum)
    u, ci = layernorm(sum_, P["gi"], P["bi"])
    a = u @ W1 + b1
    h = gelu(a)
    # 1. y' = y + z: dL/dy += gy', dL/dz += gy'
    dy = torch.zeros_like(y) if m == "no-y-identity" else gy1.clone()
    dz = gy1.clone()
    # 2. x' = xh + z/c: dL/dxh += gx', dL/dz += gx'/c
    dxh = gx1.clone()
    dz += gx1 if m == "no-depth-scale" else gx1 / c
    # 3. z = F(u): F's own backward (here the MLP's)
    grads = dict(W2=h.T @ dz, b2=dz.sum(0))
    da = (dz @ W2.T) * gelu_backward(a)
    grads.update(W1=u.T @ da, b1=da.sum(0))
    du = da @ W1.T
    # 4. u = LN_in(sum), sum = xh + LN_y(y): dL/dsum by LN_in's backward, sent to both terms of the sum
    dsum, grads["gi"], grads["bi"] = layernorm_backward(du, P["gi"], ci, m)
    if m != "no-sum-to-xh":
        dxh += dsum
    dly = dsum
    # 5. LN_y and LN_x backward: dL/dy += LN_y backward of dL/dLN_y(y); dL/dx = LN_x backward of (gx' + dL/dsum)
    dy_branch, grads["gy"], grads["by"] = layernorm_backward(dly, P["gy"], cy, m)
    dy += dy_branch
    grads["y"] = dy
    grads["x"], grads["gx"], grads["bx"] = layernorm_backward(dxh, P["gx"], cx, m)

    print("SiameseNorm boundary backward (block %d, c_l = %.6f, N=%d C=%d), the doc's formulas against autograd, "
          "float64%s" % (args.block, c, N, C, ", MUTATED: " + m if m else ""))
    print("%-8s %-30s %s" % ("tensor", "what", "relative error"))
    what = dict(x="dL/dx (X stream, via LN_x)", y="dL/dy (identity + LN_y branch)", gx="LN_x gain", bx="LN_x shift",
                gy="LN_y gain", by="LN_y shift", gi="LN_in gain", bi="LN_in shift", W1="F: first matrix",
                b1="F: first bias", W2="F: second matrix", b2="F: second bias")
    worst = 0.0
    for k in what:
        err = ((grads[k] - auto[k]).norm() / auto[k].norm()).item()
        worst = max(worst, err)
        print("%-8s %-30s %.2e" % (k, what[k], err))
    ok = worst <= BOUND
    print("worst %.2e, bound %.0e: %s" % (worst, BOUND, "PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

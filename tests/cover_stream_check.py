#!/usr/bin/env python3
"""Covering one stream, in the PyTorch twin (docs/siamesenorm.md, section 11; the C++'s own test is the "SiameseNorm
with ... covered" cases of tests/test_reference.cpp).

docs/model.py's SiameseNorm (GPT.siamese, GPT.head_siamese) with the gains and shifts of LN_y and LN_yf at 0 gives
the logits of its Post-Norm (GPT.post), with the same weights, once the differences section 11 derives are made
explicit, each one line of one_stream_logits below: an LN of the embedding, F reading LN_in(...), the branch
scaled by 1/c_l, an LN before the head's; with LN_x's and LN_xf's at 0 it gives its Pre-Norm (GPT.pre) with LN_in
and LN_yf explicit; and covering Y in blocks l < P and X after gives Mix-LN only with its Pre-Norm part restarted
from h0 + the outputs so far (Y), not Mix-LN. Every ablation (--no-depth-scale, --no-ln-in) and both precisions.
Then each named difference is left out in turn, and the logits must move by far more than the bound: the
comparison can fail.

    /usr/bin/python3 tests/cover_stream_check.py [-v]      # -v: every measured difference

Needs torch and numpy (Debian's python3-torch); no C++ build. Ends with "N passed, N failed".
"""
import math
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs"))
import torch  # noqa: E402

import model  # noqa: E402  (docs/model.py)
import train_model  # noqa: E402  (docs/train_model.py: the tensor table)

L, C, NH, MAXT, V, B, T = 3, 32, 4, 16, 60, 2, 12
NO_DEPTH_SCALE, NO_LN_IN = model.NO_DEPTH_SCALE, model.NO_LN_IN
ABLATIONS = [NO_DEPTH_SCALE | NO_LN_IN, NO_LN_IN, NO_DEPTH_SCALE, 0]
# The bound, relative to the largest logit: both models run the same torch operations on the same values in the same
# order, and the covered stream's terms are exact zeros (0 * x̂ + 0 = 0; a + 0 = a), so the logits agree bit for bit
# (measured: they do, in float32 and float64); 1e-5 is tests/torch_check.py's float32 bound between two whole
# implementations, room for a library that rounds one of two equal computations differently. A named difference
# left out must move the logits by more than 1e-3 of the largest, 100 times the bound (measured: 4e-3 to 1.6; the
# smallest is LN_in in post, an LN of a stream LN_x has just normalized: section 11).
BOUND, MATTERS = 1e-5, 1e-3

passed = failed = 0
VERBOSE = "-v" in sys.argv[1:]


def case(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + ok, failed + (not ok)
    print("%-4s  %s%s" % ("ok" if ok else "FAIL", name, "  " + detail if detail and (VERBOSE or not ok) else ""))


def random_params(cfg, seed, dtype):
    """every tensor of cfg's table: weights N(0, 0.05), LayerNorm gains 1 + N(0, 0.05), shifts N(0, 0.05), so that
    no difference vanishes at a gain of exactly 1 (as tests/test_reference.cpp's perturb)"""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape, _ in train_model.parameter_table(cfg):
        t = 0.05 * torch.randn(shape, generator=g, dtype=torch.float64)
        if name.startswith("ln") and name.endswith("w"):
            t += 1
        params[name] = t.to(dtype)
    return params


def difference(a, b):
    """the largest |a - b| over the real vocabulary's logits, relative to the largest |b|"""
    a, b = a[..., :V].double(), b[..., :V].double()
    return ((a - b).abs().max() / b.abs().max()).item()


def one_stream_logits(m, inputs, emb=None, ln_in=None, c_l=None, last=None, restart_at=None):
    """The one-stream model m (docs/model.py's GPT of post, pre or mix) with SiameseNorm's extras made explicit,
    each absent where None: emb, an LN of the embedding (p_0 = emb(h0)); ln_in(l, k, v), what F reads instead of v;
    c_l(l), what the post branch is divided by; last, an LN of the last stream before the head's own; restart_at, the
    sub-layer whose input is h0 + the outputs z of the sub-layers below it (what SiameseNorm's Y holds) instead of
    the stream they made. Each sub-layer is m's own boundary (GPT.post: x = LN(x + f(x)); GPT.pre: x = x + f(LN(x)))
    with F wrapped: f(v) = F(ln_in(v)) / c_l."""
    p = m.p
    h0 = p["wte"][inputs] + p["wpe"][:inputs.shape[1]]
    x, y = (emb(h0) if emb else h0), h0
    for l in range(m.cfg.L):
        for k, F in ((0, m.attention), (1, m.mlp)):
            if 2 * l + k == restart_at:
                x = y
            kind, out = m.kind(l, k), []

            def f(v, l=l, k=k, F=F, kind=kind, out=out):
                z = F(l, ln_in(l, k, v) if ln_in else v)
                out.append(z)
                return z / c_l(l) if c_l and kind == "post" else z
            x = getattr(m, kind)(l, "ln%d" % (k + 1), f, x)
            y = y + out[0]
    return m.head(last(x) if last else x) @ p["wte"].t()


def siamese(ablations, covered, seed, dtype, P=None):
    """docs/model.py's SiameseNorm with the LayerNorms `covered` ({name prefix: blocks}, "lnfy": the head's) at 0"""
    cfg = train_model.config("siamese", L, C, NH, MAXT, V, ablations)
    params = random_params(cfg, seed, dtype)
    for prefix, blocks in covered.items():
        for wb in "wb":
            params[prefix + wb][blocks] = 0
    return model.GPT(cfg, params)


def one_stream(layout, s, setting=None):
    """a docs/model.py GPT of `layout` with the siamese model s's F weights and embeddings"""
    cfg = train_model.config(layout, L, C, NH, MAXT, V, 0, setting)
    shared = ("wte", "wpe", "qkvw", "qkvb", "attprojw", "attprojb", "fcw", "fcb", "fcprojw", "fcprojb")
    params = {n: s.p[n] for n in shared}
    return model.GPT(cfg, params)


def check(name, m, s, inputs, extras):
    """m with the extras against s's logits, then each extra left out"""
    want = s.forward(inputs)
    got = one_stream_logits(m, inputs, **extras)
    d = difference(got, want)
    case("%s: the logits equal SiameseNorm's" % name, d <= BOUND,
         "within %.2g (bound %g), bit for bit: %s" % (d, BOUND, bool(torch.equal(got, want))))
    for extra in extras:
        without = dict(extras)
        without.pop(extra)
        d = difference(one_stream_logits(m, inputs, **without), want)
        case("%s: without %s they differ" % (name, extra), d > MATTERS, "by %.2g (at least %g)" % (d, MATTERS))


def ln(s, name, l=None):
    """SiameseNorm's LayerNorm `name` (of block l) as a function"""
    return lambda v: s.ln(name, v, l)


def covered_extras(s, ablations, post_blocks):
    """LN_in (where not ablated) and c_l (where not ablated, in the post blocks) as one_stream_logits takes them"""
    extras = {}
    if not ablations & NO_LN_IN:
        extras["ln_in"] = lambda l, k, v: s.ln("ln%di" % (k + 1), v, l)
    if not ablations & NO_DEPTH_SCALE and post_blocks:
        extras["c_l"] = s.c_l
    return extras


def main():
    torch.manual_seed(0)
    all_blocks = slice(None)
    for dtype in (torch.float32, torch.float64):
        inputs = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
        for ablations in ABLATIONS:
            tag = "%s, ablations %d" % (str(dtype).replace("torch.", ""), ablations)
            # Y covered: Post-Norm. Its LN after sub-layer j is SiameseNorm's LN_x before sub-layer j + 1 (LN_xf
            # after the last): post's ln1 of block l is ln2x of block l, its ln2 of block l is ln1x of block l + 1.
            s = siamese(ablations, {"ln1y": all_blocks, "ln2y": all_blocks, "lnfy": all_blocks}, 2, dtype)
            m = one_stream("post", s)
            m.p["ln1w"], m.p["ln1b"] = s.p["ln2xw"], s.p["ln2xb"]
            m.p["ln2w"] = torch.cat([s.p["ln1xw"][1:], s.p["lnfxw"][None]])
            m.p["ln2b"] = torch.cat([s.p["ln1xb"][1:], s.p["lnfxb"][None]])
            extras = dict(emb=ln(s, "ln1x", 0), last=ln(s, "lnf"), **covered_extras(s, ablations, True))
            with torch.no_grad():
                check("Y covered = post, " + tag, m, s, inputs, extras)
                if "c_l" in extras:  # 1/c_l folded into F's last matrix and bias: the same function
                    c = torch.tensor([s.c_l(l) for l in range(L)], dtype=dtype)
                    folded = model.GPT(m.cfg, dict(m.p))
                    for n in ("attprojw", "attprojb", "fcprojw", "fcprojb"):
                        folded.p[n] = m.p[n] / c.view(-1, *[1] * (m.p[n].dim() - 1))
                    d = difference(one_stream_logits(folded, inputs, **{k: v for k, v in extras.items() if k != "c_l"}),
                                   s.forward(inputs))
                    case("Y covered = post, %s: with 1/c_l folded into attproj and fcproj, the same logits" % tag,
                         d <= BOUND, "within %.2g (bound %g: (W / c) u + b / c rounds otherwise)" % (d, BOUND))
            # X covered: Pre-Norm, its LN before sub-layer j SiameseNorm's LN_y there
            s = siamese(ablations, {"ln1x": all_blocks, "ln2x": all_blocks, "lnfx": all_blocks}, 3, dtype)
            m = one_stream("pre", s)
            m.p.update(ln1w=s.p["ln1yw"], ln1b=s.p["ln1yb"], ln2w=s.p["ln2yw"], ln2b=s.p["ln2yb"], lnfw=s.p["lnfw"],
                       lnfb=s.p["lnfb"])
            extras = dict(last=ln(s, "lnfy"), **covered_extras(s, ablations, False))
            with torch.no_grad():
                check("X covered = pre, " + tag, m, s, inputs, extras)
            # Y covered in blocks l < P, X after and at the head: Mix-LN restarted from Y (without the restart:
            # Mix-LN itself, which it is not). The Post-Norm part's last LN (ln2 of block P - 1) is read by nothing.
            for P in (1, 2):
                first, rest = slice(0, P), slice(P, None)
                s = siamese(ablations, {"ln1y": first, "ln2y": first, "ln1x": rest, "ln2x": rest, "lnfx": all_blocks},
                            4 + P, dtype)
                m = one_stream("mix", s, P)
                m.p["ln1w"] = torch.cat([s.p["ln2xw"][first], s.p["ln1yw"][rest]])
                m.p["ln1b"] = torch.cat([s.p["ln2xb"][first], s.p["ln1yb"][rest]])
                m.p["ln2w"] = torch.cat([s.p["ln1xw"][1:P], torch.ones(1, C, dtype=dtype), s.p["ln2yw"][rest]])
                m.p["ln2b"] = torch.cat([s.p["ln1xb"][1:P], torch.zeros(1, C, dtype=dtype), s.p["ln2yb"][rest]])
                m.p["lnfw"], m.p["lnfb"] = s.p["lnfw"], s.p["lnfb"]
                extras = dict(emb=ln(s, "ln1x", 0), last=ln(s, "lnfy"), restart_at=2 * P,
                              **covered_extras(s, ablations, True))
                with torch.no_grad():
                    check("Y covered before block %d, X after = mix restarted from Y, %s" % (P, tag), m, s, inputs,
                          extras)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

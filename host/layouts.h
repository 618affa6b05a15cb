/*
host/layouts.h: the layout registry. A layout is what a model does at each sub-layer boundary (how its residual
stream(s) become the input u of the sub-layer F, attention or MLP, and how F's output z goes back into them) and at
the head; the attention and the MLP are the same in every layout. Each layout is one row of LAYOUTS below: its name
and checkpoint id, its LayerNorm tensors (its part of the parameter table), the KIND of each sub-layer, its head,
its own setting (header[10]) and whether the CUDA trainer runs it.

The trainers ask what kind a sub-layer is, never which layout it belongs to, so a layout that mixes kinds from
block to block needs no code of its own; each asks in one place (reference_cpu.cpp: run_sublayer and run_head, which
name each kind's forward and backward function; train_gpt2.cu: boundary_kind and boundary_start). The kinds
(s = 2l + k: block l, k = 0 attention, 1 MLP), with the reference's function for each:

  kind      u = the input of F           the stream(s) after F                     reference_cpu.cpp
  pre       LN(x)                        x + z                                      pre_sublayer_forward
  post      x                            LN(x + z)                                  post_sublayer_forward
  siamese   LN_in(LN_x(x) + LN_y(y))     x = LN_x(x) + z / c_l,  y = y + z          siamese_sublayer_forward
  deepnorm  x                            LN(alpha x + z),  alpha = (2L)^(1/4)       deepnorm_sublayer_forward
  residual  x                            x + z                                      residual_sublayer_forward
  normed    LN(x)                        LN(x) + z                                  normed_sublayer_forward
  siamese_c1  c1 x + LN_y(y)             x = x + z / c_l,  y = y + z                siamese_c1_sublayer_forward
              (c1: a learned gain of C channels per block)
  peri      LN(x)                        x + LN_out(z)                              peri_sublayer_forward
  hc        LN(A00 x + A10 y)            x = A01 x + A11 y + A03 z,                 hc_sublayer_forward
              (A: hyper-connections'     y = A02 x + A12 y + A13 z
              weights, per token)

and the heads (hf, what the tied wte turns into logits):

  ln        LN_f(x)                      (pre)                                      lnf_head_forward
  identity  x                            (post: its last sub-layer ended with a     identity_head_forward
                                         LayerNorm)
  siamese   LN_f(LN_xf(x) + LN_yf(y))                                               siamese_head_forward
  sum       LN_f(x + y)                  (hc)                                       sum_head_forward

The layouts: pre, post and siamese use one kind throughout; mix (Mix-LN) is post for its first P blocks and pre
after them, with pre's head (P, its own setting, in header[10]); deepnorm (DeepNet's DeepNorm) is post with the
stream scaled by alpha and its own initialization (init_std). hybrid (HybridNorm) is residual at the attention and
normed at the MLP, with pre's head; hybrid-star (HybridNorm*) the same with a Pre-Norm block 0; siamese-hybrid
(SiameseNorm's language-model form, the official code's hybrid_pre) is siamese_c1 at the attention and siamese at the
MLP, with siamese's head. In these three F's attention is the QKV-norm attention (qkv_norm in the row): q, k and v
are each LayerNorm-ed over each head's hs channels (LN_q, LN_k, LN_v, gains and shifts of hs per block) before the
attention. The two baselines after them: pre-qkvnorm is pre with that attention (the QKV-norm without HybridNorm's
topology); peri (Peri-LN, the "sandwich" of Gemma 2 and OLMo 2) is peri throughout, with pre's head. hc
(Hyper-Connections, the official SiameseNorm code's fourth model) is hc throughout, with the sum head.

To add a layout (docs/adding_a_layout.md): a row here; a new kind only if no kind above does what its boundary does
(then its forward and backward function and its case in run_sublayer, reference_cpu.cpp, and its row in
boundary_kind, train_gpt2.cu, where the CUDA trainer is to run it); its tests. Nothing else reads the layout: the
parameter table, the activations, the checkpoint header, --norm, --print-tensors and the run's table all come from
this row.
*/
#pragma once
#include <cmath>
#include <cstring>
#include <string>
#include "utils.h"

// header[8] of the checkpoint: the layout's index in LAYOUTS (0 keeps llm.c's files valid: they are Pre-Norm)
enum NormLayout { NORM_PRE = 0, NORM_POST = 1, NORM_SIAMESE = 2, NORM_MIX = 3, NORM_DEEPNORM = 4, NORM_HYBRID = 5,
                  NORM_HYBRID_STAR = 6, NORM_SIAMESE_HYBRID = 7, NORM_PRE_QKVNORM = 8, NORM_PERI = 9, NORM_HC = 10 };

// what a sub-layer boundary does (the table above)
enum SubLayerKind { SUBLAYER_PRE = 0, SUBLAYER_POST = 1, SUBLAYER_SIAMESE = 2, SUBLAYER_DEEPNORM = 3,
                    SUBLAYER_RESIDUAL = 4, SUBLAYER_NORMED = 5, SUBLAYER_SIAMESE_C1 = 6, SUBLAYER_PERI = 7,
                    SUBLAYER_HC = 8 };
static const char* const SUBLAYER_KIND_NAMES[] = {"pre",      "post",   "siamese",    "deepnorm",
                                                  "residual", "normed", "siamese_c1", "peri", "hc"};
// what the head does
enum HeadKind { HEAD_LN = 0, HEAD_IDENTITY = 1, HEAD_SIAMESE = 2, HEAD_SUM = 3 };

// The LayerNorm slots of a boundary and of the head: the index j of lnw[k][j] and lnfw[j] (host/model_config.h).
// pre, post, deepnorm and normed use one (LN_X: LN1/LN2, LN_f at the head), siamese the first three (LN_x, LN_y,
// LN_in; at the head LN_xf, LN_yf, LN_f), siamese_c1 LN_Y alone, residual none, peri LN_X (its input's, pre's LN1/
// LN2) and LN_OUT (the LayerNorm of F's output), hc LN_X (F's input's, pre's LN1/LN2) and LN_H (the one its dynamic
// connection weights read, in LN_Y's slot). LN_SLOTS, the most slots a sub-layer can have, sizes the arrays.
enum { LN_X = 0, LN_Y = 1, LN_IN = 2, LN_OUT = 3, LN_SLOTS = 4, LN_H = LN_Y };

// SiameseNorm ablations, header[9] of the checkpoint (0 for the full method and every other layout)
enum { ABLATE_NO_DEPTH_SCALE = 1,  // c_l = 1 instead of sqrt(2(l+1))
       ABLATE_NO_LN_IN = 2 };      // the normalized input LN_in becomes the identity

// [[noreturn]] for the `default:` of every switch on a kind: an unknown one is a bug, never another layout
[[noreturn]] static void unknown_kind(const char* what, int kind) {
    fail("internal: %s %d has no case here (a kind added to host/layouts.h without its case in this switch)", what,
         kind);
}

// a layout's own setting, header[10] (0 = none): set for a new model by `flag` (a number), checked by `valid`
typedef struct {
    const char* flag;          // e.g. "--mix-alpha"; nullptr: the layout has no setting (header[10] = 0)
    const char* flag_meaning;  // of the flag's value, for -h
    const char* meaning;       // of the header value, for the run's table and errors
    double default_value;      // of the flag
    int (*from_flag)(double value, int num_layers);  // the header value for a model of L blocks (fails if none)
    int (*valid)(int setting, int num_layers);       // a header value the layout accepts
} LayoutSetting;

typedef struct {
    const char* name;       // --norm NAME, and "layout" in --print-tensors
    const char* source;     // where it comes from
    const char* equations;  // one line: each sub-layer, then the head
    int streams;            // 1: x; 2: x and y, both starting as h0
    // the LayerNorm tensors of the sub-layer boundaries, for k = 0 (before or after the attention) and k = 1 (the
    // MLP): norms[k] slots (LN_X, LN_Y, LN_IN), each a gain and a shift, names [slot][gain, shift] (a slot named
    // nullptr has no tensors: its kinds do not read it), of shape (norm_blocks[k], C): the blocks 0.. that have
    // them, 0 for all L
    int norms[2];
    const char* const* norm_names[2];
    int norm_blocks[2];
    // the head's LayerNorms (shape (C)): head_norms slots, names [slot][gain, shift]
    int head_norms;
    const char* const* head_norm_names;
    HeadKind head;
    SubLayerKind (*kind)(int s, int num_layers, int setting);  // the kind of sub-layer s = 2l + k
    int qkv_norm;           // 1: F's attention LayerNorms q, k and v of each head (lnq*, lnk*, lnv*: (L, hs) each)
    int c1;                 // 1: the attention boundary has the learned gain c1 on x (siamese_c1: (L, C))
    int hc;                 // 1: every boundary has hyper-connections' weights (hc*s (L, 2, 4), hc*w (L, 4, C),
                            //   hc*sc (L, 2): the hc kind's static and dynamic connections)
    int ablations;          // the ABLATE_* bits it takes (header[9])
    LayoutSetting setting;
    int cuda;               // the CUDA trainer (train_gpt2.cu) runs it
    // the initialization's standard deviation of row `row` (within one block's matrix) of 2-D weight `name`, given
    // GPT-2's for it (host/init.h); nullptr: GPT-2's everywhere
    double (*init_std)(const char* name, size_t row, int num_layers, int channels, double gpt2_std);
} LayoutInfo;

// ----------------------------------------------------------------------------------------------------------------
// the rows' pieces

static const char* const PLAIN_NORMS_1[] = {"ln1w", "ln1b"};
static const char* const PLAIN_NORMS_2[] = {"ln2w", "ln2b"};
static const char* const SIAMESE_NORMS_1[] = {"ln1xw", "ln1xb", "ln1yw", "ln1yb", "ln1iw", "ln1ib"};
static const char* const SIAMESE_NORMS_2[] = {"ln2xw", "ln2xb", "ln2yw", "ln2yb", "ln2iw", "ln2ib"};
static const char* const SIAMESE_C1_NORMS_1[] = {nullptr, nullptr, "ln1yw", "ln1yb"};  // LN_y in its slot LN_Y
static const char* const LNF_NORM[] = {"lnfw", "lnfb"};
static const char* const SIAMESE_HEAD_NORMS[] = {"lnfxw", "lnfxb", "lnfyw", "lnfyb", "lnfw", "lnfb"};

static SubLayerKind all_pre(int, int, int) { return SUBLAYER_PRE; }
static SubLayerKind all_post(int, int, int) { return SUBLAYER_POST; }
static SubLayerKind all_siamese(int, int, int) { return SUBLAYER_SIAMESE; }

static const LayoutSetting NO_SETTING = {.flag = nullptr, .flag_meaning = nullptr, .meaning = nullptr,
                                         .default_value = 0, .from_flag = nullptr, .valid = nullptr};

// Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and Post-LN",
// arXiv 2412.13795): Post-LN in the first P = floor(alpha L) blocks, Pre-LN in the rest, and Pre-LN's final LN_f.
// header[10] = P, 1..L (0 would be Pre-Norm: that is --norm pre).
static SubLayerKind mix_kind(int s, int, int post_blocks) { return s / 2 < post_blocks ? SUBLAYER_POST : SUBLAYER_PRE; }
static int mix_post_blocks(double alpha, int L) {
    if (!(alpha > 0 && alpha <= 1)) fail("--mix-alpha must be in (0, 1], got %s", shortest(alpha).c_str());
    int P = (int)std::floor(alpha * L + 1e-9);  // the paper's floor(alpha L); 1e-9: 0.25 * 4 is 1, not 0.999..
    if (P < 1)
        fail("--mix-alpha %s at %d layers gives no Post-LN block (floor(alpha L) = 0): raise it to %s or more, or "
             "use --norm pre", shortest(alpha).c_str(), L, shortest(1.0 / L).c_str());
    return P;
}
static int mix_valid(int P, int L) { return P >= 1 && P <= L; }

// DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", arXiv 2203.00555), decoder-only
// (their GPT setting) with L blocks: x = LN(alpha x + F(x)), alpha = (2L)^(1/4); the value projection, the attention
// output projection and both MLP matrices start at beta times the usual scale, beta = (8L)^(-1/4), the others
// unchanged. Here "the usual scale" is GPT-2's 0.02 (its extra 1/sqrt(2L) on the output projections is what beta
// replaces): N(0, 0.02 beta) for those four, N(0, 0.02) for wte, wpe, q and k.
static double deepnorm_alpha(int L) { return std::pow(2.0 * L, 0.25); }
static double deepnorm_beta(int L) { return std::pow(8.0 * L, -0.25); }
static SubLayerKind all_deepnorm(int, int, int) { return SUBLAYER_DEEPNORM; }
static double deepnorm_init_std(const char* name, size_t row, int L, int C, double gpt2_std) {
    if (!strcmp(name, "qkvw")) return row >= 2 * (size_t)C ? 0.02 * deepnorm_beta(L) : 0.02;  // rows q, k, v
    if (!strcmp(name, "attprojw") || !strcmp(name, "fcw") || !strcmp(name, "fcprojw")) return 0.02 * deepnorm_beta(L);
    return gpt2_std;
}

// HybridNorm (Zhuo et al. 2025, "HybridNorm: Towards Stable and Efficient Transformer Training via Hybrid
// Normalization", arXiv 2503.04598): the attention reads the raw stream, x = x + Attn_qkvnorm(x) (residual), the MLP
// is Post-Norm's LN moved before the residual branch, xn = LN(x); x = xn + MLP(xn) (normed); head LN_f(x).
// HybridNorm* (the same paper): block 0 is Pre-Norm, x = x + Attn_qkvnorm(LN(x)); x = x + MLP(LN(x)).
static SubLayerKind hybrid_kind(int s, int, int) { return s % 2 == 0 ? SUBLAYER_RESIDUAL : SUBLAYER_NORMED; }
static SubLayerKind hybrid_star_kind(int s, int L, int setting) {
    return s / 2 == 0 ? SUBLAYER_PRE : hybrid_kind(s, L, setting);
}
// SiameseNorm's language-model form (the official code's OLMo_model_hybrid_pre.py, MODEL_TYPE=hybrid_pre): its X
// stream is HybridNorm's. Attention: u = c1 x + LN_y(y); z = Attn_qkvnorm(u) (siamese_c1); MLP: siamese's.
static SubLayerKind siamese_hybrid_kind(int s, int, int) {
    return s % 2 == 0 ? SUBLAYER_SIAMESE_C1 : SUBLAYER_SIAMESE;
}

// Peri-LN (Kim et al. 2025, "Peri-LN: Revisiting Layer Normalization in the Transformer Architecture", arXiv
// 2502.02732; the "sandwich" of Gemma 2 and OLMo 2): a LayerNorm on the input and one on the output of every
// sub-layer, x = x + LN_out(F(LN(x))), and pre's final LN_f. The input's LayerNorm is pre's (ln1*, ln2*), the
// output's LN_out (ln1o*, ln2o*) starts as every gain here, at 1. Not here: the paper's optional LayerNorm of the
// embedding (h0 goes in as it is, as in every layout of this registry); OLMo 2 has no input LayerNorm (x = x +
// LN(F(x))). docs/adding_a_layout.md, section 5, says which reading of the paper this is.
static const char* const PERI_NORMS_1[] = {"ln1w", "ln1b", nullptr, nullptr, nullptr, nullptr, "ln1ow", "ln1ob"};
static const char* const PERI_NORMS_2[] = {"ln2w", "ln2b", nullptr, nullptr, nullptr, nullptr, "ln2ow", "ln2ob"};
static SubLayerKind all_peri(int, int, int) { return SUBLAYER_PERI; }

// Hyper-Connections (Zhu et al., ICLR 2025, "Hyper-Connections", arXiv 2409.19606), dynamic (DHC), expansion rate
// n = 2: two streams H = (x, y), both from h0, connected to each sub-layer by learned weights that depend on the
// token. Per sub-layer and token, from each stream's LayerNorm LN_h (one gain and shift, shared by the streams):
// A = S + s tanh(LN_h(H) W), a (2, 4) table whose columns 0..2 are the paper's alpha (width connection: column 0
// mixes F's input, 1 and 2 the streams it passes on) and column 3 its beta (depth connection: how much of z each
// stream takes). F's input is LN(A_00 x + A_10 y) (F keeps pre's LayerNorm, ln1*, ln2*); the head LN_f(x + y).
// Initialized as the paper (host/init.h): S = [e_(s mod 2) | I | 1], W = 0, s = 0.01, so the model starts as
// Pre-Norm. docs/adding_a_layout.md, section 6, derives the backward and says which reading of the paper this is.
static const char* const HC_NORMS_1[] = {"ln1w", "ln1b", "ln1hw", "ln1hb"};  // LN (F's input), LN_h
static const char* const HC_NORMS_2[] = {"ln2w", "ln2b", "ln2hw", "ln2hb"};
static SubLayerKind all_hc(int, int, int) { return SUBLAYER_HC; }

// ----------------------------------------------------------------------------------------------------------------
// the registry: row i is the layout with header[8] = i. Every field of every row is named, in the order LayoutInfo
// declares them (designated initializers: C++20, which g++, clang and nvcc also take in C++17 mode).

static const LayoutInfo LAYOUTS[] = {
    {.name = "pre",
     .source = "GPT-2 (Radford et al. 2019)",
     .equations = "x = x + F(LN(x)); head LN_f(x)",
     .streams = 1,
     .norms = {1, 1}, .norm_names = {PLAIN_NORMS_1, PLAIN_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 1, .head_norm_names = LNF_NORM, .head = HEAD_LN,
     .kind = all_pre,
     .qkv_norm = 0, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "post",
     .source = "GPT-1, the Transformer (Vaswani et al. 2017)",
     .equations = "x = LN(x + F(x)); head x",
     .streams = 1,
     .norms = {1, 1}, .norm_names = {PLAIN_NORMS_1, PLAIN_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 0, .head_norm_names = nullptr, .head = HEAD_IDENTITY,
     .kind = all_post,
     .qkv_norm = 0, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "siamese",
     .source = "SiameseNorm (Li et al., ICML 2026, arXiv 2602.08064)",
     .equations = "xh = LN_x(x); z = F(LN_in(xh + LN_y(y))); x = xh + z/c_l; y = y + z; head LN_f(LN_xf(x) + LN_yf(y))",
     .streams = 2,
     .norms = {3, 3}, .norm_names = {SIAMESE_NORMS_1, SIAMESE_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 3, .head_norm_names = SIAMESE_HEAD_NORMS, .head = HEAD_SIAMESE,
     .kind = all_siamese,
     .qkv_norm = 0, .c1 = 0, .hc = 0,
     .ablations = ABLATE_NO_DEPTH_SCALE | ABLATE_NO_LN_IN,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "mix",
     .source = "Mix-LN (Li et al. 2024, arXiv 2412.13795)",
     .equations = "blocks l < P: x = LN(x + F(x)); blocks l >= P: x = x + F(LN(x)); head LN_f(x); P = floor(alpha L)",
     .streams = 1,
     .norms = {1, 1}, .norm_names = {PLAIN_NORMS_1, PLAIN_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 1, .head_norm_names = LNF_NORM, .head = HEAD_LN,
     .kind = mix_kind,
     .qkv_norm = 0, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = {.flag = "--mix-alpha",
                 .flag_meaning = "the fraction alpha of the blocks that are Post-LN, the first floor(alpha L)",
                 .meaning = "Post-LN blocks",
                 .default_value = 0.25,
                 .from_flag = mix_post_blocks,
                 .valid = mix_valid},
     .cuda = 1,
     .init_std = nullptr},
    {.name = "deepnorm",
     .source = "DeepNorm (Wang et al. 2022, DeepNet, arXiv 2203.00555)",
     .equations = "x = LN(alpha x + F(x)), alpha = (2L)^(1/4); head x; beta = (8L)^(-1/4) scales the init of v, "
                  "attproj, fc, fcproj",
     .streams = 1,
     .norms = {1, 1}, .norm_names = {PLAIN_NORMS_1, PLAIN_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 0, .head_norm_names = nullptr, .head = HEAD_IDENTITY,
     .kind = all_deepnorm,
     .qkv_norm = 0, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 0,
     .init_std = deepnorm_init_std},
    {.name = "hybrid",
     .source = "HybridNorm (Zhuo et al. 2025, arXiv 2503.04598)",
     .equations = "attention: x = x + F(x); MLP: xn = LN(x); x = xn + F(xn); F's attention LayerNorms q, k, v; "
                  "head LN_f(x)",
     .streams = 1,
     .norms = {0, 1}, .norm_names = {nullptr, PLAIN_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 1, .head_norm_names = LNF_NORM, .head = HEAD_LN,
     .kind = hybrid_kind,
     .qkv_norm = 1, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "hybrid-star",
     .source = "HybridNorm* (Zhuo et al. 2025, arXiv 2503.04598): HybridNorm with a Pre-Norm block 0",
     .equations = "block 0: x = x + F(LN(x)); blocks l >= 1 as hybrid; F's attention LayerNorms q, k, v; head LN_f(x)",
     .streams = 1,
     .norms = {1, 1}, .norm_names = {PLAIN_NORMS_1, PLAIN_NORMS_2}, .norm_blocks = {1, 0},
     .head_norms = 1, .head_norm_names = LNF_NORM, .head = HEAD_LN,
     .kind = hybrid_star_kind,
     .qkv_norm = 1, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "siamese-hybrid",
     .source = "SiameseNorm's language-model form (Li et al. 2026; the official code's hybrid_pre)",
     .equations = "attention: u = c1 x + LN_y(y); z = F(u); x = x + z/c_l; y = y + z; MLP: as siamese; F's attention "
                  "LayerNorms q, k, v; head LN_f(LN_xf(x) + LN_yf(y))",
     .streams = 2,
     .norms = {2, 3}, .norm_names = {SIAMESE_C1_NORMS_1, SIAMESE_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 3, .head_norm_names = SIAMESE_HEAD_NORMS, .head = HEAD_SIAMESE,
     .kind = siamese_hybrid_kind,
     .qkv_norm = 1, .c1 = 1, .hc = 0,
     .ablations = ABLATE_NO_DEPTH_SCALE | ABLATE_NO_LN_IN,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "pre-qkvnorm",
     .source = "Pre-Norm with HybridNorm's QKV-norm attention (the baseline that separates the QKV norm from the "
               "topology)",
     .equations = "x = x + F(LN(x)); F's attention LayerNorms q, k, v; head LN_f(x)",
     .streams = 1,
     .norms = {1, 1}, .norm_names = {PLAIN_NORMS_1, PLAIN_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 1, .head_norm_names = LNF_NORM, .head = HEAD_LN,
     .kind = all_pre,
     .qkv_norm = 1, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "peri",
     .source = "Peri-LN (Kim et al. 2025, arXiv 2502.02732; the sandwich of Gemma 2 and OLMo 2)",
     .equations = "x = x + LN_out(F(LN(x))); head LN_f(x)",
     .streams = 1,
     .norms = {4, 4}, .norm_names = {PERI_NORMS_1, PERI_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 1, .head_norm_names = LNF_NORM, .head = HEAD_LN,
     .kind = all_peri,
     .qkv_norm = 0, .c1 = 0, .hc = 0,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
    {.name = "hc",
     .source = "Hyper-Connections (Zhu et al., ICLR 2025, arXiv 2409.19606): dynamic, two streams",
     .equations = "A = S + s tanh(LN_h(x, y) W); z = F(LN(A00 x + A10 y)); x = A01 x + A11 y + A03 z; "
                  "y = A02 x + A12 y + A13 z; head LN_f(x + y)",
     .streams = 2,
     .norms = {2, 2}, .norm_names = {HC_NORMS_1, HC_NORMS_2}, .norm_blocks = {0, 0},
     .head_norms = 1, .head_norm_names = LNF_NORM, .head = HEAD_SUM,
     .kind = all_hc,
     .qkv_norm = 0, .c1 = 0, .hc = 1,
     .ablations = 0,
     .setting = NO_SETTING,
     .cuda = 1,
     .init_std = nullptr},
};
static const int NUM_LAYOUTS = (int)(sizeof(LAYOUTS) / sizeof(LAYOUTS[0]));

// the layout called `name`, or -1
static int find_layout(const char* name) {
    for (int i = 0; i < NUM_LAYOUTS; i++)
        if (strcmp(name, LAYOUTS[i].name) == 0) return i;
    return -1;
}

// "pre, post or siamese" (or with "|" as the separator: "pre|post|siamese"), for errors and -h
static std::string layout_names(const char* separator, const char* last, int cuda_only = 0) {
    std::string s;
    int n = 0, count = 0;
    for (int i = 0; i < NUM_LAYOUTS; i++) count += !cuda_only || LAYOUTS[i].cuda;
    for (int i = 0; i < NUM_LAYOUTS; i++) {
        if (cuda_only && !LAYOUTS[i].cuda) continue;
        if (n) s += n == count - 1 ? last : separator;
        s += LAYOUTS[i].name;
        n++;
    }
    return s;
}

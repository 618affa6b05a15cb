/*
host/model_config.h: the model's shape and layout, and the parameter table that fixes the checkpoint order.

  - GPT2Config: the shape (L, C, NH, maxT, V and the padded Vp) and the layout (a row of the registry in
    host/layouts.h) with its ablation bits and its own setting; c_l, SiameseNorm's depth scale
  - ParameterTensorsT: named pointers into the one parameter buffer; parameter_specs: the tensors of a layout in
    checkpoint order with their shapes; parameter_table: the same as offsets (what the optimizer walks over)
  - the checks of a configuration and of a batch against it; the table as JSON (--print-tensors)

Nothing here depends on the scalar type of the model math.
*/
#pragma once
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>
#include "layouts.h"
#include "utils.h"

// ----------------------------------------------------------------------------------------------------------------
// model configuration and file-format constants (the contracts are documented in docs/file_formats.md)

typedef struct {
    int max_seq_len;        // maxT, rows of wpe
    int vocab_size;         // V, e.g. 50257 (GPT-2 BPE) or 256 (bytes)
    int padded_vocab_size;  // Vp >= V, a multiple of 128: rows of wte
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
    int norm;               // the layout: its row in LAYOUTS (host/layouts.h), header[8]
    int ablations;          // ABLATE_* bits, header[9]: the layouts that take them (siamese)
    int layout_setting;     // the layout's own setting, header[10]: 0 = none (see LayoutSetting)
} GPT2Config;

// The largest model and micro-batch: what the checkpoint loader accepts in a header (host/checkpoint.h) and the
// shape flags accept (host/flags.h), so that every count of parameters, activations and bytes fits in 64 bits.
static const int MAX_LAYERS = 1024, MAX_CHANNELS = 1 << 16, MAX_SEQ_LEN = 1 << 20, MAX_VOCAB = 65536;
static const int MAX_PADDED_VOCAB = 1 << 20;       // a header's Vp (llm.c pads GPT-2's 50257 to 50304)
static const int MAX_BATCH_TOKENS = 1 << 30;       // -b * -t

static int pad_vocab(int V) { return (V + 127) / 128 * 128; }

// a model shape, the padded vocabulary derived from V
static GPT2Config make_config(int L, int C, int NH, int maxT, int V, int norm, int ablations = 0, int setting = 0) {
    GPT2Config c;
    c.max_seq_len = maxT;
    c.vocab_size = V;
    c.padded_vocab_size = pad_vocab(V);
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    c.norm = norm;
    c.ablations = ablations;
    c.layout_setting = setting;
    return c;
}

// the layout's row in the registry; what sub-layer s = 2l + k of the model is (host/layouts.h)
static const LayoutInfo& layout_of(const GPT2Config& c) {
    if (c.norm < 0 || c.norm >= NUM_LAYOUTS) fail("unknown layout %d (%s)", c.norm, layout_names(", ", " or ").c_str());
    return LAYOUTS[c.norm];
}
static SubLayerKind sublayer_kind(const GPT2Config& c, int s) {
    return layout_of(c).kind(s, c.num_layers, c.layout_setting);
}
// the layout has a LayerNorm on F's output (slot LN_OUT) at its boundaries: peri
static int has_output_norm(const GPT2Config& c) {
    const LayoutInfo& l = layout_of(c);
    for (int k = 0; k < 2; k++)
        if (l.norms[k] > LN_OUT && l.norm_names[k][2 * LN_OUT]) return 1;
    return 0;
}

// the layout's own setting (header[10]) for a model of L blocks when no flag gives one: its default (0: none)
static int default_layout_setting(int norm, int L) {
    const LayoutSetting& setting = LAYOUTS[norm].setting;
    return setting.flag ? setting.from_flag(setting.default_value, L) : 0;
}

// the layout's name, and its own setting where it has one: "NAME (MEANING: N)"
static std::string layout_description(const GPT2Config& c) {
    const LayoutInfo& layout = layout_of(c);
    if (!layout.setting.flag) return layout.name;
    return std::string(layout.name) + " (" + layout.setting.meaning + ": " + std::to_string(c.layout_setting) + ")";
}

// depth-wise scale 1/c_l of block l on the X stream, c_l = sqrt(2(l+1))
static double inv_depth_scale(const GPT2Config& c, int l) {
    if (c.ablations & ABLATE_NO_DEPTH_SCALE) return 1.0;
    return 1.0 / std::sqrt(2.0 * (l + 1));
}

// ----------------------------------------------------------------------------------------------------------------
// parameters: one contiguous buffer; a struct of named pointers into it; a table that fixes the file order

template <typename T>
struct ParameterTensorsT {  // T: float or double on the CPU, float (and bf16) on the GPU
    T* wte;                       // (Vp, C) token embedding, tied with the output projection
    T* wpe;                       // (maxT, C) position embedding
    T* lnw[2][LN_SLOTS];          // [attn/mlp][slot] (L, C) LayerNorm gains of the sub-layer boundaries
    T* lnb[2][LN_SLOTS];          // (L, C) and shifts
    T* c1;                        // (L, C) siamese_c1: the attention boundary's gain on x (LayoutInfo::c1)
    T* hcs[2];                    // (L, 2, 4) hc (LayoutInfo::hc), [attn/mlp]: the static connection weights S
    T* hcw[2];                    // (L, 4, C)   the dynamic weights' projections W (row m: column m of A)
    T* hcsc[2];                   // (L, 2)      the dynamic weights' scales (alpha's, beta's)
    T* qkvw;                      // (L, 3C, C)
    T* qkvb;                      // (L, 3C)
    T* lnqkvw[3];                 // (L, hs) QKV-norm (LayoutInfo::qkv_norm): the gains of LN_q, LN_k, LN_v
    T* lnqkvb[3];                 // (L, hs) and their shifts
    T* attprojw;                  // (L, C, C)
    T* attprojb;                  // (L, C)
    T* fcw;                       // (L, 4C, C)
    T* fcb;                       // (L, 4C)
    T* fcprojw;                   // (L, C, 4C)
    T* fcprojb;                   // (L, C)
    T* lnfw[LN_SLOTS];            // (C) head LayerNorms: pre LN_f in slot 0; siamese LN_xf, LN_yf, LN_f
    T* lnfb[LN_SLOTS];
};

template <typename T>
struct TensorSpecT {
    const char* name;  // as in the checkpoint tensor list
    T** ptr;           // which pointer of ParameterTensorsT it fills
    size_t size;       // number of elements: the product of the shape
    int decay;         // weight decay applies (2-D weight matrices only)
    int ndim;          // 1..3: (C), (L, C), (Vp, C), (L, 3C, C), ...
    size_t shape[3];
};

// The tensors of a layout in checkpoint order: the embeddings, then for the attention and the MLP the layout's
// boundary LayerNorms (its row in LAYOUTS) before the sub-layer's weights, then the head's LayerNorms; where the row
// has them, hc's connection weights after each sub-layer's LayerNorms, c1 after the attention's LayerNorms and the
// QKV-norm's LN_q, LN_k, LN_v right after qkvb. Pre-Norm is
// llm.c's exact order, so GPT-2 files load unchanged.
template <typename T>
static std::vector<TensorSpecT<T>> parameter_specs(const GPT2Config& c, ParameterTensorsT<T>* p) {
    size_t C = c.channels, L = c.num_layers, Vp = c.padded_vocab_size, maxT = c.max_seq_len;
    std::vector<TensorSpecT<T>> s;
    auto add = [&](const char* name, T** ptr, int decay, std::initializer_list<size_t> shape) {
        TensorSpecT<T> t = {name, ptr, 1, decay, (int)shape.size(), {0, 0, 0}};
        int i = 0;
        for (size_t d : shape) t.size *= d, t.shape[i++] = d;
        s.push_back(t);
    };
    const LayoutInfo& layout = layout_of(c);
    add("wte", &p->wte, 1, {Vp, C});
    add("wpe", &p->wpe, 1, {maxT, C});
    size_t hs = c.num_heads > 0 ? C / c.num_heads : 0;  // validate_config fails a shape whose heads do not divide C
    static const char* const QKV_NORM_NAMES[3][2] = {{"lnqw", "lnqb"}, {"lnkw", "lnkb"}, {"lnvw", "lnvb"}};
    for (int k = 0; k < 2; k++) {  // k = 0: the boundary of the attention, k = 1: of the MLP
        size_t rows = layout.norm_blocks[k] ? (size_t)layout.norm_blocks[k] : L;
        for (int j = 0; j < layout.norms[k]; j++) {
            const char* const* names = layout.norm_names[k] + 2 * j;  // [gain, shift]
            if (!names[0]) continue;                                  // a slot the layout's kinds do not read
            add(names[0], &p->lnw[k][j], 0, {rows, C});
            add(names[1], &p->lnb[k][j], 0, {rows, C});
        }
        if (layout.hc) {  // hyper-connections' weights: hc1s hc1w hc1sc, hc2s hc2w hc2sc
            static const char* const HC_NAMES[2][3] = {{"hc1s", "hc1w", "hc1sc"}, {"hc2s", "hc2w", "hc2sc"}};
            add(HC_NAMES[k][0], &p->hcs[k], 0, {L, 2, 4});
            add(HC_NAMES[k][1], &p->hcw[k], 0, {L, 4, C});
            add(HC_NAMES[k][2], &p->hcsc[k], 0, {L, 2});
        }
        if (k == 0) {
            if (layout.c1) add("c1", &p->c1, 0, {L, C});
            add("qkvw", &p->qkvw, 1, {L, 3 * C, C});
            add("qkvb", &p->qkvb, 0, {L, 3 * C});
            for (int j = 0; layout.qkv_norm && j < 3; j++) {
                add(QKV_NORM_NAMES[j][0], &p->lnqkvw[j], 0, {L, hs});
                add(QKV_NORM_NAMES[j][1], &p->lnqkvb[j], 0, {L, hs});
            }
            add("attprojw", &p->attprojw, 1, {L, C, C});
            add("attprojb", &p->attprojb, 0, {L, C});
        } else {
            add("fcw", &p->fcw, 1, {L, 4 * C, C});
            add("fcb", &p->fcb, 0, {L, 4 * C});
            add("fcprojw", &p->fcprojw, 1, {L, C, 4 * C});
            add("fcprojb", &p->fcprojb, 0, {L, C});
        }
    }
    for (int j = 0; j < layout.head_norms; j++) {
        add(layout.head_norm_names[2 * j], &p->lnfw[j], 0, {C});
        add(layout.head_norm_names[2 * j + 1], &p->lnfb[j], 0, {C});
    }
    return s;
}

// point the named pointers of `p` into `memory`, in checkpoint order
template <typename T>
static void point_parameters(const GPT2Config& c, ParameterTensorsT<T>* p, T* memory) {
    memset(p, 0, sizeof(*p));
    for (const TensorSpecT<T>& t : parameter_specs(c, p)) {
        *t.ptr = memory;
        memory += t.size;
    }
}

// the same table with offsets instead of pointers: what the optimizer and the init loop walk over
typedef struct {
    const char* name;
    size_t offset, size;  // in elements, into the one parameter buffer
    int decay;
    int ndim;
    size_t shape[3];
} TensorInfo;

static std::vector<TensorInfo> parameter_table(const GPT2Config& c) {
    ParameterTensorsT<char> dummy;
    std::vector<TensorInfo> table;
    size_t offset = 0;
    for (const TensorSpecT<char>& t : parameter_specs(c, &dummy)) {
        table.push_back({t.name, offset, t.size, t.decay, t.ndim, {t.shape[0], t.shape[1], t.shape[2]}});
        offset += t.size;
    }
    return table;
}

static size_t count_parameters(const GPT2Config& c) {
    size_t n = 0;
    for (const TensorInfo& t : parameter_table(c)) n += t.size;
    return n;
}

static void validate_config(const GPT2Config& c) {
    if (c.num_layers < 1 || c.channels < 1 || c.num_heads < 1 || c.max_seq_len < 1 || c.vocab_size < 1)
        fail("model shape must be positive (L=%d C=%d NH=%d maxT=%d V=%d)", c.num_layers, c.channels, c.num_heads,
             c.max_seq_len, c.vocab_size);
    if (c.num_layers > MAX_LAYERS || c.channels > MAX_CHANNELS || c.max_seq_len > MAX_SEQ_LEN ||
        c.padded_vocab_size > MAX_PADDED_VOCAB)
        fail("model shape beyond the limits (L=%d C=%d maxT=%d Vp=%d; at most L=%d C=%d maxT=%d Vp=%d)", c.num_layers,
             c.channels, c.max_seq_len, c.padded_vocab_size, MAX_LAYERS, MAX_CHANNELS, MAX_SEQ_LEN, MAX_PADDED_VOCAB);
    if (c.channels % c.num_heads != 0) fail("channels (%d) must be divisible by heads (%d)", c.channels, c.num_heads);
    if (c.vocab_size > MAX_VOCAB) fail("vocabulary %d does not fit the uint16 token shards", c.vocab_size);
    if (c.padded_vocab_size < c.vocab_size) fail("padded vocabulary %d < vocabulary %d", c.padded_vocab_size, c.vocab_size);
    const LayoutInfo& layout = layout_of(c);
    if (c.ablations & ~(ABLATE_NO_DEPTH_SCALE | ABLATE_NO_LN_IN)) fail("unknown ablation bits %d", c.ablations);
    if (c.ablations & ~layout.ablations) {
        std::vector<std::string> takers;
        for (const LayoutInfo& other : LAYOUTS)
            if (other.ablations) takers.push_back(other.name);
        std::string list;
        for (size_t i = 0; i < takers.size(); i++)
            list += (i == 0 ? "" : i + 1 == takers.size() ? " and " : ", ") + takers[i];
        fail("the ablations apply to the %s layout%s only (not %s)", list.c_str(), takers.size() > 1 ? "s" : "",
             layout.name);
    }
    if (!layout.setting.flag && c.layout_setting != 0)
        fail("the %s layout has no setting of its own, but header[10] = %d", layout.name, c.layout_setting);
    if (layout.setting.flag && !layout.setting.valid(c.layout_setting, c.num_layers))
        fail("%s at L=%d: %d is not a valid %s (header[10])", layout.name, c.num_layers, c.layout_setting,
             layout.setting.meaning);
}

// the checks both trainers' forward passes make of a batch (B, T) before running it: its shape against the model
// and against the activations allocated for (max_B, max_T), and every token id against the vocabulary
static void check_batch(const GPT2Config& c, const int* inputs, const int* targets, int B, int T, int max_B,
                        int max_T) {
    if (B < 1 || T < 1) fail("batch shape must be positive (B=%d, T=%d)", B, T);
    if (T > c.max_seq_len) fail("sequence length %d exceeds the model's maximum %d", T, c.max_seq_len);
    if (B > max_B || T > max_T) fail("batch (B=%d, T=%d) exceeds the allocated (B=%d, T=%d)", B, T, max_B, max_T);
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= c.vocab_size)
            fail("token id %d out of range (vocabulary %d)", inputs[i], c.vocab_size);
        if (targets && (targets[i] < 0 || targets[i] >= c.vocab_size))
            fail("target id %d out of range (vocabulary %d)", targets[i], c.vocab_size);
    }
}

// --print-tensors: the tensor table of a model as one JSON object: the configuration (the layout by name, its
// ablation bits and its own setting as header[9] and header[10] hold them), then each tensor in checkpoint order
// with its offset (in float32 elements after the 256-int header), shape and whether weight decay applies. The
// Python tools and tests read checkpoints through it instead of keeping their own copy of the order.
static void print_tensor_table(const GPT2Config& c) {
    printf("{\"layout\": \"%s\", \"ablations\": %d, \"layout_setting\": %d, \"max_seq_len\": %d, "
           "\"vocab_size\": %d, \"padded_vocab_size\": %d, \"num_layers\": %d, \"num_heads\": %d, "
           "\"channels\": %d, \"header_ints\": %d, \"num_parameters\": %zu,\n \"tensors\": [",
           layout_of(c).name, c.ablations, c.layout_setting, c.max_seq_len, c.vocab_size, c.padded_vocab_size,
           c.num_layers, c.num_heads, c.channels, HEADER_INTS, count_parameters(c));
    std::vector<TensorInfo> table = parameter_table(c);
    for (size_t i = 0; i < table.size(); i++) {
        const TensorInfo& t = table[i];
        printf("%s\n  {\"name\": \"%s\", \"offset\": %zu, \"shape\": [", i ? "," : "", t.name, t.offset);
        for (int d = 0; d < t.ndim; d++) printf("%s%zu", d ? ", " : "", t.shape[d]);
        printf("], \"decay\": %d}", t.decay);
    }
    printf("\n]}\n");
}

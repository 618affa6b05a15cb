/*
gpt2_common.h: the host-side plumbing that the CPU reference (reference_cpu.cpp) and the CUDA trainer
(train_gpt2.cu) share, so that both read and write exactly the same files and take exactly the same flags:

  - errors: one line on stderr and a non-zero exit, never a crash
  - the model configuration, the three layouts, and the parameter table that fixes the checkpoint order
  - the GPT-2 initialization (seeded, identical on CPU and GPU)
  - llm.c's checkpoint, token-shard and tokenizer formats, and our optimizer-state file
  - the data loader, the learning-rate schedule and the command-line flags

Nothing here depends on the scalar type of the model math. The formats are documented in the README.
*/
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

// ----------------------------------------------------------------------------------------------------------------
// errors: every failure is one line on stderr and a non-zero exit, never a crash

[[noreturn]] static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(EXIT_FAILURE);
}

static FILE* fopen_or_fail(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (!f) fail("cannot open '%s' (%s)", path, strerror(errno));
    return f;
}

static void fread_or_fail(void* dst, size_t size, size_t n, FILE* f, const char* path) {
    if (fread(dst, size, n, f) != n) fail("'%s' is truncated or unreadable", path);
}

static void fwrite_or_fail(const void* src, size_t size, size_t n, FILE* f, const char* path) {
    if (fwrite(src, size, n, f) != n) fail("cannot write '%s' (%s)", path, strerror(errno));
}

static long long file_size_or_fail(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) fail("cannot open '%s' (%s)", path, strerror(errno));
    return (long long)st.st_size;
}

static void* calloc_or_fail(size_t n, size_t size) {
    void* p = calloc(n, size);
    if (!p && n > 0) fail("out of memory allocating %.1f MiB", (double)n * size / (1 << 20));
    return p;
}

// ----------------------------------------------------------------------------------------------------------------
// model configuration and file-format constants (the contracts are documented in the README)

enum NormLayout { NORM_PRE = 0, NORM_POST = 1, NORM_SIAMESE = 2 };
static const char* const NORM_NAMES[] = {"pre", "post", "siamese"};

// SiameseNorm ablations, header[9] of the checkpoint (0 for the full method and for pre/post)
enum { ABLATE_NO_DEPTH_SCALE = 1,  // c_l = 1 instead of sqrt(2(l+1))
       ABLATE_NO_LN_IN = 2 };      // the normalized input LN_in becomes the identity

static const int MODEL_MAGIC = 20240326, MODEL_VERSION_FP32 = 3;  // llm.c's model file
static const int SHARD_MAGIC = 20240520, SHARD_VERSION = 1;       // llm.c's token shard
static const int TOKENIZER_MAGIC = 20240328;                      // llm.c's tokenizer file
static const int STATE_MAGIC = 20240527, STATE_VERSION = 1;       // our optimizer/data-loader state
static const int HEADER_INTS = 256;
static const int GPT2_VOCAB = 50257;

typedef struct {
    int max_seq_len;        // maxT, rows of wpe
    int vocab_size;         // V, e.g. 50257 (GPT-2 BPE) or 256 (bytes)
    int padded_vocab_size;  // Vp >= V, a multiple of 128: rows of wte
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
    int norm;               // NormLayout
    int ablations;          // ABLATE_* bits, siamese only
} GPT2Config;

static int pad_vocab(int V) { return (V + 127) / 128 * 128; }

// a model shape, the padded vocabulary derived from V
static GPT2Config make_config(int L, int C, int NH, int maxT, int V, int norm, int ablations = 0) {
    GPT2Config c;
    c.max_seq_len = maxT;
    c.vocab_size = V;
    c.padded_vocab_size = pad_vocab(V);
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    c.norm = norm;
    c.ablations = ablations;
    return c;
}

// The three LayerNorm slots of a sub-layer boundary and of the head. Pre and post use only LN_X (the norm on the
// single stream x: LN1/LN2 and LN_f); siamese uses all three: LN_x, LN_y and LN_in (LN_xf, LN_yf, LN_f at the head).
enum { LN_X = 0, LN_Y = 1, LN_IN = 2, LN_SLOTS = 3 };
static int ln_slots(const GPT2Config& c) { return c.norm == NORM_SIAMESE ? 3 : 1; }

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
    T* qkvw;                      // (L, 3C, C)
    T* qkvb;                      // (L, 3C)
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

// The tensors of a layout in checkpoint order. Pre-Norm is llm.c's exact order, so GPT-2 files load unchanged.
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
    add("wte", &p->wte, 1, {Vp, C});
    add("wpe", &p->wpe, 1, {maxT, C});
    static const char* const SIAMESE_LN[2][3][2] = {{{"ln1xw", "ln1xb"}, {"ln1yw", "ln1yb"}, {"ln1iw", "ln1ib"}},
                                                    {{"ln2xw", "ln2xb"}, {"ln2yw", "ln2yb"}, {"ln2iw", "ln2ib"}}};
    static const char* const PLAIN_LN[2][2] = {{"ln1w", "ln1b"}, {"ln2w", "ln2b"}};
    for (int k = 0; k < 2; k++) {  // k = 0: the boundary before attention, k = 1: before the MLP
        for (int j = 0; j < ln_slots(c); j++) {
            const char* wname = c.norm == NORM_SIAMESE ? SIAMESE_LN[k][j][0] : PLAIN_LN[k][0];
            const char* bname = c.norm == NORM_SIAMESE ? SIAMESE_LN[k][j][1] : PLAIN_LN[k][1];
            add(wname, &p->lnw[k][j], 0, {L, C});
            add(bname, &p->lnb[k][j], 0, {L, C});
        }
        if (k == 0) {
            add("qkvw", &p->qkvw, 1, {L, 3 * C, C});
            add("qkvb", &p->qkvb, 0, {L, 3 * C});
            add("attprojw", &p->attprojw, 1, {L, C, C});
            add("attprojb", &p->attprojb, 0, {L, C});
        } else {
            add("fcw", &p->fcw, 1, {L, 4 * C, C});
            add("fcb", &p->fcb, 0, {L, 4 * C});
            add("fcprojw", &p->fcprojw, 1, {L, C, 4 * C});
            add("fcprojb", &p->fcprojb, 0, {L, C});
        }
    }
    if (c.norm == NORM_PRE) {
        add("lnfw", &p->lnfw[0], 0, {C});
        add("lnfb", &p->lnfb[0], 0, {C});
    } else if (c.norm == NORM_SIAMESE) {
        static const char* const HEAD[3][2] = {{"lnfxw", "lnfxb"}, {"lnfyw", "lnfyb"}, {"lnfw", "lnfb"}};
        for (int j = 0; j < 3; j++) {
            add(HEAD[j][0], &p->lnfw[j], 0, {C});
            add(HEAD[j][1], &p->lnfb[j], 0, {C});
        }
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
    if (c.channels % c.num_heads != 0) fail("channels (%d) must be divisible by heads (%d)", c.channels, c.num_heads);
    if (c.vocab_size > 65536) fail("vocabulary %d does not fit the uint16 token shards", c.vocab_size);
    if (c.padded_vocab_size < c.vocab_size) fail("padded vocabulary %d < vocabulary %d", c.padded_vocab_size, c.vocab_size);
    if (c.norm < 0 || c.norm > 2) fail("unknown layout %d (0 pre, 1 post, 2 siamese)", c.norm);
    if (c.ablations & ~(ABLATE_NO_DEPTH_SCALE | ABLATE_NO_LN_IN)) fail("unknown ablation bits %d", c.ablations);
    if (c.ablations && c.norm != NORM_SIAMESE) fail("the ablations apply to the siamese layout only");
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

// Small deterministic random numbers: splitmix64, uniform in [0, 1), Box-Muller for normals.
static uint64_t splitmix64(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double random_uniform(uint64_t* state) { return (splitmix64(state) >> 11) * (1.0 / 9007199254740992.0); }
static double random_normal(uint64_t* state) {
    double u1 = random_uniform(state), u2 = random_uniform(state);
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
}

// p[i] = std_ * random_normal(&state) for i = 0..n-1, the draws in sequence, on all cores for large n: after k
// draws splitmix64's state is state + k * its increment, so a chunk that starts at normal i0 (two draws a normal)
// starts from state + 2 i0 * increment, and the numbers are bit for bit those of one loop
template <typename T>
static void fill_normal(T* p, size_t n, double std_, uint64_t state) {
    size_t workers = std::thread::hardware_concurrency();
    if (workers < 2 || n < ((size_t)1 << 20)) workers = 1;
    size_t chunk = (n + workers - 1) / workers;
    std::vector<std::thread> threads;
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
        threads.emplace_back([=]() {
            uint64_t s = state + 2 * (uint64_t)i0 * 0x9E3779B97F4A7C15ull;
            for (size_t i = i0; i < std::min(n, i0 + chunk); i++) p[i] = (T)(std_ * random_normal(&s));
        });
    }
    for (std::thread& t : threads) t.join();
}

// GPT-2 initialization into a parameter buffer laid out by parameter_table: weights N(0, 0.02), the residual output
// projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm gains 1 and shifts 0, padded vocabulary
// rows 0. Each tensor draws from its own stream seeded by (seed, name), so the weights the layouts share start
// identical for the same seed, and the CPU and the GPU trainers start from the same numbers.
template <typename T>
static void init_parameters(const GPT2Config& c, uint64_t seed, T* memory) {
    for (const TensorInfo& t : parameter_table(c)) {
        T* p = memory + t.offset;
        std::string name = t.name;
        int is_gain = name.compare(0, 2, "ln") == 0 && name.back() == 'w';
        if (is_gain) {
            for (size_t i = 0; i < t.size; i++) p[i] = (T)1;
        } else if (t.decay) {  // every 2-D weight matrix
            uint64_t state = seed;
            for (char ch : name) state = state * 1099511628211ull ^ (uint64_t)(unsigned char)ch;
            double std_ = 0.02;
            if (name == "attprojw" || name == "fcprojw") std_ = 0.02 / std::sqrt(2.0 * c.num_layers);
            size_t n = t.size;
            if (name == "wte") n = (size_t)c.vocab_size * c.channels;  // the padded rows stay 0
            fill_normal(p, n, std_, state);
            for (size_t i = n; i < t.size; i++) p[i] = (T)0;
        } else {  // biases and LayerNorm shifts
            for (size_t i = 0; i < t.size; i++) p[i] = (T)0;
        }
    }
}

// ----------------------------------------------------------------------------------------------------------------
// files: float32 arrays written from and read into any element type; atomic replacement

template <typename T>
static void write_as_float(const T* src, size_t n, FILE* f, const char* path) {
    std::vector<float> buf(1 << 16);
    for (size_t i = 0; i < n; i += buf.size()) {
        size_t k = n - i < buf.size() ? n - i : buf.size();
        for (size_t j = 0; j < k; j++) buf[j] = (float)src[i + j];
        fwrite_or_fail(buf.data(), sizeof(float), k, f, path);
    }
}

template <typename T>
static void read_float_as(T* dst, size_t n, FILE* f, const char* path) {
    std::vector<float> buf(1 << 16);
    for (size_t i = 0; i < n; i += buf.size()) {
        size_t k = n - i < buf.size() ? n - i : buf.size();
        fread_or_fail(buf.data(), sizeof(float), k, f, path);
        for (size_t j = 0; j < k; j++) dst[i + j] = (T)buf[j];
    }
}

// Write to path.tmp, then rename over path: a crash or a full disk never leaves a half-written file behind.
static FILE* open_for_atomic_write(const char* path, std::string* tmp) {
    *tmp = std::string(path) + ".tmp";
    return fopen_or_fail(tmp->c_str(), "wb");
}
static void finish_atomic_write(FILE* f, const char* path, const std::string& tmp) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0) {
        remove(tmp.c_str());
        fail("cannot write '%s' (%s)", path, strerror(errno));
    }
    if (rename(tmp.c_str(), path) != 0) fail("cannot rename '%s' to '%s' (%s)", tmp.c_str(), path, strerror(errno));
}

// ----------------------------------------------------------------------------------------------------------------
// checkpoints: llm.c's model file. 256 int32 header (magic 20240326, version 3 = float32, maxT, V, L, NH, C, Vp,
// header[8] = layout, header[9] = siamese ablation bits), then the float32 parameters in parameter_table order.

static void checkpoint_header(const GPT2Config& c, int header[HEADER_INTS]) {
    memset(header, 0, HEADER_INTS * sizeof(int));
    header[0] = MODEL_MAGIC;
    header[1] = MODEL_VERSION_FP32;
    header[2] = c.max_seq_len;
    header[3] = c.vocab_size;
    header[4] = c.num_layers;
    header[5] = c.num_heads;
    header[6] = c.channels;
    header[7] = c.padded_vocab_size;
    header[8] = c.norm;
    header[9] = c.ablations;
}

// Opens a checkpoint, checks its header and its size, and leaves the file positioned at the parameters.
static FILE* checkpoint_open(const char* path, GPT2Config* config) {
    FILE* f = fopen_or_fail(path, "rb");
    int header[HEADER_INTS];
    fread_or_fail(header, sizeof(int), HEADER_INTS, f, path);
    if (header[0] != MODEL_MAGIC) fail("'%s' is not a model checkpoint (bad magic %d)", path, header[0]);
    if (header[1] != MODEL_VERSION_FP32)
        fail("'%s' has version %d; this trainer reads float32 checkpoints (version 3)", path, header[1]);
    GPT2Config c;
    c.max_seq_len = header[2];
    c.vocab_size = header[3];
    c.num_layers = header[4];
    c.num_heads = header[5];
    c.channels = header[6];
    c.padded_vocab_size = header[7];
    c.norm = header[8];
    c.ablations = header[9];
    if (c.max_seq_len < 1 || c.max_seq_len > 1 << 20 || c.num_layers < 1 || c.num_layers > 1024 || c.channels < 1 ||
        c.channels > 1 << 16 || c.num_heads < 1 || c.padded_vocab_size < 1 || c.padded_vocab_size > 1 << 20)
        fail("'%s' has an implausible header (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d)", path, c.max_seq_len,
             c.vocab_size, c.num_layers, c.num_heads, c.channels, c.padded_vocab_size);
    for (int i = 10; i < HEADER_INTS; i++)
        if (header[i] != 0) fail("'%s' has unknown header field %d = %d", path, i, header[i]);
    validate_config(c);
    long long expected = (long long)HEADER_INTS * 4 + (long long)count_parameters(c) * 4;
    long long actual = file_size_or_fail(path);
    if (actual != expected)
        fail("'%s' has %lld bytes, expected %lld for this %s model (%s)", path, actual, expected,
             NORM_NAMES[c.norm], actual < expected ? "truncated" : "trailing data");
    *config = c;
    return f;
}

// reads the parameters after checkpoint_open and rejects non-finite values
template <typename T>
static void checkpoint_read_parameters(FILE* f, const char* path, T* params, size_t n) {
    read_float_as(params, n, f, path);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (!std::isfinite((double)params[i])) fail("'%s' holds a non-finite parameter at index %zu", path, i);
}

template <typename T>
static void checkpoint_write(const char* path, const GPT2Config& c, const T* params) {
    int header[HEADER_INTS];
    checkpoint_header(c, header);
    std::string tmp;
    FILE* f = open_for_atomic_write(path, &tmp);
    fwrite_or_fail(header, sizeof(int), HEADER_INTS, f, path);
    write_as_float(params, count_parameters(c), f, path);
    finish_atomic_write(f, path, tmp);
}

// ----------------------------------------------------------------------------------------------------------------
// data: llm.c's token shards (256 int32 header, then uint16 tokens), read in order, batch after batch

typedef struct {
    std::vector<std::string> files;
    std::vector<long long> num_tokens;  // per shard
    int vocab_size;                     // from the shard headers (0 there means GPT-2's 50257)
    int B, T;
    int shard;                          // current shard
    long long position;                 // next token to read in it
    std::vector<uint16_t> buffer;       // B*T+1 tokens
    std::vector<int> inputs, targets;   // (B, T)
} DataLoader;

static void dataloader_init(DataLoader* d, const char* pattern, int B, int T) {
    glob_t g;
    int r = glob(pattern, 0, nullptr, &g);
    if (r != 0 || g.gl_pathc == 0) {
        if (r == 0) globfree(&g);
        fail("no token shards match '%s' (prepare the default data with: python3 data/prepare.py kjv)", pattern);
    }
    d->files.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    d->num_tokens.clear();
    d->vocab_size = -1;
    d->B = B;
    d->T = T;
    for (const std::string& path : d->files) {
        const char* p = path.c_str();
        FILE* f = fopen_or_fail(p, "rb");
        int header[HEADER_INTS];
        fread_or_fail(header, sizeof(int), HEADER_INTS, f, p);
        fclose(f);
        if (header[0] != SHARD_MAGIC) fail("'%s' is not a token shard (bad magic %d)", p, header[0]);
        if (header[1] != SHARD_VERSION) fail("'%s' has unsupported shard version %d", p, header[1]);
        long long n = header[2];
        long long bytes = file_size_or_fail(p);
        if (n < 0 || bytes != HEADER_INTS * 4 + 2 * n)
            fail("'%s' has %lld bytes but its header promises %lld tokens (%s)", p, bytes, n,
                 bytes < HEADER_INTS * 4 + 2 * n ? "truncated" : "trailing data");
        int vocab = header[3] == 0 ? GPT2_VOCAB : header[3];
        if (vocab < 1 || vocab > 65536) fail("'%s' has an invalid vocabulary size %d", p, vocab);
        if (d->vocab_size != -1 && vocab != d->vocab_size)
            fail("'%s' has vocabulary %d but earlier shards have %d", p, vocab, d->vocab_size);
        d->vocab_size = vocab;
        if (n < (long long)B * T + 1)
            fail("'%s' holds %lld tokens, fewer than one batch needs (B*T+1 = %lld)", p, n, (long long)B * T + 1);
        d->num_tokens.push_back(n);
    }
    d->buffer.resize((size_t)B * T + 1);
    d->inputs.resize((size_t)B * T);
    d->targets.resize((size_t)B * T);
    d->shard = 0;
    d->position = 0;
}

static void dataloader_reset(DataLoader* d) {
    d->shard = 0;
    d->position = 0;
}

// Loads the next (B, T) inputs and the targets one token later. Token ids are checked against the vocabulary.
static void dataloader_next_batch(DataLoader* d) {
    long long need = (long long)d->B * d->T + 1;
    if (d->position + need > d->num_tokens[d->shard]) {  // move on to the next shard (wrapping around)
        d->shard = (d->shard + 1) % (int)d->files.size();
        d->position = 0;
    }
    const char* path = d->files[d->shard].c_str();
    FILE* f = fopen_or_fail(path, "rb");
    if (fseek(f, HEADER_INTS * 4 + d->position * 2, SEEK_SET) != 0) fail("cannot seek in '%s'", path);
    fread_or_fail(d->buffer.data(), sizeof(uint16_t), (size_t)need, f, path);
    fclose(f);
    for (long long i = 0; i < need; i++)
        if (d->buffer[i] >= d->vocab_size)
            fail("'%s': token id %d at position %lld is out of range (vocabulary %d)", path, d->buffer[i],
                 d->position + i, d->vocab_size);
    for (long long i = 0; i < need - 1; i++) {
        d->inputs[i] = d->buffer[i];
        d->targets[i] = d->buffer[i + 1];
    }
    d->position += need - 1;
}

// ----------------------------------------------------------------------------------------------------------------
// optimizer state: AdamW moments plus where the data loader stands, so that training resumes exactly.
// 256 int32 header: magic 20240527, version 1, step, B, T, shard, position (int64 in 2 ints), sampling rng (2 ints),
// number of parameters (2 ints); then m and v as float32.

typedef struct {
    int step, B, T, shard;
    long long position;
    uint64_t rng;
    uint64_t num_parameters;
} TrainState;

static void pack64(int* h, uint64_t v) { memcpy(h, &v, 8); }
static uint64_t unpack64(const int* h) {
    uint64_t v;
    memcpy(&v, h, 8);
    return v;
}

template <typename T>
static void state_write(const char* path, const TrainState& s, const T* m, const T* v) {
    int header[HEADER_INTS] = {0};
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = s.step;
    header[3] = s.B;
    header[4] = s.T;
    header[5] = s.shard;
    pack64(header + 6, (uint64_t)s.position);
    pack64(header + 8, s.rng);
    pack64(header + 10, s.num_parameters);
    std::string tmp;
    FILE* f = open_for_atomic_write(path, &tmp);
    fwrite_or_fail(header, sizeof(int), HEADER_INTS, f, path);
    write_as_float(m, s.num_parameters, f, path);
    write_as_float(v, s.num_parameters, f, path);
    finish_atomic_write(f, path, tmp);
}

// Reads a state file for a model of num_parameters trained on `d`, checks that it fits, and moves `d` to where
// the run stopped. m and v must hold num_parameters elements each.
template <typename T>
static TrainState state_read(const char* path, size_t num_parameters, DataLoader* d, T* m, T* v) {
    FILE* f = fopen_or_fail(path, "rb");
    int header[HEADER_INTS];
    fread_or_fail(header, sizeof(int), HEADER_INTS, f, path);
    if (header[0] != STATE_MAGIC || header[1] != STATE_VERSION) fail("'%s' is not an optimizer state file", path);
    TrainState s;
    s.step = header[2];
    s.B = header[3];
    s.T = header[4];
    s.shard = header[5];
    s.position = (long long)unpack64(header + 6);
    s.rng = unpack64(header + 8);
    s.num_parameters = unpack64(header + 10);
    if (s.num_parameters != num_parameters)
        fail("'%s' is for a model of %llu parameters, not %zu", path, (unsigned long long)s.num_parameters,
             num_parameters);
    if (file_size_or_fail(path) != HEADER_INTS * 4 + 8LL * (long long)num_parameters)
        fail("'%s' is truncated or has trailing data", path);
    if (s.B != d->B || s.T != d->T)
        fail("'%s' was written with -b %d -t %d; resume with the same batch shape (now -b %d -t %d)", path, s.B, s.T,
             d->B, d->T);
    if (s.step < 0 || s.shard < 0 || s.shard >= (int)d->files.size() || s.position < 0 ||
        s.position > d->num_tokens[s.shard])
        fail("'%s' points past the training data (shard %d); were the shards changed?", path, s.shard);
    read_float_as(m, num_parameters, f, path);
    read_float_as(v, num_parameters, f, path);
    fclose(f);
    d->shard = s.shard;
    d->position = s.position;
    return s;
}

// ----------------------------------------------------------------------------------------------------------------
// tokenizer: llm.c's file (256 int32 header: magic, version 2, vocab size, eot; then per token a length and bytes)

typedef struct {
    std::vector<std::string> tokens;  // empty when no tokenizer was loaded
    int eot_token;
} Tokenizer;

static void tokenizer_load(Tokenizer* t, const char* path, int required) {
    t->tokens.clear();
    t->eot_token = 0;
    FILE* f = fopen(path, "rb");
    if (!f) {
        if (required) fail("cannot open tokenizer '%s' (%s)", path, strerror(errno));
        fprintf(stderr, "warning: no tokenizer at '%s'; samples print token ids\n", path);
        return;
    }
    int header[HEADER_INTS];
    fread_or_fail(header, sizeof(int), HEADER_INTS, f, path);
    if (header[0] != TOKENIZER_MAGIC) fail("'%s' is not a tokenizer file (bad magic %d)", path, header[0]);
    if (header[1] != 1 && header[1] != 2) fail("'%s' has unsupported tokenizer version %d", path, header[1]);
    int n = header[2];
    if (n < 1 || n > 65536) fail("'%s' has an invalid vocabulary size %d", path, n);
    // version 1 (llm.c's first GPT-2 tokenizer files) has no eot field: GPT-2's <|endoftext|> is the last token
    t->eot_token = header[1] == 1 ? n - 1 : header[3];
    if (t->eot_token < 0 || t->eot_token >= n) fail("'%s' has an invalid eot token %d", path, t->eot_token);
    t->tokens.resize(n);
    for (int i = 0; i < n; i++) {
        unsigned char len;
        fread_or_fail(&len, 1, 1, f, path);
        if (len == 0) fail("'%s': token %d has length 0", path, i);
        t->tokens[i].resize(len);
        fread_or_fail(&t->tokens[i][0], 1, len, f, path);
    }
    if (fgetc(f) != EOF) fail("'%s' has trailing data after %d tokens", path, n);
    fclose(f);
}

// prints a token's bytes; control bytes other than newline and tab are escaped so a sample cannot upset a terminal
static void tokenizer_print(const Tokenizer* t, int token) {
    if (t->tokens.empty() || token < 0 || token >= (int)t->tokens.size()) {
        printf("<%d>", token);
        return;
    }
    for (unsigned char ch : t->tokens[token]) {
        if (ch < 32 && ch != '\n' && ch != '\t') printf("\\x%02x", ch);
        else putchar(ch);
    }
}

template <typename T>
static int sample_from(const T* probs, int V, double coin) {
    double cdf = 0;
    for (int i = 0; i < V; i++) {
        cdf += probs[i];
        if (coin < cdf) return i;
    }
    return V - 1;  // rounding
}

// ----------------------------------------------------------------------------------------------------------------
// learning rate: linear warmup over `warmup` steps, then cosine decay to final_frac * max_lr at the last step

static double learning_rate_at(int step, int total, double max_lr, int warmup, double final_frac) {
    if (step < warmup) return max_lr * (step + 1) / warmup;
    if (total <= warmup) return max_lr;
    double progress = (double)(step - warmup) / (total - warmup);
    double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));  // 1 -> 0
    return max_lr * (final_frac + (1 - final_frac) * coeff);
}


// ----------------------------------------------------------------------------------------------------------------
// command-line flags: llm.c's letters where the meaning is the same, plus --norm and the model-shape flags

typedef struct {
    const char *train_pattern, *val_pattern, *model, *out_dir, *tokenizer;
    const char* attention;  // --attention: CUDA trainer only, materialized or flash (nullptr: the build's default)
    int layers, channels, heads, max_seq_len, vocab, norm, ablations;  // 0 (-1 for norm): not given
    int B, T, total_batch, warmup, max_steps, val_every, val_steps, sample_every, gen_tokens;
    int checkpoint_every, resume, overfit, tf32, eval_answers;
    int recompute;  // -r: CUDA trainer only, recompute GELU and LayerNorm outputs in the backward pass (0 or 1)
    int print_tensors;  // --print-tensors: print the model's tensor table as JSON and exit
    double lr, final_frac, weight_decay, grad_clip;
    uint64_t seed;
} TrainOptions;

static void print_usage(const char* program) {
    fprintf(stderr,
            "usage: %s [flags]\n"
            "  -i <glob>   train token shards            (default data/kjv/kjv_train.bin)\n"
            "  -j <glob>   validation token shards       (default data/kjv/kjv_val.bin)\n"
            "  -e <model>  d12|d24|d36|d48 (GPT-2 small..XL shapes) or a checkpoint .bin to start from\n"
            "  --norm <layout>    pre|post|siamese for a new model (default pre); checked against a checkpoint\n"
            "  --layers N --channels N --heads N --max-seq-len N   free model shape (default 4, 128, 4, 1024)\n"
            "  --vocab N          vocabulary of a new model (default: from the shard header)\n"
            "  --no-depth-scale   siamese ablation: c_l = 1\n"
            "  --no-ln-in         siamese ablation: LN_in is the identity\n"
            "  -o <dir>    output directory for main.log and checkpoints (default none)\n"
            "  -b N        micro-batch size (default 8)          -t N  sequence length (default 128)\n"
            "  -d N        total batch size in tokens; gradient accumulation = d/(b*t) (default b*t)\n"
            "  -l F        peak learning rate (default 3e-4)     -u N  warmup steps (default 0)\n"
            "  -q F        final learning-rate fraction of cosine decay (default 1.0 = constant)\n"
            "  -c F        weight decay (default 0.0)            --grad-clip F  global-norm clip, 0 off (default 1.0)\n"
            "  -x N        steps (default -1: one epoch)         -a 0|1  overfit a single batch (default 0)\n"
            "  -v N        validate every N steps (default 20)   -m N  validation batches (default 20)\n"
            "  -s N        sample every N steps (default 20)     -g N  tokens to sample (default 64)\n"
            "  -n N        checkpoint every N steps, and always at the end when -o is given (default 0)\n"
            "  -y 0|1      resume from the latest checkpoint in -o (default 0)\n"
            "  --seed N    initialization and sampling seed (default 1337)\n"
            "  --tokenizer <file>  for decoding samples (default: *_tokenizer.bin next to the train shards)\n"
            "  --eval-answers N    at each validation, exact-match accuracy of greedy answers on the first N\n"
            "                      'question=answer' lines of the validation shard (the addition task; default 0)\n"
            "  --print-tensors     print the tensor table (checkpoint order, shapes) of the model that -e or the\n"
            "                      shape flags describe, as JSON, and exit (the Python tools read it)\n"
            "  -f 0|1      CUDA trainer only: TF32 tensor cores for the float32 matrix products (default 0)\n"
            "  -r 0|1      CUDA trainer only: recompute the GELU and LayerNorm outputs in the backward pass instead\n"
            "              of keeping them, for less memory (default 0; the CPU trainer rejects -r 1)\n"
            "  --attention materialized|flash   CUDA trainer only: the attention kernels (default: the build's,\n"
            "              make ATTENTION=...)\n"
            "  threads (CPU): OMP_NUM_THREADS\n",
            program);
}

static long parse_int(const char* flag, const char* s) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) fail("flag %s expects an integer, got '%s'", flag, s);
    if (v < -(1L << 31) || v > (1L << 31) - 1) fail("flag %s: %s is out of range", flag, s);
    return v;
}

static double parse_double(const char* flag, const char* s) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !std::isfinite(v)) fail("flag %s expects a number, got '%s'", flag, s);
    return v;
}

static int parse_norm(const char* s) {
    for (int i = 0; i < 3; i++)
        if (strcmp(s, NORM_NAMES[i]) == 0) return i;
    fail("--norm expects pre, post or siamese, got '%s'", s);
}

// Parses and checks the flags; impossible values are caught here, before any work is done.
static TrainOptions parse_options(int argc, char** argv) {
    TrainOptions o;
    memset(&o, 0, sizeof(o));
    o.train_pattern = "data/kjv/kjv_train.bin";
    o.val_pattern = "data/kjv/kjv_val.bin";
    o.norm = -1;
    o.B = 8, o.T = 128, o.total_batch = -1, o.max_steps = -1, o.val_every = 20, o.val_steps = 20;
    o.sample_every = 20, o.gen_tokens = 64;
    o.lr = 3e-4, o.final_frac = 1.0, o.grad_clip = 1.0;
    o.seed = 1337;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            print_usage(argv[0]);
            exit(0);
        }
        if (!strcmp(f, "--no-depth-scale")) { o.ablations |= ABLATE_NO_DEPTH_SCALE; continue; }
        if (!strcmp(f, "--no-ln-in")) { o.ablations |= ABLATE_NO_LN_IN; continue; }
        if (!strcmp(f, "--print-tensors")) { o.print_tensors = 1; continue; }
        if (f[0] != '-') fail("unexpected argument '%s' (see -h)", f);
        if (i + 1 >= argc) fail("flag %s needs a value (see -h)", f);
        const char* v = argv[++i];
        if (!strcmp(f, "-i")) o.train_pattern = v;
        else if (!strcmp(f, "-j")) o.val_pattern = v;
        else if (!strcmp(f, "-e")) o.model = v;
        else if (!strcmp(f, "-o")) o.out_dir = v;
        else if (!strcmp(f, "--tokenizer")) o.tokenizer = v;
        else if (!strcmp(f, "--attention")) o.attention = v;
        else if (!strcmp(f, "--norm")) o.norm = parse_norm(v);
        else if (!strcmp(f, "--layers")) o.layers = (int)parse_int(f, v);
        else if (!strcmp(f, "--channels")) o.channels = (int)parse_int(f, v);
        else if (!strcmp(f, "--heads")) o.heads = (int)parse_int(f, v);
        else if (!strcmp(f, "--max-seq-len")) o.max_seq_len = (int)parse_int(f, v);
        else if (!strcmp(f, "--vocab")) o.vocab = (int)parse_int(f, v);
        else if (!strcmp(f, "--seed")) o.seed = (uint64_t)parse_int(f, v);
        else if (!strcmp(f, "--grad-clip")) o.grad_clip = parse_double(f, v);
        else if (!strcmp(f, "-b")) o.B = (int)parse_int(f, v);
        else if (!strcmp(f, "-t")) o.T = (int)parse_int(f, v);
        else if (!strcmp(f, "-d")) o.total_batch = (int)parse_int(f, v);
        else if (!strcmp(f, "-l")) o.lr = parse_double(f, v);
        else if (!strcmp(f, "-u")) o.warmup = (int)parse_int(f, v);
        else if (!strcmp(f, "-q")) o.final_frac = parse_double(f, v);
        else if (!strcmp(f, "-c")) o.weight_decay = parse_double(f, v);
        else if (!strcmp(f, "-x")) o.max_steps = (int)parse_int(f, v);
        else if (!strcmp(f, "-v")) o.val_every = (int)parse_int(f, v);
        else if (!strcmp(f, "-m")) o.val_steps = (int)parse_int(f, v);
        else if (!strcmp(f, "-s")) o.sample_every = (int)parse_int(f, v);
        else if (!strcmp(f, "-g")) o.gen_tokens = (int)parse_int(f, v);
        else if (!strcmp(f, "-n")) o.checkpoint_every = (int)parse_int(f, v);
        else if (!strcmp(f, "-y")) o.resume = (int)parse_int(f, v);
        else if (!strcmp(f, "-a")) o.overfit = (int)parse_int(f, v);
        else if (!strcmp(f, "-f")) o.tf32 = (int)parse_int(f, v);
        else if (!strcmp(f, "-r")) o.recompute = (int)parse_int(f, v);
        else if (!strcmp(f, "--eval-answers")) o.eval_answers = (int)parse_int(f, v);
        else fail("unknown flag '%s' (see -h)", f);
    }
    if (o.B < 1 || o.T < 1) fail("-b and -t must be positive (got %d, %d)", o.B, o.T);
    if ((long long)o.B * o.T > (1LL << 30)) fail("-b * -t = %lld is too large", (long long)o.B * o.T);
    if (o.total_batch == -1) o.total_batch = o.B * o.T;
    if (o.total_batch < 1 || o.total_batch % (o.B * o.T) != 0)
        fail("-d %d must be a positive multiple of b*t = %d", o.total_batch, o.B * o.T);
    if (o.lr < 0) fail("-l must be >= 0");
    if (o.warmup < 0) fail("-u must be >= 0");
    if (o.final_frac < 0 || o.final_frac > 1) fail("-q must lie in [0, 1]");
    if (o.weight_decay < 0) fail("-c must be >= 0");
    if (o.grad_clip < 0) fail("--grad-clip must be >= 0 (0 turns clipping off)");
    if (o.max_steps < -1) fail("-x must be >= 0, or -1 for one epoch");
    if (o.val_every < 0 || o.val_steps < 1) fail("-v must be >= 0 and -m >= 1");
    if (o.sample_every < 0 || o.gen_tokens < 1) fail("-s must be >= 0 and -g >= 1");
    if (o.checkpoint_every < 0) fail("-n must be >= 0");
    if ((o.resume != 0 && o.resume != 1) || (o.overfit != 0 && o.overfit != 1) || (o.tf32 != 0 && o.tf32 != 1))
        fail("-y, -a and -f take 0 or 1");
    if (o.recompute != 0 && o.recompute != 1) fail("-r takes 0 or 1");
    if (o.resume && !o.out_dir) fail("-y 1 needs -o <dir> to find the checkpoint in");
    if (o.vocab < 0 || o.layers < 0 || o.channels < 0 || o.heads < 0 || o.max_seq_len < 0)
        fail("--vocab, --layers, --channels, --heads and --max-seq-len must be positive");
    if (o.eval_answers < 0) fail("--eval-answers must be >= 0");
    if (o.eval_answers > 0 && o.val_every == 0) fail("--eval-answers runs at validation: give -v > 0");
    return o;
}

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// mkdir -p
static void make_dirs(const char* dir) {
    std::string path = dir;
    for (size_t i = 1; i <= path.size(); i++) {
        if (i < path.size() && path[i] != '/') continue;
        std::string prefix = path.substr(0, i);
        if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
            fail("cannot create directory '%s' (%s)", prefix.c_str(), strerror(errno));
    }
}

// the latest step with a complete checkpoint (DONE_<step> is written after the model and state files), or -1
static int latest_checkpoint(const char* dir) {
    std::string pattern = std::string(dir) + "/DONE_*";
    glob_t g;
    int best = -1;
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            const char* name = strrchr(g.gl_pathv[i], '/') + 1;
            int step;
            if (sscanf(name, "DONE_%d", &step) == 1 && step > best) best = step;
        }
        globfree(&g);
    }
    return best;
}

// -e: a GPT-2 shape name (d12, d24, d36, d48) rather than a checkpoint file?
static int is_shape_name(const char* model) {
    return model && model[0] == 'd' && strchr(model, '.') == nullptr && strchr(model, '/') == nullptr &&
           !file_exists(model);
}

// The shape the flags ask for: -e dNN, or --layers/--channels/--heads; 0 where nothing was asked.
static void requested_shape(const TrainOptions& o, int* L, int* C, int* NH) {
    *L = o.layers, *C = o.channels, *NH = o.heads;
    if (!is_shape_name(o.model)) return;
    int depth = (int)parse_int("-e", o.model + 1);
    if (depth == 12) *L = 12, *C = 768, *NH = 12;
    else if (depth == 24) *L = 24, *C = 1024, *NH = 16;
    else if (depth == 36) *L = 36, *C = 1280, *NH = 20;
    else if (depth == 48) *L = 48, *C = 1600, *NH = 25;
    else fail("-e %s: known shapes are d12, d24, d36, d48 (or give a checkpoint file)", o.model);
    if (o.layers || o.channels || o.heads) fail("-e %s fixes the shape; drop --layers/--channels/--heads", o.model);
}

// The configuration of a new model from the flags (default shape 4 layers, 128 channels, 4 heads, maxT 1024);
// data_vocab comes from the shard headers.
static GPT2Config new_model_config(const TrainOptions& o, int data_vocab) {
    int L, C, NH;
    requested_shape(o, &L, &C, &NH);
    GPT2Config c = make_config(L ? L : 4, C ? C : 128, NH ? NH : 4, o.max_seq_len ? o.max_seq_len : 1024,
                               o.vocab ? o.vocab : data_vocab, o.norm == -1 ? NORM_PRE : o.norm, o.ablations);
    validate_config(c);
    return c;
}

// A model loaded from a file (-e <file>, or -y 1) must agree with every model flag that was given, so that the
// command that started a run also resumes it.
static void check_loaded_config(const GPT2Config& c, const TrainOptions& o) {
    if (o.norm != -1 && o.norm != c.norm)
        fail("the checkpoint is %s but --norm %s was given", NORM_NAMES[c.norm], NORM_NAMES[o.norm]);
    if (o.ablations && o.ablations != c.ablations)
        fail("ablation flags differ from the checkpoint's (header[9] = %d)", c.ablations);
    int L, C, NH;
    requested_shape(o, &L, &C, &NH);
    if ((L && L != c.num_layers) || (C && C != c.channels) || (NH && NH != c.num_heads) ||
        (o.max_seq_len && o.max_seq_len != c.max_seq_len) || (o.vocab && o.vocab != c.vocab_size))
        fail("the model flags ask for another shape than the checkpoint's (L=%d C=%d NH=%d maxT=%d V=%d)",
             c.num_layers, c.channels, c.num_heads, c.max_seq_len, c.vocab_size);
}

// the tokenizer beside the train shards: <dir>/*tokenizer.bin, or "" when there is none
static std::string default_tokenizer(const char* train_pattern) {
    std::string p = train_pattern;
    size_t slash = p.rfind('/');
    std::string dir = slash == std::string::npos ? "." : p.substr(0, slash);
    glob_t g;
    std::string found;
    if (glob((dir + "/*tokenizer.bin").c_str(), 0, nullptr, &g) == 0) {
        found = g.gl_pathv[0];
        globfree(&g);
    }
    return found;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// --print-tensors: the tensor table of the model that -e <checkpoint> or the shape flags describe (the vocabulary
// from --vocab or the train shards' header), as one JSON object: the configuration, then each tensor in checkpoint
// order with its offset (in float32 elements after the 256-int header), shape and whether weight decay applies.
// The Python tools and tests read the checkpoint through it instead of keeping their own copy of the order.
static void print_tensor_table(const TrainOptions& o) {
    GPT2Config c;
    if (o.model && !is_shape_name(o.model)) {
        fclose(checkpoint_open(o.model, &c));
    } else {
        int vocab = o.vocab;
        if (!vocab) {
            DataLoader d;
            dataloader_init(&d, o.train_pattern, 1, 1);
            vocab = d.vocab_size;
        }
        c = new_model_config(o, vocab);
    }
    printf("{\"layout\": \"%s\", \"ablations\": %d, \"max_seq_len\": %d, \"vocab_size\": %d, "
           "\"padded_vocab_size\": %d, \"num_layers\": %d, \"num_heads\": %d, \"channels\": %d, "
           "\"header_ints\": %d, \"num_parameters\": %zu,\n \"tensors\": [",
           NORM_NAMES[c.norm], c.ablations, c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers,
           c.num_heads, c.channels, HEADER_INTS, count_parameters(c));
    std::vector<TensorInfo> table = parameter_table(c);
    for (size_t i = 0; i < table.size(); i++) {
        const TensorInfo& t = table[i];
        printf("%s\n  {\"name\": \"%s\", \"offset\": %zu, \"shape\": [", i ? "," : "", t.name, t.offset);
        for (int d = 0; d < t.ndim; d++) printf("%s%zu", d ? ", " : "", t.shape[d]);
        printf("], \"decay\": %d}", t.decay);
    }
    printf("\n]}\n");
}

// ----------------------------------------------------------------------------------------------------------------
// exact-match accuracy of greedy answers, for tasks whose documents are "question=answer" lines (data/prepare.py
// addition). The problems are the first documents of the first validation shard (documents end at the eot token).
// greedy_next(tokens, n) must return the most likely token after tokens[0..n).

typedef struct {
    std::vector<std::vector<int>> questions, answers;  // question includes the separator; answer excludes eot
} AnswerSet;

static AnswerSet load_answer_set(const DataLoader* val, const Tokenizer* tok, int max_problems) {
    if (tok->tokens.empty()) fail("--eval-answers needs the tokenizer (to find the '=' token)");
    int sep = -1;
    for (size_t i = 0; i < tok->tokens.size(); i++)
        if (tok->tokens[i] == "=") sep = (int)i;
    if (sep < 0) fail("--eval-answers: the tokenizer has no '=' token; is this the addition task?");
    const char* path = val->files[0].c_str();
    std::vector<uint16_t> tokens((size_t)val->num_tokens[0]);
    FILE* f = fopen_or_fail(path, "rb");
    if (fseek(f, HEADER_INTS * 4, SEEK_SET) != 0) fail("cannot seek in '%s'", path);
    fread_or_fail(tokens.data(), sizeof(uint16_t), tokens.size(), f, path);
    fclose(f);
    AnswerSet set;
    std::vector<int> doc;
    for (uint16_t t : tokens) {
        if (t != tok->eot_token) {
            doc.push_back(t);
            continue;
        }
        size_t cut = 0;
        while (cut < doc.size() && doc[cut] != sep) cut++;
        if (cut + 1 < doc.size()) {  // a question, the separator and a non-empty answer
            set.questions.emplace_back(doc.begin(), doc.begin() + cut + 1);
            set.answers.emplace_back(doc.begin() + cut + 1, doc.end());
            if ((int)set.questions.size() == max_problems) break;
        }
        doc.clear();
    }
    if (set.questions.empty()) fail("--eval-answers: no 'question=answer' lines in '%s'", path);
    return set;
}

// greedy decoding of each answer up to the eot token (or max_len tokens in all); returns the exact-match fraction
template <typename NextToken>
static double answer_accuracy(const AnswerSet& set, int eot, int max_len, NextToken greedy_next) {
    int correct = 0;
    std::vector<int> seq;
    for (size_t k = 0; k < set.questions.size(); k++) {
        seq = set.questions[k];
        std::vector<int> answer;
        while ((int)seq.size() < max_len) {
            int next = greedy_next(seq.data(), (int)seq.size());
            if (next == eot) break;
            seq.push_back(next);
            answer.push_back(next);
        }
        correct += answer == set.answers[k];
    }
    return (double)correct / set.questions.size();
}

// ----------------------------------------------------------------------------------------------------------------
// the training loop both trainers share: data, model, validation, samples, checkpoints, steps, logs.
// A trainer calls train_main<GPT2>(argc, argv) and provides, for its GPT2 type, the model functions
//   gpt2_init_random, gpt2_build_from_checkpoint, gpt2_allocate_activations, gpt2_forward (inputs and targets:
//   mean_loss), gpt2_zero_grad, gpt2_grad_norm, gpt2_free
// and these hooks (found when train_main is instantiated):
//   train_backend_init(m, o)                     check the flags that concern the backend, start it
//   train_micro_step(m, in, tg, B, T, scale)     forward and backward of one micro-batch, gradients of
//                                                scale * mean loss accumulated; returns the loss (maybe not finite)
//   train_next_token_probs(m, tokens, n, &p)     p = the model's distribution of the token after tokens[0..n)
//   train_update(m, o, lr, grad_scale, t)        one AdamW step (t counts from 1)
//   train_params_finite(m)                       all parameters finite?
//   train_save(m, model_path, state_path, st)    checkpoint and optimizer state
//   train_load_state(m, path, loader)            the reverse of the state part; moves the loader
//   train_describe(m, o, &rows)                  extra rows of the header table
//   train_progress_suffix(m, tokens_per_s)       appended to each progress line
//   train_sync(m)                                wait for the device before a step's time is read

// the mean loss over up to max_batches batches of the validation shards, from their start
template <typename Model>
static double validation_loss(Model* model, DataLoader* val, int max_batches) {
    long long tokens = 0;
    for (long long n : val->num_tokens) tokens += n;
    long long fit = tokens / ((long long)val->B * val->T);
    int batches = fit < max_batches ? (int)fit : max_batches;
    dataloader_reset(val);
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        dataloader_next_batch(val);
        gpt2_forward(model, val->inputs.data(), val->targets.data(), val->B, val->T);
        sum += model->mean_loss;
    }
    return sum / batches;
}

// samples `steps` tokens after start_token from the model's distribution and prints them (no KV cache)
template <typename Model>
static void generate(Model* m, const Tokenizer* tok, int start_token, int steps, uint64_t* rng) {
    std::vector<int> tokens(steps + 1, start_token);
    std::vector<double> probs;
    for (int t = 1; t <= steps; t++) {
        train_next_token_probs(m, tokens.data(), t, &probs);
        tokens[t] = sample_from(probs.data(), (int)probs.size(), random_uniform(rng));
        tokenizer_print(tok, tokens[t]);
    }
    printf("\n");
    fflush(stdout);
}

template <typename Model>
static int train_main(int argc, char** argv) {
    TrainOptions o = parse_options(argc, argv);
    if (o.print_tensors) {  // before the backend starts: no GPU needed
        print_tensor_table(o);
        return 0;
    }
    Model model;
    train_backend_init(&model, o);
    int B = o.B, T = o.T;
    DataLoader train, val;
    dataloader_init(&train, o.train_pattern, B, T);
    if (o.val_every > 0) dataloader_init(&val, o.val_pattern, B, T);

    // the model: resumed from -o, loaded from -e <file>, or new
    char path[4096], path2[4096];
    int resume_step = o.resume ? latest_checkpoint(o.out_dir) : -1;
    if (o.resume && resume_step < 0) fail("-y 1: no complete checkpoint (DONE_<step>) in '%s'", o.out_dir);
    if (resume_step >= 0 || (o.model && !is_shape_name(o.model))) {
        if (resume_step >= 0) snprintf(path, sizeof(path), "%s/model_%08d.bin", o.out_dir, resume_step);
        else snprintf(path, sizeof(path), "%s", o.model);
        gpt2_build_from_checkpoint(&model, path);
        check_loaded_config(model.config, o);
    } else {
        gpt2_init_random(&model, new_model_config(o, train.vocab_size), o.seed);
    }
    const GPT2Config& cfg = model.config;
    if (T > cfg.max_seq_len) fail("-t %d exceeds the model's maximum sequence length %d", T, cfg.max_seq_len);
    if (train.vocab_size > cfg.vocab_size || (o.val_every > 0 && val.vocab_size > cfg.vocab_size))
        fail("the data's vocabulary (%d) is larger than the model's (%d)", train.vocab_size, cfg.vocab_size);
    gpt2_allocate_activations(&model, B, T);  // now, so that sampling's smaller shapes fit in them

    Tokenizer tokenizer;
    tokenizer.eot_token = 0;
    if (o.sample_every > 0 || o.tokenizer || o.eval_answers > 0) {
        std::string tok_path = o.tokenizer ? o.tokenizer : default_tokenizer(o.train_pattern);
        if (tok_path.empty()) fprintf(stderr, "warning: no tokenizer next to the train shards; samples print token ids\n");
        else tokenizer_load(&tokenizer, tok_path.c_str(), o.tokenizer != nullptr || o.eval_answers > 0);
    }
    if (!tokenizer.tokens.empty() && (int)tokenizer.tokens.size() < cfg.vocab_size)
        fail("the tokenizer knows %zu tokens but the model has %d", tokenizer.tokens.size(), cfg.vocab_size);
    AnswerSet answers;
    if (o.eval_answers > 0) answers = load_answer_set(&val, &tokenizer, o.eval_answers);
    std::vector<double> probs;
    auto greedy_next = [&](const int* tokens, int n) {  // the most likely next token (ties: the lowest id)
        train_next_token_probs(&model, tokens, n, &probs);
        int best = 0;
        for (int i = 1; i < (int)probs.size(); i++)
            if (probs[i] > probs[best]) best = i;
        return best;
    };

    int accum = o.total_batch / (B * T);
    long long train_tokens = 0;
    for (long long n : train.num_tokens) train_tokens += n;
    int max_steps = o.max_steps;
    if (max_steps == -1) max_steps = train_tokens / o.total_batch > 0 ? (int)(train_tokens / o.total_batch) : 1;
    int start_step = 0;
    uint64_t rng = o.seed ^ 0xD1B54A32D192ED03ull;  // for sampling
    if (resume_step >= 0) {
        snprintf(path, sizeof(path), "%s/state_%08d.bin", o.out_dir, resume_step);
        TrainState st = train_load_state(&model, path, &train);
        if (st.step != resume_step) fail("'%s' records step %d, not %d", path, st.step, resume_step);
        start_step = st.step;
        rng = st.rng;
    }
    FILE* logfile = nullptr;
    if (o.out_dir) {
        make_dirs(o.out_dir);
        snprintf(path, sizeof(path), "%s/main.log", o.out_dir);
        logfile = fopen_or_fail(path, resume_step >= 0 ? "a" : "w");
    }

    std::vector<std::pair<std::string, std::string>> rows;
    char line[256];
    rows.push_back({"layout", NORM_NAMES[cfg.norm]});
    if (cfg.ablations)
        rows.push_back({"ablations", cfg.ablations == 3   ? "no depth scale (c_l = 1), no LN_in"
                                     : cfg.ablations == 1 ? "no depth scale (c_l = 1)"
                                                          : "no LN_in"});
    snprintf(line, sizeof(line), "L=%d C=%d NH=%d maxT=%d V=%d Vp=%d", cfg.num_layers, cfg.channels, cfg.num_heads,
             cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size);
    rows.push_back({"model", line});
    rows.push_back({"parameters", std::to_string(model.num_parameters)});
    snprintf(line, sizeof(line), "B=%d T=%d, %d micro-step(s), %d tokens per step", B, T, accum, o.total_batch);
    rows.push_back({"batch", line});
    rows.push_back({"train data", o.train_pattern});
    rows.push_back({"train tokens", std::to_string(train_tokens) + " tokens"});
    rows.push_back({"steps", std::to_string(start_step) + " to " + std::to_string(max_steps)});
    train_describe(&model, o, &rows);
    printf("+-----------------------+----------------------------------------------------+\n");
    for (auto& r : rows) printf("| %-21s | %-50s |\n", r.first.c_str(), r.second.c_str());
    printf("+-----------------------+----------------------------------------------------+\n");
    fflush(stdout);

    int gen = o.gen_tokens < T ? o.gen_tokens : T;
    for (int step = start_step; step <= max_steps; step++) {
        int last = step == max_steps;
        if (o.val_every > 0 && (step % o.val_every == 0 || last)) {
            double val_loss = validation_loss(&model, &val, o.val_steps);
            if (!std::isfinite(val_loss))
                fail("the validation loss is %f at step %d: training diverged; no checkpoint was written", val_loss,
                     step);
            printf("val loss %.6f\n", val_loss);
            if (logfile) fprintf(logfile, "s:%d tel:%.6f\n", step, val_loss);
            if (o.eval_answers > 0) {
                double acc = answer_accuracy(answers, tokenizer.eot_token, T, greedy_next);
                printf("answer accuracy %.4f (%zu problems)\n", acc, answers.questions.size());
                if (logfile) fprintf(logfile, "s:%d acc:%.6f\n", step, acc);
            }
        }
        if (o.sample_every > 0 && ((step > start_step && step % o.sample_every == 0) || last)) {
            printf("generating:\n---\n");
            generate(&model, &tokenizer, tokenizer.eot_token, gen, &rng);
            printf("---\n");
        }
        // A checkpoint holds a state whose loss was just seen to be finite: at the last step after the validation
        // above, otherwise after this step's forward and backward passes but before its update. So a run that
        // diverges never writes over, or past, its last good checkpoint.
        auto save_checkpoint = [&](int shard, long long position) {
            if (!train_params_finite(&model))
                fail("a parameter is not finite at step %d: training diverged; no checkpoint was written", step);
            snprintf(path, sizeof(path), "%s/model_%08d.bin", o.out_dir, step);
            snprintf(path2, sizeof(path2), "%s/state_%08d.bin", o.out_dir, step);
            TrainState st = {step, B, T, shard, position, rng, model.num_parameters};
            train_save(&model, path, path2, st);
            snprintf(path2, sizeof(path2), "%s/DONE_%08d", o.out_dir, step);
            fclose(fopen_or_fail(path2, "w"));
            printf("checkpoint saved: %s\n", path);
        };
        if (last) {
            if (o.out_dir && step > start_step) save_checkpoint(train.shard, train.position);
            break;
        }

        double t0 = now_seconds();
        int shard0 = train.shard;  // where this step's batches start, for its checkpoint
        long long position0 = train.position;
        gpt2_zero_grad(&model);
        double loss = 0;
        for (int micro = 0; micro < accum; micro++) {
            if (!o.overfit || (step == start_step && micro == 0)) dataloader_next_batch(&train);
            double micro_loss =
                train_micro_step(&model, train.inputs.data(), train.targets.data(), B, T, 1.0 / accum);
            if (!std::isfinite(micro_loss))
                fail("the loss is %f at step %d: training diverged (try a lower -l); no checkpoint was written",
                     micro_loss, step);
            loss += micro_loss / accum;
        }
        if (o.out_dir && o.checkpoint_every > 0 && step > start_step && step % o.checkpoint_every == 0)
            save_checkpoint(shard0, position0);
        double norm = gpt2_grad_norm(&model);
        if (!std::isfinite(norm))
            fail("the gradient norm is %f at step %d: training diverged (try a lower -l); no checkpoint was written",
                 norm, step);
        double grad_scale = o.grad_clip > 0 && norm > o.grad_clip ? o.grad_clip / norm : 1.0;
        double lr = learning_rate_at(step, max_steps, o.lr, o.warmup, o.final_frac);
        train_update(&model, o, lr, grad_scale, step + 1);
        train_sync(&model);
        double ms = (now_seconds() - t0) * 1000;
        double tokens_per_s = o.total_batch / (ms / 1000);
        printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s%s\n", step + 1, max_steps, loss,
               norm, lr, ms, tokens_per_s, train_progress_suffix(&model, tokens_per_s).c_str());
        fflush(stdout);
        if (logfile) {
            fprintf(logfile, "s:%d trl:%.6f norm:%.4f lr:%.3e ms:%.1f\n", step, loss, norm, lr, ms);
            fflush(logfile);
        }
    }
    if (logfile) fclose(logfile);
    gpt2_free(&model);
    return 0;
}

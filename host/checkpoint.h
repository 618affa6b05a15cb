/*
host/checkpoint.h: the files a run writes and resumes from (the formats are documented in docs/file_formats.md):

  - llm.c's model file: 256 int32 header (magic 20240326, version 3 = float32, maxT, V, L, NH, C, Vp, [8] layout,
    [9] SiameseNorm's ablation bits, [10] the layout's own setting), then the float32 parameters in
    parameter_table order
  - our optimizer state beside it: AdamW's m and v and where the data loader stands, so that training resumes
    exactly

Both are written under a temporary name and renamed, so a crash never leaves half a file.
*/
#pragma once
#include <cmath>
#include <string>
#include <vector>
#include "dataloader.h"
#include "model_config.h"

static const int MODEL_MAGIC = 20240326, MODEL_VERSION_FP32 = 3;  // llm.c's model file
static const int STATE_MAGIC = 20240527, STATE_VERSION = 1;       // our optimizer/data-loader state

// ----------------------------------------------------------------------------------------------------------------
// files: float32 arrays written from and read into any element type

template <typename T>
static void write_as_float(const T* src, size_t n, AtomicFile* f) {
    std::vector<float> buf(1 << 16);
    for (size_t i = 0; i < n; i += buf.size()) {
        size_t k = n - i < buf.size() ? n - i : buf.size();
        for (size_t j = 0; j < k; j++) buf[j] = (float)src[i + j];
        atomic_write(f, buf.data(), sizeof(float), k);
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

// ----------------------------------------------------------------------------------------------------------------
// checkpoints: llm.c's model file. 256 int32 header (magic 20240326, version 3 = float32, maxT, V, L, NH, C, Vp,
// header[8] = layout (its row in LAYOUTS, host/layouts.h), header[9] = siamese ablation bits, header[10] = the
// layout's own setting (0 = none; LayoutSetting in host/layouts.h), the rest 0; then the float32 parameters
// in parameter_table order.

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
    header[10] = c.layout_setting;
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
    c.layout_setting = header[10];
    if (c.max_seq_len < 1 || c.max_seq_len > MAX_SEQ_LEN || c.num_layers < 1 || c.num_layers > MAX_LAYERS ||
        c.channels < 1 || c.channels > MAX_CHANNELS || c.num_heads < 1 || c.padded_vocab_size < 1 ||
        c.padded_vocab_size > MAX_PADDED_VOCAB)
        fail("'%s' has an implausible header (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d)", path, c.max_seq_len,
             c.vocab_size, c.num_layers, c.num_heads, c.channels, c.padded_vocab_size);
    for (int i = 11; i < HEADER_INTS; i++)
        if (header[i] != 0) fail("'%s' has unknown header field %d = %d", path, i, header[i]);
    validate_config(c);
    long long expected = (long long)HEADER_INTS * 4 + (long long)count_parameters(c) * 4;
    long long actual = file_size_or_fail(path);
    if (actual != expected)
        fail("'%s' has %lld bytes, expected %lld for this %s model (%s)", path, actual, expected,
             layout_of(c).name, actual < expected ? "truncated" : "trailing data");
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

// writes the whole file or nothing (AtomicFile); returns its size and checksum
template <typename T>
static FileSum checkpoint_write(const char* path, const GPT2Config& c, const T* params) {
    int header[HEADER_INTS];
    checkpoint_header(c, header);
    AtomicFile f;
    atomic_open(&f, path);
    atomic_write(&f, header, sizeof(int), HEADER_INTS);
    write_as_float(params, count_parameters(c), &f);
    return atomic_finish(&f);
}

// ----------------------------------------------------------------------------------------------------------------
// optimizer state: AdamW moments plus where the data loader stands, so that training resumes exactly.
// 256 int32 header: magic 20240527, version 1, step, B, T, shard, position (int64 in 2 ints), sampling rng (2 ints),
// number of parameters (2 ints), the run's -x (its learning-rate schedule; 0 in files of older versions), the rest
// 0; then m and v as float32. Nothing in it depends on more than the run's flags and data, so that the same run
// writes the same bytes however often it was interrupted.

// what a checkpoint's two files were written as (their sizes and checksums go into its marker, host/rundir.h)
typedef struct {
    FileSum model, state;
} SavedFiles;

typedef struct {
    int step, B, T, shard;
    long long position;
    uint64_t rng;
    uint64_t num_parameters;
    int max_steps;  // the -x of the run that wrote it: its learning-rate schedule
} TrainState;

static void pack64(int* h, uint64_t v) { memcpy(h, &v, 8); }
static uint64_t unpack64(const int* h) {
    uint64_t v;
    memcpy(&v, h, 8);
    return v;
}

// writes the whole file or nothing (AtomicFile); returns its size and checksum
template <typename T>
static FileSum state_write(const char* path, const TrainState& s, const T* m, const T* v) {
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
    header[12] = s.max_steps;
    AtomicFile f;
    atomic_open(&f, path);
    atomic_write(&f, header, sizeof(int), HEADER_INTS);
    write_as_float(m, s.num_parameters, &f);
    write_as_float(v, s.num_parameters, &f);
    return atomic_finish(&f);
}

// Reads a state file for a model of num_parameters trained on `d`, checks that it fits, and moves `d` to where
// the run stopped. m and v receive the moments of parameters [begin, end) (all of them by default; a rank's shard
// under ZeRO-1, host/distributed.h) and must hold end - begin elements each.
template <typename T>
static TrainState state_read(const char* path, size_t num_parameters, DataLoader* d, T* m, T* v, size_t begin = 0,
                             size_t end = SIZE_MAX) {
    if (end == SIZE_MAX) end = num_parameters;
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
    s.max_steps = header[12];
    for (int i = 13; i < HEADER_INTS; i++)
        if (header[i] != 0) fail("'%s' has unknown header field %d = %d", path, i, header[i]);
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
    for (int k = 0; k < 2; k++) {  // m, then v, each num_parameters floats after the header
        if (fseek(f, HEADER_INTS * 4 + 4 * (long long)(k * num_parameters + begin), SEEK_SET) != 0)
            fail("cannot seek in '%s'", path);
        read_float_as(k == 0 ? m : v, end - begin, f, path);
    }
    fclose(f);
    d->shard = s.shard;
    d->position = s.position;
    return s;
}

/*
host/dataloader.h: llm.c's token shards (256 int32 header: magic 20240520, version 1, number of tokens, vocabulary;
then the tokens as uint16), read in order, batch after batch, every token id checked against the vocabulary.
*/
#pragma once
#include <string>
#include <vector>
#include <glob.h>
#include "utils.h"

static const int SHARD_MAGIC = 20240520, SHARD_VERSION = 1;  // llm.c's token shard
static const int GPT2_VOCAB = 50257;                          // GPT-2's vocabulary: what a shard's 0 means

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
        for (int i = 4; i < HEADER_INTS; i++)
            if (header[i] != 0) fail("'%s' has unknown header field %d = %d", p, i, header[i]);
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

// where the next batch starts: here, or at the start of the next shard (wrapping around) when this one has fewer
// than B*T+1 tokens left
static void dataloader_seek_batch(DataLoader* d) {
    long long need = (long long)d->B * d->T + 1;
    if (d->position + need > d->num_tokens[d->shard]) {
        d->shard = (d->shard + 1) % (int)d->files.size();
        d->position = 0;
    }
}

// Loads the next (B, T) inputs and the targets one token later. Token ids are checked against the vocabulary.
static void dataloader_next_batch(DataLoader* d) {
    long long need = (long long)d->B * d->T + 1;
    dataloader_seek_batch(d);
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

// moves past the next batch without reading it, to where dataloader_next_batch would have left the loader
static void dataloader_skip_batch(DataLoader* d) {
    dataloader_seek_batch(d);
    d->position += (long long)d->B * d->T;
}

// Several processes share the batches (host/distributed.h): of the next `ranks` batches, rank `rank` loads the one
// of its number and skips the others', so that every rank ends where one process reading all of them would.
static void dataloader_next_batch_of(DataLoader* d, int rank, int ranks) {
    for (int r = 0; r < ranks; r++) {
        if (r == rank) dataloader_next_batch(d);
        else dataloader_skip_batch(d);
    }
}

/*
host/tokenizer.h: llm.c's tokenizer file (256 int32 header: magic 20240328, version 2, vocabulary size, eot; then
for each token a length and its bytes), for printing samples; and drawing a token from a distribution.
*/
#pragma once
#include <string>
#include <vector>
#include "utils.h"

static const int TOKENIZER_MAGIC = 20240328;  // llm.c's tokenizer file

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

/*
host/tokenizer.h: llm.c's tokenizer file (256 int32 header: magic 20240328, version 2, vocabulary size, eot; then
for each token a length and its bytes): turning a prompt into tokens, printing samples safely, and drawing a token
from the model's distribution (temperature, top-k).
*/
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <unordered_map>
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
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) fail("'%s' is not a regular file", path);
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

// The prompt as tokens: at each position the longest token of the vocabulary that matches there. For a byte-level
// vocabulary (the KJV data) and the addition task's symbols this is their exact tokenization; for GPT-2's BPE it
// is a valid one that may differ from tiktoken's merges (which the tokenizer file does not hold).
static std::vector<int> tokenizer_encode(const Tokenizer* t, const std::string& text) {
    std::unordered_map<std::string, int> ids;
    size_t longest = 0;
    for (size_t i = 0; i < t->tokens.size(); i++) {
        ids.emplace(t->tokens[i], (int)i);  // the first of equal tokens wins
        longest = std::max(longest, t->tokens[i].size());
    }
    std::vector<int> out;
    for (size_t at = 0; at < text.size();) {
        size_t len = std::min(longest, text.size() - at);
        for (; len > 0; len--) {
            auto it = ids.find(text.substr(at, len));
            if (it != ids.end()) {
                out.push_back(it->second);
                break;
            }
        }
        if (len == 0) fail("the prompt's byte 0x%02x at %zu is no token of the vocabulary", (unsigned char)text[at], at);
        at += len;
    }
    return out;
}

// Prints the bytes of sampled tokens so that they cannot upset a terminal: valid UTF-8 goes out as it is (a
// character may be split over tokens, so an incomplete one waits for the next token), newline and tab too; control
// bytes, DEL and bytes that are no part of valid UTF-8 are shown escaped as \xNN.
struct SamplePrinter {
    std::string pending;  // the start of a character whose remaining bytes have not been sampled yet

    static int sequence_length(unsigned char c) {  // of a UTF-8 sequence starting with c; 0: c cannot start one
        return c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    }
    static bool valid_sequence(const unsigned char* p, int n) {  // the continuation bytes, overlong and surrogates
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80) return false;
        if (n == 3 && ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0))) return false;
        if (n == 4 && ((p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))) return false;
        return true;
    }
    static void escape(unsigned char c) { printf("\\x%02x", c); }

    void put(const std::string& bytes) {
        pending += bytes;
        size_t i = 0;
        const unsigned char* p = (const unsigned char*)pending.data();
        while (i < pending.size()) {
            unsigned char c = p[i];
            int n = sequence_length(c);
            if (n == 1) {
                if ((c < 32 && c != '\n' && c != '\t') || c == 127) escape(c);
                else putchar(c);
                i++;
            } else if (n == 0) {
                escape(c), i++;
            } else if (i + n > pending.size()) {
                bool so_far = true;  // wait for the rest only if what has come so far can still be valid
                for (size_t j = i + 1; j < pending.size(); j++) so_far &= (p[j] & 0xC0) == 0x80;
                if (so_far) break;
                escape(c), i++;
            } else if (valid_sequence(p + i, n)) {
                fwrite(p + i, 1, n, stdout), i += n;
            } else {
                escape(c), i++;
            }
        }
        pending.erase(0, i);
    }
    void token(const Tokenizer* t, int id) {
        if (t->tokens.empty() || id < 0 || id >= (int)t->tokens.size()) {
            finish();
            printf("<%d>", id);
        } else {
            put(t->tokens[id]);
        }
    }
    void finish() {  // what is left of an incomplete character, escaped
        for (unsigned char c : pending) escape(c);
        pending.clear();
    }
};

// A token drawn from probs[0..V) with one uniform number `coin`. With temperature 1 and no top-k, the plain inverse
// CDF over the model's distribution. Otherwise the softmax of logits/temperature, and with top_k > 0 only over the
// k most likely tokens (nanoGPT's sample.py). It is computed in log space: log p_i differs from logit_i by one
// constant (log-sum-exp), so the weights w_i = exp((log p_i - log p_max) / temperature), renormalized, are that
// softmax; the most likely token weighs 1 and no weight overflows, nor do all of them round to zero, however small
// the temperature (raising p_i to the power 1/temperature did, for temperature 0.001). As the temperature goes to 0
// the draw becomes the most likely token; temperature 0 takes it (the lowest id among equals).
static int sample_from(const std::vector<double>& probs, double coin, double temperature = 1.0, int top_k = 0) {
    int V = (int)probs.size();
    if (temperature == 1.0 && top_k <= 0) {
        double cdf = 0;
        for (int i = 0; i < V; i++) {
            cdf += probs[i];
            if (coin < cdf) return i;
        }
        return V - 1;  // rounding
    }
    int best = (int)(std::max_element(probs.begin(), probs.end()) - probs.begin());
    if (temperature == 0) return best;
    double cut = -1;  // the k-th largest probability: tokens below it get no weight
    if (top_k > 0 && top_k < V) {
        std::vector<double> sorted = probs;
        std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<double>());
        cut = sorted[top_k - 1];
    }
    std::vector<double> w(V);
    double log_max = std::log(probs[best]), sum = 0;
    for (int i = 0; i < V; i++)
        sum += w[i] = probs[i] >= cut && probs[i] > 0 ? std::exp((std::log(probs[i]) - log_max) / temperature) : 0.0;
    double cdf = 0;  // sum >= 1: the most likely token's weight
    for (int i = 0; i < V; i++) {
        cdf += w[i] / sum;
        if (coin < cdf) return i;
    }
    for (int i = V - 1; i > 0; i--)  // rounding: the last token that has any weight
        if (w[i] > 0) return i;
    return best;
}

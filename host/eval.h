/*
host/eval.h: what a run measures besides its training loss, through the trainer's model functions and hooks (see
host/train_loop.h): the validation loss, samples, and the exact-match accuracy of greedy answers.
*/
#pragma once
#include <algorithm>
#include <vector>
#include "dataloader.h"
#include "distributed.h"
#include "rand.h"
#include "tokenizer.h"

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
// validation and samples

// the mean loss over up to max_batches batches of the validation shards, from their start. Under mpirun the ranks
// share the batches (rank r takes r, r + N, ...) and the losses are added in batch order, as one process adds them.
template <typename Model>
static double validation_loss(Model* model, DataLoader* val, int max_batches) {
    long long tokens = 0;
    for (long long n : val->num_tokens) tokens += n;
    long long fit = tokens / ((long long)val->B * val->T);
    int batches = fit < max_batches ? (int)fit : max_batches;
    dataloader_reset(val);
    std::vector<double> mine;  // this rank's batches' losses
    for (int i = 0; i < batches; i++) {
        if (i % dist.size != dist.rank) {
            dataloader_skip_batch(val);
            continue;
        }
        dataloader_next_batch(val);
        gpt2_forward(model, val->inputs.data(), val->targets.data(), val->B, val->T);
        mine.push_back(model->mean_loss);
    }
    double sum = 0;
    for (double loss : dist_gather_batch_order(mine, batches)) sum += loss;
    return sum / batches;
}

// Samples n tokens that continue `tokens` (the prompt, or the eot token) from the model's distribution and prints
// them as they come. The model sees the last `window` tokens (-t): a sliding window once the text is longer. No KV
// cache: each token is a forward pass over the window.
template <typename Model>
static void generate(Model* m, const Tokenizer* tok, std::vector<int> tokens, int n, int window, uint64_t* rng,
                     double temperature, int top_k) {
    std::vector<double> probs;
    SamplePrinter out;
    for (int i = 0; i < n; i++) {
        int context = std::min((int)tokens.size(), window);
        train_next_token_probs(m, tokens.data() + tokens.size() - context, context, &probs);
        tokens.push_back(sample_from(probs, random_uniform(rng), temperature, top_k));
        out.token(tok, tokens.back());
        fflush(stdout);
    }
    out.finish();
    printf("\n");
    fflush(stdout);
}

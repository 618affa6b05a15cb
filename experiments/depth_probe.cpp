/*
experiments/depth_probe.cpp: how a trained model uses its depth, measured on a validation shard without any training.

    experiments/depth_probe -e CHECKPOINT -j VAL_SHARD [-b B] [-t T] [-m BATCHES] [--drop-frac F] [--greedy 0|1]

Prints one CSV table on stdout (columns probe,index,stream,removed,value); progress goes to stderr.

  base,    -, -, -, loss               the model's mean val loss over the first m batches (B, T) of the shard
  drop1,   l, -, l, loss               block l removed: both its sub-layers are skipped and the streams pass through
                                       unchanged (x[2l+2] = x[2l], y likewise), no fine-tuning
  greedy,  k, -, "l1;l2;..", loss      k blocks removed, each step removing the block whose removal hurts least
  rank,    k, -, "l1;l2;..", loss      the k blocks whose single removal hurt least (drop1 ranking), removed together
  lens,    s, x|y|joint, -, loss       logit lens at sub-layer boundary s = 0..2L (s = 2l + k, k = 0 before the
                                       attention of block l, 1 before its MLP; s = 2L leaves the last block):
                                       the val loss of decoding that boundary's state through the layout's
                                       head (host/layouts.h): LN_f(x_s) (pre);
                                       x_s (post: already normalized, as the identity head uses it);
                                       siamese: x -> LN_f(LN_xf(x_s)), y -> LN_f(LN_yf(y_s)),
                                                joint -> LN_f(LN_xf(x_s) + LN_yf(y_s)) (the real head at s = 2L)
                                       hc: x -> LN_f(x_s), y -> LN_f(y_s), joint -> LN_f(x_s + y_s) (its head)
  balance, s, -, -, share              siamese: the X stream's share of the LN_in input, measured on activations:
                                       mean over tokens of |LN_x(x_s)| / (|LN_x(x_s)| + |LN_y(y_s)|) (L2 norms per
                                       token); s = 2L: the head's |LN_xf(x)| / (|LN_xf(x)| + |LN_yf(y)|)

k runs to floor(drop_frac * L) (default 0.3). The greedy search costs about k*L forward passes over the batches
(a few CPU-minutes at L = 32); --greedy 0 leaves it out (the ranked removal costs k). The forward pass with skipped blocks below is the reference's own
gpt2_forward loop (reference_cpu.cpp), with one `if` added; with nothing skipped it must reproduce gpt2_forward's
loss bit for bit, which the tool checks before it reports anything.
*/
#define REFERENCE_CPU_NO_MAIN
#include "../reference_cpu.cpp"

#include <algorithm>
#include <string>

// gpt2_forward's body, except that block l is skipped when skip[l]: x[2l+2] = x[2l] (and y). Needs the
// activations allocated by a first gpt2_forward of the same (B, T) (the caller does that). Returns the mean loss.
static double forward_skipping(GPT2* m, const int* inputs, const int* targets, int B, int T,
                               const std::vector<char>& skip) {
    const GPT2Config& c = m->config;
    int C = c.channels, N = B * T, L = c.num_layers;
    size_t NC = (size_t)N * C;
    m->B = B;
    m->T = T;
    ActivationTensors* a = &m->acts;
    int two_streams = layout_of(c).streams == 2;
    encoder_forward(a->x, inputs, m->params.wte, m->params.wpe, B, T, C);
    if (two_streams) memcpy(a->y, a->x, NC * sizeof(real));
    for (int s = 0; s < 2 * L; s++) {
        SubLayer t = sublayer_tensors(m, s);
        if (skip[s / 2]) {  // the streams pass through the sub-layer unchanged
            memcpy(t.x_out, t.x, NC * sizeof(real));
            if (two_streams) memcpy(t.y_out, t.y, NC * sizeof(real));
            continue;
        }
        run_sublayer(t, FORWARD);
    }
    run_head(head_tensors(m), FORWARD);
    softmax_forward(a->probs, a->logits, N, c.vocab_size, c.padded_vocab_size);
    crossentropy_forward(a->losses, a->probs, targets, N, c.padded_vocab_size);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    return (real)(sum / N);  // rounded as gpt2_forward rounds mean_loss
}

typedef struct {
    std::vector<std::vector<int>> inputs, targets;
    int B, T;
} Batches;

static double mean_loss_skipping(GPT2* m, const Batches& d, const std::vector<char>& skip) {
    double sum = 0;
    for (size_t i = 0; i < d.inputs.size(); i++)
        sum += forward_skipping(m, d.inputs[i].data(), d.targets[i].data(), d.B, d.T, skip);
    return sum / d.inputs.size();
}

// the mean cross-entropy of decoding hidden states h (N, C) with the tied wte; logits/probs are scratch (N, Vp)
static double decode_loss(const GPT2Config& c, const real* h, const real* wte, const int* targets, int N,
                          real* logits, real* probs, real* losses) {
    matmul_forward(logits, h, wte, nullptr, N, c.channels, c.padded_vocab_size);
    softmax_forward(probs, logits, N, c.vocab_size, c.padded_vocab_size);
    crossentropy_forward(losses, probs, targets, N, c.padded_vocab_size);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += losses[i];
    return sum / N;
}

static std::string block_list(const std::vector<int>& blocks) {
    std::string s;
    for (size_t i = 0; i < blocks.size(); i++) s += (i ? ";" : "") + std::to_string(blocks[i]);
    return s;
}

static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s -e CHECKPOINT -j VAL_SHARD [-b B (8)] [-t T (64)] [-m BATCHES (8)] [--drop-frac F (0.3)]\n"
            "       [--greedy 0|1 (1)]\n"
            "  prints CSV probe,index,stream,removed,value: base, drop1, greedy, rank, lens, balance (see the "
            "source)\n",
            prog);
}

int main(int argc, char** argv) {
    const char *ckpt = nullptr, *val_path = nullptr;
    int B = 8, T = 64, M = 8;
    double drop_frac = 0.3;
    int greedy = 1;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            usage(argv[0]);
            return 0;
        }
        if (i + 1 >= argc) fail("flag %s needs a value (see %s -h)", f, argv[0]);
        const char* v = argv[++i];
        if (!strcmp(f, "-e")) ckpt = v;
        else if (!strcmp(f, "-j")) val_path = v;
        else if (!strcmp(f, "-b")) B = (int)parse_int(f, v);
        else if (!strcmp(f, "-t")) T = (int)parse_int(f, v);
        else if (!strcmp(f, "-m")) M = (int)parse_int(f, v);
        else if (!strcmp(f, "--drop-frac")) drop_frac = parse_double(f, v);
        else if (!strcmp(f, "--greedy")) greedy = (int)parse_int(f, v);
        else fail("unknown flag %s (see %s -h)", f, argv[0]);
    }
    if (!ckpt || !val_path) fail("-e CHECKPOINT and -j VAL_SHARD are required (see %s -h)", argv[0]);
    if (B < 1 || T < 1 || M < 1) fail("-b, -t and -m must be positive");
    if (drop_frac < 0 || drop_frac >= 1) fail("--drop-frac must be in [0, 1)");
    if (greedy != 0 && greedy != 1) fail("--greedy must be 0 or 1");

    GPT2 model;
    gpt2_build_from_checkpoint(&model, ckpt);
    const GPT2Config& c = model.config;
    if (T > c.max_seq_len) fail("-t %d exceeds the model's maximum sequence length %d", T, c.max_seq_len);
    DataLoader val;
    dataloader_init(&val, val_path, B, T);
    if (val.vocab_size > c.vocab_size) fail("the shard's vocabulary (%d) exceeds the model's (%d)", val.vocab_size, c.vocab_size);
    long long tokens = 0;
    for (long long n : val.num_tokens) tokens += n;
    long long fit = tokens / ((long long)B * T);
    if (fit < M) M = (int)fit;
    if (M < 1) fail("the validation shard is shorter than one batch");
    Batches d;
    d.B = B;
    d.T = T;
    for (int i = 0; i < M; i++) {  // the first M batches, as the trainer's validation_loss reads them
        dataloader_next_batch(&val);
        d.inputs.push_back(val.inputs);
        d.targets.push_back(val.targets);
    }
    int L = c.num_layers, C = c.channels, N = B * T, Vp = c.padded_vocab_size;
    size_t NC = (size_t)N * C;
    HeadKind head = layout_of(c).head;
    int siamese = head == HEAD_SIAMESE;  // the balance of the two streams
    int two = siamese || head == HEAD_SUM;  // the lens of each stream and of both
    fprintf(stderr, "depth_probe: %s, %s L=%d C=%d, %d batches of B=%d T=%d\n", ckpt, LAYOUTS[c.norm].name, L, C, M, B, T);

    // ---- base loss and the per-boundary probes, from the reference's own forward pass
    std::vector<double> lens_sum((2 * L + 1) * 3, 0.0), share_sum(2 * L + 1, 0.0);
    std::vector<real> h(NC), h2(NC), scratch(NC), out(NC), mean(N), rstd(N), logits((size_t)N * Vp), probs((size_t)N * Vp),
        losses(N);
    double base = 0;
    ParameterTensors* p = &model.params;
    for (int i = 0; i < M; i++) {
        gpt2_forward(&model, d.inputs[i].data(), d.targets[i].data(), B, T);
        base += model.mean_loss;
        for (int s = 0; s <= 2 * L; s++) {
            const real* x = model.acts.x + s * NC;
            const int* tg = d.targets[i].data();
            switch (head) {  // the head applied to boundary s's state
                case HEAD_IDENTITY:
                    lens_sum[s * 3 + 0] += decode_loss(c, x, p->wte, tg, N, logits.data(), probs.data(), losses.data());
                    continue;
                case HEAD_LN:
                    layernorm_forward(h.data(), mean.data(), rstd.data(), x, p->lnfw[0], p->lnfb[0], N, C);
                    lens_sum[s * 3 + 0] +=
                        decode_loss(c, h.data(), p->wte, tg, N, logits.data(), probs.data(), losses.data());
                    continue;
                case HEAD_SUM: {  // x alone: LN_f(x_s);  y alone: LN_f(y_s);  joint: LN_f(x_s + y_s)
                    const real* y = model.acts.y + s * NC;
                    add_forward(scratch.data(), x, y, 1, NC);
                    const real* srcs[3] = {x, y, scratch.data()};
                    for (int j = 0; j < 3; j++) {
                        layernorm_forward(out.data(), mean.data(), rstd.data(), srcs[j], p->lnfw[0], p->lnfb[0], N, C);
                        lens_sum[s * 3 + j] +=
                            decode_loss(c, out.data(), p->wte, tg, N, logits.data(), probs.data(), losses.data());
                    }
                    continue;
                }
                case HEAD_SIAMESE: break;  // below
                default: unknown_kind("head kind", head);
            }
            const real* y = model.acts.y + s * NC;
            // x alone: LN_f(LN_xf(x_s));  y alone: LN_f(LN_yf(y_s));  joint: LN_f(LN_xf(x_s) + LN_yf(y_s))
            layernorm_forward(h.data(), mean.data(), rstd.data(), x, p->lnfw[LN_X], p->lnfb[LN_X], N, C);
            layernorm_forward(h2.data(), mean.data(), rstd.data(), y, p->lnfw[LN_Y], p->lnfb[LN_Y], N, C);
            if (s == 2 * L) {  // the head's own balance: |LN_xf(x)| / (|LN_xf(x)| + |LN_yf(y)|)
                for (int n = 0; n < N; n++) {
                    double nx = 0, ny = 0;
                    for (int k = 0; k < C; k++) {
                        nx += (double)h[(size_t)n * C + k] * h[(size_t)n * C + k];
                        ny += (double)h2[(size_t)n * C + k] * h2[(size_t)n * C + k];
                    }
                    share_sum[s] += std::sqrt(nx) / (std::sqrt(nx) + std::sqrt(ny)) / N;
                }
            }
            add_forward(scratch.data(), h.data(), h2.data(), 1, NC);
            const real* srcs[3] = {h.data(), h2.data(), scratch.data()};
            for (int j = 0; j < 3; j++) {
                layernorm_forward(out.data(), mean.data(), rstd.data(), srcs[j], p->lnfw[LN_IN], p->lnfb[LN_IN], N, C);
                lens_sum[s * 3 + j] += decode_loss(c, out.data(), p->wte, tg, N, logits.data(), probs.data(), losses.data());
            }
        }
        if (siamese) {  // the X share of the LN_in input at every siamese sub-layer, from the kept LN outputs
            for (int s = 0; s < 2 * L; s++) {
                if (sublayer_kind(c, s) != SUBLAYER_SIAMESE) continue;
                SubLayer a = sublayer_tensors(&model, s);
                for (int n = 0; n < N; n++) {
                    double nx = 0, ny = 0;
                    for (int k = 0; k < C; k++) {
                        nx += (double)a.xh[(size_t)n * C + k] * a.xh[(size_t)n * C + k];
                        ny += (double)a.yh[(size_t)n * C + k] * a.yh[(size_t)n * C + k];
                    }
                    share_sum[s] += std::sqrt(nx) / (std::sqrt(nx) + std::sqrt(ny)) / N;
                }
            }
        }
    }
    base /= M;

    // the skipping forward pass must be the reference's forward pass when nothing is skipped
    std::vector<char> none(L, 0);
    double check = mean_loss_skipping(&model, d, none);
    if (check != base) fail("internal error: the skipping forward pass gives %.9g, gpt2_forward %.9g", check, base);

    printf("probe,index,stream,removed,value\n");
    printf("base,,,,%.6f\n", base);
    const char* stream_names[3] = {"x", "y", "joint"};
    for (int s = 0; s <= 2 * L; s++)
        for (int j = 0; j < (two ? 3 : 1); j++) printf("lens,%d,%s,,%.6f\n", s, stream_names[j], lens_sum[s * 3 + j] / M);
    if (siamese)
        for (int s = 0; s <= 2 * L; s++) printf("balance,%d,,,%.6f\n", s, share_sum[s] / M);
    fflush(stdout);

    // ---- single-block removal
    std::vector<double> drop1(L);
    for (int l = 0; l < L; l++) {
        std::vector<char> skip(L, 0);
        skip[l] = 1;
        drop1[l] = mean_loss_skipping(&model, d, skip);
        printf("drop1,%d,,%d,%.6f\n", l, l, drop1[l]);
        fflush(stdout);
    }
    int K = (int)(drop_frac * L + 1e-9);

    // ---- k blocks removed by the single-removal ranking (ties: the lower block first)
    std::vector<int> order(L);
    for (int l = 0; l < L; l++) order[l] = l;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return drop1[a] < drop1[b]; });
    for (int k = 1; k <= K; k++) {
        std::vector<char> skip(L, 0);
        std::vector<int> removed(order.begin(), order.begin() + k);
        std::sort(removed.begin(), removed.end());
        for (int l : removed) skip[l] = 1;
        printf("rank,%d,,%s,%.6f\n", k, block_list(removed).c_str(), mean_loss_skipping(&model, d, skip));
        fflush(stdout);
    }

    // ---- greedy removal: at each k, remove the block whose removal (on top of the earlier ones) hurts least
    std::vector<char> skip(L, 0);
    std::vector<int> removed;
    for (int k = 1; greedy && k <= K; k++) {
        int best = -1;
        double best_loss = 0;
        for (int l = 0; l < L; l++) {
            if (skip[l]) continue;
            double loss;
            if (k == 1) loss = drop1[l];
            else {
                skip[l] = 1;
                loss = mean_loss_skipping(&model, d, skip);
                skip[l] = 0;
            }
            if (best < 0 || loss < best_loss) best = l, best_loss = loss;
        }
        skip[best] = 1;
        removed.push_back(best);
        std::vector<int> sorted = removed;
        std::sort(sorted.begin(), sorted.end());
        printf("greedy,%d,,%s,%.6f\n", k, block_list(sorted).c_str(), best_loss);
        fflush(stdout);
    }
    gpt2_free(&model);
    return 0;
}

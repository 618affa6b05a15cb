/*
host/train_loop.h: the training loop both trainers share (reference_cpu.cpp and train_gpt2.cu call train_main),
top to bottom as llm.c's main: flags, data, model, then per step validate, sample, checkpoint, forward and
backward, update, log. With it come the pieces it is built from, one file per role:

  host/utils.h         errors (one line, non-zero exit) and checked file calls
  host/model_config.h  the model's shape and layout, the parameter table (checkpoint order)
  host/init.h          the GPT-2 initialization
  host/rand.h          deterministic random numbers (initialization, sampling)
  host/dataloader.h    llm.c's token shards
  host/tokenizer.h     llm.c's tokenizer file, for samples
  host/checkpoint.h    llm.c's model file and our optimizer state
  host/schedulers.h    the learning-rate schedule
  host/flags.h         the command-line flags
  host/rundir.h        the run directory: checkpoints and their markers
  host/eval.h          validation, samples, answer accuracy
*/
#pragma once
#include "checkpoint.h"
#include "dataloader.h"
#include "eval.h"
#include "flags.h"
#include "init.h"
#include "model_config.h"
#include "rand.h"
#include "rundir.h"
#include "schedulers.h"
#include "tokenizer.h"
#include "utils.h"

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
// --print-tensors: the model that -e <checkpoint> or the shape flags describe (the vocabulary from --vocab or the
// train shards' header)
static GPT2Config tensor_table_config(const TrainOptions& o) {
    GPT2Config c;
    if (o.model && !is_shape_name(o.model)) {
        fclose(checkpoint_open(o.model, &c));
        return c;
    }
    int vocab = o.vocab;
    if (!vocab) {
        DataLoader d;
        dataloader_init(&d, o.train_pattern, 1, 1);
        vocab = d.vocab_size;
    }
    return new_model_config(o, vocab);
}

template <typename Model>
static int train_main(int argc, char** argv) {
    TrainOptions o = parse_options(argc, argv);
    if (o.print_tensors) {  // before the backend starts: no GPU needed
        print_tensor_table(tensor_table_config(o));
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

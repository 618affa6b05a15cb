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
  host/distributed.h   several processes (mpirun -np N): the batches shared out, the gradients summed, ZeRO-1
*/
#pragma once
#include "checkpoint.h"
#include "dataloader.h"
#include "distributed.h"
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
//   train_micro_step(m, in, tg, B, T, scale, k)  forward and backward of this rank's micro-batch k of the step, the
//                                                gradient of scale * mean loss kept for train_sum_gradients;
//                                                returns the loss (maybe not finite)
//   train_sum_gradients(m, k, last)              after micro-batch k (last: the step's last): the step's gradient,
//                                                summed over the ranks (host/distributed.h), complete after the last
//   train_next_token_probs(m, tokens, n, &p)     p = the model's distribution of the token after tokens[0..n)
//   train_update(m, o, lr, grad_scale, t)        one AdamW step (t counts from 1); -z 1: of this rank's shard, then
//                                                the parameters gathered
//   train_params_finite(m)                       all parameters finite (on every rank)?
//   train_save(m, model_path, state_path, st)    checkpoint and optimizer state (every rank calls it, rank 0
//                                                writes); returns their sizes and checksums
//   train_load_state(m, path, loader)            the reverse of the state part (this rank's shard); moves the loader
//   train_backend_free(m)                        the reverse of train_backend_init
//   train_describe(m, o, &rows)                  extra rows of the header table
//   train_progress_suffix(m, tokens_per_s)       appended to each progress line
//   train_sync(m)                                wait for the device before a step's time is read

// The model the flags describe without training data: -e <checkpoint>'s, or a new shape whose vocabulary comes from
// --vocab or the train shards' header (--print-tensors; sampling with -x 0)
static GPT2Config config_from_flags(const TrainOptions& o) {
    GPT2Config c;
    if (o.model && !is_shape_name(o.model)) {
        fclose(checkpoint_open(o.model, &c));
        check_loaded_config(c, o);
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

// the tokenizer -s, --prompt and --eval-answers need: --tokenizer, or the one beside the train shards; checked
// against the model's vocabulary now rather than at the first sample
static void load_tokenizer(Tokenizer* tok, const TrainOptions& o, const GPT2Config& c) {
    tok->tokens.clear();
    tok->eot_token = 0;
    int required = o.tokenizer || o.eval_answers > 0 || o.prompt;
    if (o.sample_every == 0 && !required) return;
    std::string path = o.tokenizer ? o.tokenizer : default_tokenizer(o.train_pattern);
    if (path.empty()) {
        if (required) fail("no tokenizer beside '%s': give --tokenizer <file>", o.train_pattern);
        fprintf(stderr, "warning: no tokenizer next to the train shards; samples print token ids\n");
        return;
    }
    tokenizer_load(tok, path.c_str(), required);
    if (tok->tokens.empty()) return;
    if ((int)tok->tokens.size() < c.vocab_size)
        fail("the tokenizer knows %zu tokens but the model has %d", tok->tokens.size(), c.vocab_size);
    if (tok->eot_token >= c.vocab_size)
        fail("the tokenizer's eot token %d is outside the model's vocabulary (%d)", tok->eot_token, c.vocab_size);
}

// what samples start from: the prompt's tokens, or the eot token (the start of a document)
static std::vector<int> sample_context(const Tokenizer& tok, const TrainOptions& o, const GPT2Config& c) {
    if (!o.prompt) return {tok.eot_token};
    std::vector<int> tokens = tokenizer_encode(&tok, o.prompt);
    for (int t : tokens)
        if (t >= c.vocab_size) fail("the prompt holds token %d, outside the model's vocabulary (%d)", t, c.vocab_size);
    return tokens;
}

static std::string duration(double seconds) {  // 42s, 3m05s, 2h07m
    char s[32];
    long v = (long)(seconds + 0.5);
    if (v < 60) snprintf(s, sizeof(s), "%lds", v);
    else if (v < 3600) snprintf(s, sizeof(s), "%ldm%02lds", v / 60, v % 60);
    else snprintf(s, sizeof(s), "%ldh%02ldm", v / 3600, v / 60 % 60);
    return s;
}

// -x 0 --prompt TEXT: print -g tokens that continue TEXT and stop. The model: with -y 1, the latest complete
// checkpoint of the run in -o (its marker checked, as a resume checks it); else -e <checkpoint>, or a new model of the
// flags' shape. No data is read and nothing is written: the run directory is neither locked nor changed.
template <typename Model>
static int sample_only(Model* model, const TrainOptions& o) {
    std::string checkpoint = o.model && !is_shape_name(o.model) ? o.model : "";
    if (o.resume) {
        RunDir run = {};
        run.dir = o.out_dir;
        int step = latest_checkpoint(run.dir);
        if (step < 0) fail("-y 1: no complete checkpoint (DONE_<step>) in '%s'", o.out_dir);
        verify_checkpoint(run, step);
        checkpoint = run_file(run, "model", step);
        fprintf(stderr, "sampling from %s, the latest complete checkpoint in %s (step %d)\n", checkpoint.c_str(),
                o.out_dir, step);
    }
    GPT2Config c;
    if (!checkpoint.empty()) {
        fclose(checkpoint_open(checkpoint.c_str(), &c));
        check_loaded_config(c, o);
        gpt2_build_from_checkpoint(model, checkpoint.c_str());
    } else {
        c = config_from_flags(o);
        gpt2_init_random(model, c, o.seed);
    }
    if (o.T > c.max_seq_len) fail("-t %d exceeds the model's maximum sequence length %d", o.T, c.max_seq_len);
    gpt2_allocate_activations(model, 1, o.T);  // one row: the window of -t tokens
    Tokenizer tok;
    load_tokenizer(&tok, o, c);
    std::vector<int> context = sample_context(tok, o, c);
    uint64_t rng = o.seed ^ 0xD1B54A32D192ED03ull;
    SamplePrinter prompt;
    prompt.put(o.prompt);
    prompt.finish();
    generate(model, &tok, context, o.gen_tokens, o.T, &rng, o.temperature, o.top_k);
    gpt2_free(model);
    return 0;
}

// what the ranks of one run must agree on (host/distributed.h): the command line (the program's name included,
// not its path), and the data and checkpoint it reads
static uint64_t command_line_hash(int argc, char** argv) {
    Checksum h;
    const char* name = strrchr(argv[0], '/');
    h.update(name ? name + 1 : argv[0], strlen(name ? name + 1 : argv[0]) + 1);
    for (int i = 1; i < argc; i++) h.update(argv[i], strlen(argv[i]) + 1);
    return h.digest();
}
static uint64_t data_hash(const DataLoader& train, const DataLoader* val, uint64_t checkpoint) {
    Checksum h;
    for (const DataLoader* d : {&train, val}) {
        if (!d) continue;
        for (size_t i = 0; i < d->files.size(); i++) {
            h.update(d->files[i].c_str(), d->files[i].size() + 1);
            h.update(&d->num_tokens[i], sizeof(long long));
        }
        h.update(&d->vocab_size, sizeof(int));
    }
    h.update(&checkpoint, sizeof(checkpoint));
    return h.digest();
}

// the end of a run, its error-free returns: the backend stopped, then MPI
template <typename Model>
static int train_finish(Model* model, int rc) {
    train_backend_free(model);
    dist_finalize();
    return rc;
}

template <typename Model>
static int train_main(int argc, char** argv) {
    TrainOptions o = parse_options(argc, argv);
    if (o.print_tensors) {  // before the backend starts: no GPU needed
        print_tensor_table(config_from_flags(o));
        return 0;
    }
    catch_fatal_signals();
    // the processes mpirun started (one without it), all with the same flags; from here on only rank 0 prints
    dist_init(o.zero);
    dist_check_same(command_line_hash(argc, argv), "the command line");
    int B = o.B, T = o.T;
    int accum = o.total_batch / (B * T);  // micro-batches a step, dealt out over the ranks
    int sampling = o.max_steps == 0 && o.prompt;  // -x 0 --prompt: nothing is trained, so -d need not split
    if (accum % dist.size != 0 && !sampling)
        dist_fail_together("-d %d does not split over %d processes: it must be a multiple of b*t*processes = %lld",
                           o.total_batch, dist.size, (long long)B * T * dist.size);
    int micro_steps = accum / dist.size;  // this rank's
    Model model;
    train_backend_init(&model, o);
    if (sampling) return train_finish(&model, dist.rank == 0 ? sample_only(&model, o) : 0);

    // the run directory (-o): this run's alone (locked by rank 0, which alone writes it), resumed with -y 1,
    // started over, or new
    RunDir run = {};
    if (o.out_dir && dist.rank == 0) rundir_open(&run, o.out_dir, o.resume, o.start_over);
    else if (o.out_dir) run.dir = o.out_dir;
    int resume_step = dist_broadcast_int(o.resume && dist.rank == 0 ? latest_checkpoint(run.dir) : -1);
    if (o.resume && resume_step < 0)
        dist_fail_together("-y 1: no complete checkpoint (DONE_<step>) in '%s'", o.out_dir);

    // the data (the same on every rank), and how many steps
    DataLoader train, val;
    dataloader_init(&train, o.train_pattern, B, T);
    if (o.val_every > 0) dataloader_init(&val, o.val_pattern, B, T);
    uint64_t checkpoint_id = resume_step >= 0 ? file_checksum(run_file(run, "DONE", resume_step)).hash
                             : o.model && !is_shape_name(o.model) ? (uint64_t)file_size_or_fail(o.model) : 0;
    dist_check_same(data_hash(train, o.val_every > 0 ? &val : nullptr, checkpoint_id),
                    "the data or the checkpoint they start from");
    long long train_tokens = 0;
    for (long long n : train.num_tokens) train_tokens += n;
    long long epoch_steps = std::max(1LL, train_tokens / o.total_batch);
    if (o.max_steps == -1 && epoch_steps > 2147483647LL) fail("one epoch is %lld steps: give -x", epoch_steps);
    int max_steps = o.max_steps == -1 ? (int)epoch_steps : o.max_steps;
    if (resume_step >= max_steps) {
        printf("nothing to do: the latest checkpoint in %s is at step %d and -x is %d (a larger -x extends the run)\n",
               run.dir.c_str(), resume_step, max_steps);
        return train_finish(&model, 0);
    }

    // the model: resumed from -o (its checkpoint checked against its marker), loaded from -e <file>, or new
    if (resume_step >= 0) {
        if (dist.rank == 0) {  // the files are the ones the marker vouches for (the other ranks' marker is rank 0's)
            uint64_t id = verify_checkpoint(run, resume_step);
            if (id) run.run_id = id;
        }
        gpt2_build_from_checkpoint(&model, run_file(run, "model", resume_step).c_str());
        check_loaded_config(model.config, o);
    } else if (o.model && !is_shape_name(o.model)) {
        gpt2_build_from_checkpoint(&model, o.model);
        check_loaded_config(model.config, o);
    } else {
        gpt2_init_random(&model, new_model_config(o, train.vocab_size), o.seed);
    }
    const GPT2Config& cfg = model.config;
    if (T > cfg.max_seq_len) fail("-t %d exceeds the model's maximum sequence length %d", T, cfg.max_seq_len);
    if (train.vocab_size > cfg.vocab_size || (o.val_every > 0 && val.vocab_size > cfg.vocab_size))
        fail("the data's vocabulary (%d) is larger than the model's (%d)", train.vocab_size, cfg.vocab_size);
    gpt2_allocate_activations(&model, B, T);  // now, so that sampling's smaller shapes fit in them

    // samples and answers
    Tokenizer tokenizer;
    load_tokenizer(&tokenizer, o, cfg);
    std::vector<int> context = sample_context(tokenizer, o, cfg);
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

    // the optimizer state and where the data stood, for a resume
    int start_step = 0;
    uint64_t rng = o.seed ^ 0xD1B54A32D192ED03ull;  // for sampling
    if (resume_step >= 0) {
        std::string path = run_file(run, "state", resume_step);
        TrainState st = train_load_state(&model, path.c_str(), &train);
        if (st.step != resume_step) fail("'%s' records step %d, not %d", path.c_str(), st.step, resume_step);
        start_step = st.step;
        rng = st.rng;
        if (st.max_steps > 0 && st.max_steps != max_steps)
            printf("note: the run had -x %d, now %d: the learning-rate schedule is recomputed over %d steps, so at "
                   "step %d it is %.3e (it would have been %.3e)\n", st.max_steps, max_steps, max_steps, start_step,
                   learning_rate_at(start_step, max_steps, o.lr, o.warmup, o.final_frac),
                   learning_rate_at(start_step, st.max_steps, o.lr, o.warmup, o.final_frac));
    }
    if (o.out_dir && dist.rank == 0) rundir_start(&run, o.start_over);  // every check passed: the run starts
    FILE* logfile = o.out_dir && dist.rank == 0 ? open_main_log(run, resume_step) : nullptr;

    std::vector<std::pair<std::string, std::string>> rows;
    char line[256];
    rows.push_back({"layout", layout_description(cfg)});
    if (cfg.ablations)
        rows.push_back({"ablations", cfg.ablations == 3   ? "no depth scale (c_l = 1), no LN_in"
                                     : cfg.ablations == 1 ? "no depth scale (c_l = 1)"
                                                          : "no LN_in"});
    snprintf(line, sizeof(line), "L=%d C=%d NH=%d maxT=%d V=%d Vp=%d", cfg.num_layers, cfg.channels, cfg.num_heads,
             cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size);
    rows.push_back({"model", line});
    rows.push_back({"parameters", std::to_string(model.num_parameters)});
    if (dist.size == 1)
        snprintf(line, sizeof(line), "B=%d T=%d, %d micro-step(s), %d tokens per step", B, T, accum, o.total_batch);
    else
        snprintf(line, sizeof(line), "B=%d T=%d, %d micro-step(s) x %d ranks, %d tokens", B, T, micro_steps,
                 dist.size, o.total_batch);
    rows.push_back({"batch", line});
    if (dist.mpi) {
        snprintf(line, sizeof(line), "%d (mpirun), %d on this machine%s", dist.size, dist.local_size,
                 dist.zero ? "; ZeRO-1 (-z 1)" : "");
        rows.push_back({"processes", line});
    }
    rows.push_back({"train data", o.train_pattern});
    rows.push_back({"train tokens", std::to_string(train_tokens) + " tokens"});
    rows.push_back({"steps", std::to_string(start_step) + " to " + std::to_string(max_steps)});
    if (o.out_dir) rows.push_back({"run directory", run.dir + (resume_step >= 0 ? " (resumed)" : "")});
    train_describe(&model, o, &rows);
    printf("+-----------------------+----------------------------------------------------+\n");
    for (auto& r : rows) printf("| %-21s | %-50s |\n", r.first.c_str(), r.second.c_str());
    printf("+-----------------------+----------------------------------------------------+\n");
    fflush(stdout);

    // -a 1 trains on one batch: the one at the data's position when the run (or its resume) starts, which every
    // checkpoint records, so that a resume trains on the same batch
    int overfit_shard = train.shard;
    long long overfit_position = train.position;
    std::vector<double> micro_losses(micro_steps);
    double loop_start = now_seconds();
    for (int step = start_step; step <= max_steps; step++) {
        int last = step == max_steps;
        if (o.val_every > 0 && (step % o.val_every == 0 || last)) {
            double val_loss = validation_loss(&model, &val, o.val_steps);
            if (!std::isfinite(val_loss))  // the same on every rank, as is the gradient norm below
                dist_fail_together("the validation loss is %f at step %d: training diverged; no checkpoint was "
                                   "written", val_loss, step);
            printf("val loss %.6f\n", val_loss);
            log_line(logfile, "s:%d tel:%.6f\n", step, val_loss);
            if (o.eval_answers > 0 && dist.rank == 0) {
                double acc = answer_accuracy(answers, tokenizer.eot_token, T, greedy_next);
                printf("answer accuracy %.4f (%zu problems)\n", acc, answers.questions.size());
                log_line(logfile, "s:%d acc:%.6f\n", step, acc);
            }
        }
        if (o.sample_every > 0 && dist.rank == 0 && ((step > start_step && step % o.sample_every == 0) || last)) {
            printf("generating:\n---\n");
            generate(&model, &tokenizer, context, o.gen_tokens, T, &rng, o.temperature, o.top_k);
            printf("---\n");
        }
        // A checkpoint holds a state whose loss was just seen to be finite: at the last step after the validation
        // above, otherwise after this step's forward and backward passes but before its update. So a run that
        // diverges never writes over, or past, its last good checkpoint. Its marker comes last.
        auto save_checkpoint = [&](int shard, long long position) {
            if (!train_params_finite(&model))
                dist_fail_together("a parameter is not finite at step %d: training diverged; no checkpoint was "
                                   "written", step);
            if (o.overfit) shard = overfit_shard, position = overfit_position;
            std::string model_path = run_file(run, "model", step), state_path = run_file(run, "state", step);
            TrainState st = {step, B, T, shard, position, rng, model.num_parameters, max_steps};
            SavedFiles saved = train_save(&model, model_path.c_str(), state_path.c_str(), st);
            if (dist.rank != 0) return;
            write_marker(run, step, saved.model, saved.state);
            printf("checkpoint saved: %s\n", model_path.c_str());
        };
        if (last) {
            if (o.out_dir && step > start_step) save_checkpoint(train.shard, train.position);
            break;
        }

        double t0 = now_seconds();
        int shard0 = train.shard;  // where this step's batches start, for its checkpoint
        long long position0 = train.position;
        // micro-batch m of the step goes to rank m % N (host/distributed.h); -a 1: every rank trains on the one batch
        gpt2_zero_grad(&model);
        for (int k = 0; k < micro_steps; k++) {
            if (!o.overfit) dataloader_next_batch_of(&train, dist.rank, dist.size);
            else if (step == start_step && k == 0) dataloader_next_batch(&train);
            micro_losses[k] = train_micro_step(&model, train.inputs.data(), train.targets.data(), B, T, 1.0 / accum, k);
            if (!std::isfinite(micro_losses[k]))
                fail("the loss is %f at step %d: training diverged (try a lower -l); no checkpoint was written",
                     micro_losses[k], step + 1);
            train_sum_gradients(&model, k, k == micro_steps - 1);
        }
        double loss = 0;
        for (double micro_loss : dist_gather_batch_order(micro_losses, accum)) loss += micro_loss / accum;
        if (o.out_dir && o.checkpoint_every > 0 && step > start_step && step % o.checkpoint_every == 0)
            save_checkpoint(shard0, position0);
        double norm = gpt2_grad_norm(&model);
        if (!std::isfinite(norm))
            dist_fail_together("the gradient norm is %f at step %d: training diverged (try a lower -l); no "
                               "checkpoint was written", norm, step + 1);
        double grad_scale = o.grad_clip > 0 && norm > o.grad_clip ? o.grad_clip / norm : 1.0;
        double lr = learning_rate_at(step, max_steps, o.lr, o.warmup, o.final_frac);
        train_update(&model, o, lr, grad_scale, step + 1);
        train_sync(&model);
        double now = now_seconds(), ms = (now - t0) * 1000, tokens_per_s = o.total_batch / (ms / 1000);
        double elapsed = now - loop_start, left = elapsed / (step + 1 - start_step) * (max_steps - step - 1);
        printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s%s | %s elapsed, %s left\n",
               step + 1, max_steps, loss, norm, lr, ms, tokens_per_s, train_progress_suffix(&model, tokens_per_s).c_str(),
               duration(elapsed).c_str(), duration(left).c_str());
        fflush(stdout);
        log_line(logfile, "s:%d trl:%.6f norm:%.4f lr:%.3e ms:%.1f\n", step + 1, loss, norm, lr, ms);
    }
    if (logfile) fclose(logfile);
    gpt2_free(&model);
    return train_finish(&model, 0);
}

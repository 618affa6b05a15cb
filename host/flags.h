/*
host/flags.h: the command-line flags both trainers take, llm.c's letters where the meaning is the same, plus
--norm and the model-shape flags; parsed and checked before any work is done; and the model configuration they ask
for (a new shape, or one that must agree with a loaded checkpoint).
*/
#pragma once
#include <cfloat>
#include <cmath>
#include <string>
#include <glob.h>
#include "model_config.h"

// ----------------------------------------------------------------------------------------------------------------
// command-line flags: llm.c's letters where the meaning is the same, plus --norm and the model-shape flags

typedef struct {
    const char *train_pattern, *val_pattern, *model, *out_dir, *tokenizer;
    const char* prompt;     // --prompt: samples continue this text (nullptr: they start from the eot token)
    const char* attention;  // --attention: CUDA trainer only, materialized or flash (nullptr: the build's default)
    int layers, channels, heads, max_seq_len, vocab, norm, ablations;  // 0 (-1 for norm): not given
    int setting_layout;     // the layout whose setting flag (LayoutSetting::flag) was given, -1: none
    double setting_value;   // that flag's value
    int B, T, total_batch, warmup, max_steps, val_every, val_steps, sample_every, gen_tokens;
    int checkpoint_every, resume, overfit, tf32, eval_answers;
    int recompute;  // -r: CUDA trainer only, recompute GELU and LayerNorm outputs in the backward pass (0 or 1)
    int zero;       // -z: 1 shards the optimizer state over the ranks of mpirun (ZeRO-1, host/distributed.h)
    int print_tensors;  // --print-tensors: print the model's tensor table as JSON and exit
    int start_over;     // --start-over: a fresh run may replace the previous run's files in -o
    int top_k;          // --top-k: sample among the k most likely tokens only (0: all)
    double temperature; // --temperature: of the samples (1: the model's distribution, 0: the most likely token)
    double lr, final_frac, weight_decay, grad_clip;
    uint64_t seed;
} TrainOptions;

static void print_usage(const char* program) {
    fprintf(stderr,
            "usage: %s [flags]\n"
            "  -i <glob>   train token shards            (default data/kjv/kjv_train.bin)\n"
            "  -j <glob>   validation token shards       (default data/kjv/kjv_val.bin)\n"
            "  -e <model>  d12|d24|d36|d48 (GPT-2 small..XL shapes) or a checkpoint .bin to start from\n"
            "  --norm <layout>    %s for a new model (default pre); checked against a checkpoint\n",
            program, layout_names("|", "|").c_str());
    for (const LayoutInfo& l : LAYOUTS)  // the layouts' own settings (host/layouts.h)
        if (l.setting.flag)
            fprintf(stderr, "  %-18s --norm %s: %s (default %g)\n", (std::string(l.setting.flag) + " F").c_str(),
                    l.name, l.setting.flag_meaning, l.setting.default_value);
    fprintf(stderr,
            "  --layers N --channels N --heads N --max-seq-len N   free model shape (default 4, 128, 4, 1024)\n"
            "  --vocab N          vocabulary of a new model (default: from the shard header)\n"
            "  --no-depth-scale   siamese and siamese-hybrid ablation: c_l = 1\n"
            "  --no-ln-in         siamese and siamese-hybrid ablation: LN_in is the identity\n"
            "  -o <dir>    output directory for main.log and checkpoints (default none)\n"
            "  -b N        micro-batch size (default 8)          -t N  sequence length (default 128)\n"
            "  -d N        total batch size in tokens; gradient accumulation = d/(b*t) (default b*t)\n"
            "  -l F        peak learning rate (default 3e-4)     -u N  warmup steps (default 0)\n"
            "  -q F        final learning-rate fraction of cosine decay (default 1.0 = constant)\n"
            "  -c F        weight decay (default 0.0)            --grad-clip F  global-norm clip, 0 off (default 1.0)\n"
            "  -x N        steps (default -1: one epoch)         -a 0|1  overfit a single batch (default 0)\n"
            "  -v N        validate every N steps (default 20)   -m N  validation batches (default 20)\n"
            "  -s N        sample every N steps (default 20)     -g N  tokens to sample (default 64)\n"
            "  --prompt TEXT       samples continue TEXT; with -x 0 the trainer only samples (no data needed):\n"
            "                      ./reference_cpu -e CKPT -x 0 --prompt \"In the beginning\" -g 200\n"
            "                      (-y 1 -o RUN instead of -e: from the run's latest complete checkpoint)\n"
            "  --temperature F     softmax(logits / F) (default 1; 0 takes the most likely token)\n"
            "  --top-k N           sample among the N most likely tokens only (default 0: all)\n"
            "  -n N        checkpoint every N steps, and always at the end when -o is given (default 0)\n"
            "  -y 0|1      resume from the latest checkpoint in -o (default 0); a larger -x extends the run\n"
            "  --start-over  a new run in an -o that holds another run's checkpoints: remove them first\n"
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
            "  -z 0|1      ZeRO-1 under mpirun -np N: 1 = each rank keeps and updates only its shard of the AdamW\n"
            "              state (and in the bf16 CUDA build of the float32 master weights); default 0\n"
            "  threads (CPU): OMP_NUM_THREADS\n");
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
    int underflow = errno == ERANGE && std::fabs(v) <= DBL_MIN;  // 1e-320: a number, if a tiny one
    if ((errno && !underflow) || end == s || *end || !std::isfinite(v))
        fail("flag %s expects a number, got '%s'", flag, s);
    return v;
}

// the model-shape flags: a number from 1 (0 is no shape; leaving the flag out gives the default) to the largest
// the checkpoint loader accepts in a header (host/model_config.h), so that no size computed from them wraps around
static int parse_shape(const char* flag, const char* s, long largest, const char* why) {
    long v = parse_int(flag, s);
    if (v < 1) fail("flag %s must be at least 1, got %ld", flag, v);
    if (v > largest) fail("flag %s must be at most %ld (%s), got %ld", flag, largest, why, v);
    return (int)v;
}

// --norm NAME: a row of the layout registry (host/layouts.h)
static int parse_norm(const char* s) {
    int i = find_layout(s);
    if (i < 0) fail("--norm expects %s, got '%s'", layout_names(", ", " or ").c_str(), s);
    return i;
}

// the layout whose setting flag `flag` is (LayoutSetting::flag), or -1
static int setting_flag_layout(const char* flag) {
    for (int i = 0; i < NUM_LAYOUTS; i++)
        if (LAYOUTS[i].setting.flag && strcmp(flag, LAYOUTS[i].setting.flag) == 0) return i;
    return -1;
}

// Parses and checks the flags; impossible values are caught here, before any work is done.
static TrainOptions parse_options(int argc, char** argv) {
    TrainOptions o;
    memset(&o, 0, sizeof(o));
    o.train_pattern = "data/kjv/kjv_train.bin";
    o.val_pattern = "data/kjv/kjv_val.bin";
    o.norm = -1;
    o.setting_layout = -1;
    o.B = 8, o.T = 128, o.total_batch = -1, o.max_steps = -1, o.val_every = 20, o.val_steps = 20;
    o.sample_every = 20, o.gen_tokens = 64;
    o.lr = 3e-4, o.final_frac = 1.0, o.grad_clip = 1.0, o.temperature = 1.0;
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
        if (!strcmp(f, "--start-over")) { o.start_over = 1; continue; }
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
        else if (setting_flag_layout(f) >= 0)
            o.setting_layout = setting_flag_layout(f), o.setting_value = parse_double(f, v);
        else if (!strcmp(f, "--layers")) o.layers = parse_shape(f, v, MAX_LAYERS, "the most layers a model may have");
        else if (!strcmp(f, "--channels")) o.channels = parse_shape(f, v, MAX_CHANNELS, "the widest a model may be");
        else if (!strcmp(f, "--heads")) o.heads = parse_shape(f, v, MAX_CHANNELS, "the channels it divides");
        else if (!strcmp(f, "--max-seq-len"))
            o.max_seq_len = parse_shape(f, v, MAX_SEQ_LEN, "the longest sequence a model may take");
        else if (!strcmp(f, "--vocab")) o.vocab = parse_shape(f, v, MAX_VOCAB, "the uint16 token shards' limit");
        else if (!strcmp(f, "--prompt")) o.prompt = v;
        else if (!strcmp(f, "--temperature")) o.temperature = parse_double(f, v);
        else if (!strcmp(f, "--top-k")) o.top_k = (int)parse_int(f, v);
        else if (!strcmp(f, "--seed")) o.seed = (uint64_t)parse_int(f, v);
        else if (!strcmp(f, "--grad-clip")) o.grad_clip = parse_double(f, v);
        else if (!strcmp(f, "-b")) o.B = parse_shape(f, v, MAX_BATCH_TOKENS, "the most tokens a micro-batch may hold");
        else if (!strcmp(f, "-t")) o.T = parse_shape(f, v, MAX_SEQ_LEN, "the longest sequence a model may take");
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
        else if (!strcmp(f, "-z")) o.zero = (int)parse_int(f, v);
        else if (!strcmp(f, "--eval-answers")) o.eval_answers = (int)parse_int(f, v);
        else fail("unknown flag '%s' (see -h)", f);
    }
    if ((long long)o.B * o.T > MAX_BATCH_TOKENS)
        fail("-b * -t = %lld is more than %lld, the most tokens a micro-batch may hold", (long long)o.B * o.T,
             (long long)MAX_BATCH_TOKENS);
    if (o.total_batch == -1) o.total_batch = o.B * o.T;
    if (o.total_batch < 1 || o.total_batch % (o.B * o.T) != 0)
        fail("-d %d must be a positive multiple of b*t = %d", o.total_batch, o.B * o.T);
    if (o.lr < 0) fail("-l must be >= 0, got %s", shortest(o.lr).c_str());
    if (o.warmup < 0) fail("-u must be >= 0");
    if (o.final_frac < 0 || o.final_frac > 1) fail("-q must lie in [0, 1], got %s", shortest(o.final_frac).c_str());
    if (o.weight_decay < 0) fail("-c must be >= 0, got %s", shortest(o.weight_decay).c_str());
    if (o.grad_clip < 0) fail("--grad-clip must be >= 0 (0 turns clipping off), got %s", shortest(o.grad_clip).c_str());
    if (o.max_steps < -1) fail("-x must be >= 0, or -1 for one epoch");
    if (o.val_every < 0 || o.val_steps < 1) fail("-v must be >= 0 and -m >= 1");
    if (o.sample_every < 0 || o.gen_tokens < 1) fail("-s must be >= 0 and -g >= 1");
    if (o.checkpoint_every < 0) fail("-n must be >= 0");
    if ((o.resume != 0 && o.resume != 1) || (o.overfit != 0 && o.overfit != 1) || (o.tf32 != 0 && o.tf32 != 1))
        fail("-y, -a and -f take 0 or 1");
    if (o.recompute != 0 && o.recompute != 1) fail("-r takes 0 or 1");
    if (o.zero != 0 && o.zero != 1) fail("-z takes 0 or 1 (ZeRO-1: the optimizer state sharded over the ranks)");
    if (o.resume && !o.out_dir) fail("-y 1 needs -o <dir> to find the checkpoint in");
    if (o.out_dir && !*o.out_dir) fail("-o needs a directory name (got an empty one)");
    if (o.start_over && o.resume) fail("--start-over and -y 1 contradict each other");
    if (o.start_over && !o.out_dir) fail("--start-over needs -o <dir>");
    if (o.temperature < 0) fail("--temperature must be >= 0, got %s", shortest(o.temperature).c_str());
    if (o.max_steps == 0 && o.prompt && o.out_dir && !o.resume)
        fail("-x 0 --prompt only samples and writes nothing: give -y 1 to sample from the latest checkpoint in -o, "
             "or drop -o");
    if (o.top_k < 0) fail("--top-k must be >= 0");
    if (o.prompt && !*o.prompt) fail("--prompt needs some text");
    if (o.eval_answers < 0) fail("--eval-answers must be >= 0");
    if (o.eval_answers > 0 && o.val_every == 0) fail("--eval-answers runs at validation: give -v > 0");
    return o;
}

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

// The layout setting (header[10]) of a model of the layout `norm` with L blocks: from its flag, if given (which
// must be that layout's), else its default; 0 for a layout without one.
static int layout_setting_from_flags(const TrainOptions& o, int norm, int L) {
    const LayoutInfo& layout = LAYOUTS[norm];
    if (o.setting_layout >= 0 && o.setting_layout != norm)
        fail("%s applies to --norm %s only (the model is %s)", LAYOUTS[o.setting_layout].setting.flag,
             LAYOUTS[o.setting_layout].name, layout.name);
    if (o.setting_layout < 0) return default_layout_setting(norm, L);
    return layout.setting.from_flag(o.setting_value, L);
}

// The configuration of a new model from the flags (default shape 4 layers, 128 channels, 4 heads, maxT 1024);
// data_vocab comes from the shard headers.
static GPT2Config new_model_config(const TrainOptions& o, int data_vocab) {
    int L, C, NH;
    requested_shape(o, &L, &C, &NH);
    L = L ? L : 4;
    int norm = o.norm == -1 ? NORM_PRE : o.norm;
    GPT2Config c = make_config(L, C ? C : 128, NH ? NH : 4, o.max_seq_len ? o.max_seq_len : 1024,
                               o.vocab ? o.vocab : data_vocab, norm, o.ablations,
                               layout_setting_from_flags(o, norm, L));
    validate_config(c);
    return c;
}

// A model loaded from a file (-e <file>, or -y 1) must agree with every model flag that was given, so that the
// command that started a run also resumes it.
static void check_loaded_config(const GPT2Config& c, const TrainOptions& o) {
    if (o.norm != -1 && o.norm != c.norm)
        fail("the checkpoint is %s but --norm %s was given", layout_of(c).name, LAYOUTS[o.norm].name);
    if (o.ablations && o.ablations != c.ablations)
        fail("ablation flags differ from the checkpoint's (header[9] = %d)", c.ablations);
    if (o.setting_layout >= 0 && layout_setting_from_flags(o, c.norm, c.num_layers) != c.layout_setting)
        fail("%s %s gives another %s than the checkpoint's (header[10] = %d)", layout_of(c).setting.flag,
             shortest(o.setting_value).c_str(), layout_of(c).setting.meaning, c.layout_setting);
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

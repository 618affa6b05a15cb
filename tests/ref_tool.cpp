// ref_tool: writes the inputs and outputs of one training step of the float32 CPU reference, for the independent
// PyTorch check (tests/torch_check.py).
//
//   ./tests/ref_tool DIR LAYOUT ABLATIONS [SETTING]   LAYOUT: a --norm name (host/layouts.h), ABLATIONS: 0..3,
//                                                   SETTING: the layout's own, header[10] (default 0: none)
//
// The model is tiny (L=2, C=32, NH=4, maxT=8, V=60, so Vp=128) and starts from gpt2_init_random, then every
// parameter is moved off its initial value so that no term vanishes: the weights and the biases by N(0, 0.02), the
// LayerNorm gains and shifts (the QKV-norm's too), siamese-hybrid's gain c1 and hc's connection weights by N(0, 0.2)
// (the init has gains 1 and biases 0; hc's dynamic projections start at 0 and their scales at 0.01, so that at 0.02
// the dynamic part of its weights would be ~1e-3 of the static one). The biases stay at the weights' scale because hybrid's attention reads the raw stream, h0 of RMS
// ~0.04: with biases of 0.2 its q and k hardly depend on the token (the token's part of them is ~0.006), the
// softmax is nearly uniform, and the QKV-norm gains' gradients become a cancellation 1000 times smaller than lnv's,
// which float32 gets only to ~1e-4 on either side (PyTorch float32 against float64: 1.2e-4). The padded rows
// V..Vp-1 of wte, which the init leaves at 0, get random values too: the padded logits are then non-zero and must
// still take no probability, and weight decay must move those rows although their gradient is exactly 0.
//
// Files written in DIR (all integers int32, all reals float32, little-endian as the machine writes them):
//   model.bin        the checkpoint (gpt2_save_checkpoint): 256 int32 header (llm.c's; [8] layout, [9] ablation
//                    bits), then the P parameters in checkpoint order (parameter_table)
//   batch.bin        int32 B, int32 T, then B*T int32 inputs, then B*T int32 targets (row-major (B, T)); B=2, T=8
//   out.bin          int32 B, T, Vp, P; float32 mean loss; float32 global gradient norm (gpt2_grad_norm); float32
//                    logits (B, T, Vp), padded columns included; float32 gradients (P), in checkpoint order
//   after_step.bin   a checkpoint like model.bin holding the parameters after ONE AdamW step (t = 1) from the
//                    gradients of out.bin: lr 1e-3, beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1, the
//                    gradients multiplied first by grad_scale = min(1, 1.0 / global norm) (clip 1.0)
#define REFERENCE_CPU_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"  // the trainer's helpers that this tool does not call
#include "../reference_cpu.cpp"

static_assert(sizeof(real) == 4, "ref_tool writes the float32 build's buffers as they are");

static const int TOOL_L = 2, TOOL_C = 32, TOOL_NH = 4, TOOL_MAXT = 8, TOOL_V = 60, TOOL_B = 2, TOOL_T = 8;
static const double TOOL_LR = 1e-3, TOOL_WD = 0.1, TOOL_CLIP = 1.0;

static void write_ints(AtomicFile* f, std::initializer_list<int> v) {
    std::vector<int> buf(v);
    atomic_write(f, buf.data(), sizeof(int), buf.size());
}

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s DIR LAYOUT ABLATIONS [SETTING]   (LAYOUT %s, ABLATIONS 0..3)\n", argv[0],
                layout_names("|", "|").c_str());
        return 2;
    }
    std::string dir = argv[1];
    char* end = nullptr;
    long abl = strtol(argv[3], &end, 10);
    if (end == argv[3] || *end != 0 || abl < 0 || abl > 3) fail("ABLATIONS must be 0..3, not '%s'", argv[3]);
    // validate_config (in gpt2_init_random) rejects ablations outside siamese
    int setting = argc == 5 ? (int)parse_int("SETTING", argv[4]) : 0;  // validate_config checks it
    GPT2Config c = make_config(TOOL_L, TOOL_C, TOOL_NH, TOOL_MAXT, TOOL_V, parse_norm(argv[2]), (int)abl, setting);

    GPT2 model;
    gpt2_init_random(&model, c, 1337);
    uint64_t rng = 2024 + 16 * c.norm + c.ablations;
    for (const TensorInfo& t : model.tensors) {
        real* p = model.params_memory + t.offset;
        bool gain_or_shift = strncmp(t.name, "ln", 2) == 0 || strcmp(t.name, "c1") == 0 ||  // of a LayerNorm, c1,
                             strncmp(t.name, "hc", 2) == 0;                                  // hc's connections
        double amount = gain_or_shift ? 0.2 : 0.02;
        for (size_t i = 0; i < t.size; i++) p[i] += (real)(amount * random_normal(&rng));
    }
    gpt2_save_checkpoint(&model, (dir + "/model.bin").c_str());

    const int B = TOOL_B, T = TOOL_T, N = B * T;
    std::vector<int> inputs(N), targets(N);
    for (int i = 0; i < N; i++) {
        inputs[i] = (int)(random_uniform(&rng) * c.vocab_size);
        targets[i] = (int)(random_uniform(&rng) * c.vocab_size);
    }
    AtomicFile f;
    atomic_open(&f, dir + "/batch.bin");
    write_ints(&f, {B, T});
    atomic_write(&f, inputs.data(), sizeof(int), N);
    atomic_write(&f, targets.data(), sizeof(int), N);
    atomic_finish(&f);

    gpt2_forward(&model, inputs.data(), targets.data(), B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    double norm = gpt2_grad_norm(&model);

    atomic_open(&f, dir + "/out.bin");
    write_ints(&f, {B, T, c.padded_vocab_size, (int)model.num_parameters});
    float scalars[2] = {(float)model.mean_loss, (float)norm};
    atomic_write(&f, scalars, sizeof(float), 2);
    atomic_write(&f, model.acts.logits, sizeof(float), (size_t)N * c.padded_vocab_size);
    atomic_write(&f, model.grads_memory, sizeof(float), model.num_parameters);
    atomic_finish(&f);

    AdamWConfig opt = {(real)TOOL_LR, (real)0.9, (real)0.95, (real)1e-8, (real)TOOL_WD};
    real grad_scale = norm > TOOL_CLIP ? (real)(TOOL_CLIP / norm) : (real)1;  // as the trainer clips
    gpt2_update(&model, opt, grad_scale, 1);
    gpt2_save_checkpoint(&model, (dir + "/after_step.bin").c_str());

    printf("%s ablations %d: %zu parameters, loss %.6f, grad norm %.6f, grad scale %.6f\n", layout_of(c).name,
           c.ablations, model.num_parameters, (double)model.mean_loss, norm, (double)grad_scale);
    gpt2_free(&model);
    return 0;
}

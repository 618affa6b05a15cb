/*
attention_cudnn.cpp: causal self-attention through cuDNN's fused scaled dot-product attention (SDPA), forward and
backward: the third attention of the CUDA trainer beside the materialized one (train_gpt2.cu) and the flash one
(attention.cuh), built with make USE_CUDNN=1 and chosen as ATTENTION_CUDNN. The math, the layouts and the interface
are in attention_cudnn.h. Host code only: it describes the computation to cuDNN, which picks and runs its kernels.
Compiled once into attention_cudnn.o (the frontend's headers take about a minute to compile) and linked into the
programs that use it, as llm.c does with its cudnn_att.cpp.

cuDNN's graph API. The computation is a graph of tensors (dims and strides, a uid each) and one SDPA node; cuDNN
validates it, looks up candidate engines (heuristics mode A), checks that one supports it and builds its plan, for
that exact shape. That is slow (reported elsewhere at tens to hundreds of ms a graph; not measured here), so each
(B, T, NH, hs) shape gets its forward graph and its backward graph built once, on first use, and kept; a call then
only binds pointers to uids and executes the plan. A training run uses one shape; validation may add one (a smaller
last batch); sampling, which runs one sequence at lengths 1, 2, ..., builds one forward graph per length on its first
pass (cudnn_attention_stats says what the cache has cost).

The tensors as cuDNN sees them, all (B, NH, T, hs) with strides in elements:
    q, k, v   in qkv (B, T, 3C) at offsets 0, C, 2C      strides (3TC, hs, 3C, 1)
    out, dout (B, T, C)                                   strides (TC, hs, C, 1)
    dq, dk, dv in dqkv (B, T, 3C) at offsets 0, C, 2C     strides (3TC, hs, 3C, 1)
    lse       (B, NH, T, 1) float32                       strides (NH T, T, 1, 1)
So the layout changes that the other two attentions do (the permutes of attention_forward) are cuDNN's strided
loads and stores. The causal mask is cuDNN's top-left diagonal with right bound 0 (query i sees keys j <= i). The
softmax and the accumulation are float32 (the graph's intermediate and compute types), inputs and outputs bf16.

The backward graph asks for cuDNN's deterministic algorithm, so that a run repeats bit for bit as the rest of the
trainer does (tests/test_gpu.cu checks two backward passes for identical bits); without it cuDNN may add dq's parts
in an order that changes from run to run.

Everything runs on the default stream, as the trainer's kernels do. One workspace serves every graph (they run one at
a time on that stream), grown to the largest graph's need when a graph is built. Failures: one error line and exit 1,
naming the shape and cuDNN's own message. A shape cuDNN refuses is remembered with its reason (so it is not built
again), and cudnn_attention_refusal asks for that reason without ending the program (the tests do, so that one
refused shape does not cost every later case).
*/
#include "attention_cudnn.h"

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include "host/utils.h"  // fail

namespace fe = cudnn_frontend;

namespace {

enum : int64_t { Q_UID = 1, K_UID, V_UID, O_UID, LSE_UID, DOUT_UID, DQ_UID, DK_UID, DV_UID };

typedef std::tuple<int, int, int, int> Shape;  // B, T, NH, hs
struct GraphCache {
    std::map<Shape, std::shared_ptr<fe::graph::Graph>> graphs;  // built
    std::map<Shape, std::string> refused;                       // not built, and why (the error line's text)
};

struct {
    cudnnHandle_t handle;
    GraphCache forward, backward;
    void* workspace;
    int64_t workspace_bytes;
    int graphs;
    double build_seconds;
} cudnn;

const char* shape_text(const Shape& s) {
    static char text[128];
    snprintf(text, sizeof(text), "B %d, T %d, %d heads of size %d, bf16", std::get<0>(s), std::get<1>(s),
             std::get<2>(s), std::get<3>(s));
    return text;
}

void cuda_check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) fail("CUDA error '%s' in the cuDNN attention (%s)", cudaGetErrorString(err), what);
}

void handle_init(void) {
    if (cudnn.handle) return;
    cudnnStatus_t status = cudnnCreate(&cudnn.handle);
    if (status != CUDNN_STATUS_SUCCESS)
        fail("cuDNN could not start (cudnnCreate: %s); library version %zu", cudnnGetErrorString(status),
             cudnnGetVersion());
}

std::string text(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string text(const char* format, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(buf, sizeof(buf), format, ap);
    va_end(ap);
    return buf;
}

// one step of building a graph: "" if it went well, else what the error line says; unsupported: the shape is not one
// that cuDNN (this version, this GPU) can run
std::string build_step(const fe::error_object& e, const char* direction, const char* step, const Shape& s,
                       bool unsupported) {
    if (e.is_good()) return "";
    if (unsupported)
        return text("cuDNN's fused attention does not support this %s pass (%s; cuDNN %zu): %s: %s", direction,
                    shape_text(s), cudnnGetVersion(), step, e.err_msg.c_str());
    return text("cuDNN could not build the attention's %s graph (%s; cuDNN %zu): %s: %s", direction, shape_text(s),
                cudnnGetVersion(), step, e.err_msg.c_str());
}

// validate, plan and build graph g (of shape s), count it, grow the workspace to its need: "" or why not
std::string build(fe::graph::Graph& g, const char* direction, const Shape& s) {
    auto t0 = std::chrono::steady_clock::now();
    std::string why = build_step(g.validate(), direction, "validate", s, true);
    if (why.empty()) why = build_step(g.build_operation_graph(cudnn.handle), direction, "build_operation_graph", s, false);
    if (why.empty())
        why = build_step(g.create_execution_plans({fe::HeurMode_t::A}), direction, "create_execution_plans", s, true);
    if (why.empty()) why = build_step(g.check_support(cudnn.handle), direction, "check_support", s, true);
    if (why.empty()) why = build_step(g.build_plans(cudnn.handle), direction, "build_plans", s, false);
    int64_t need = 0;
    if (why.empty()) why = build_step(g.get_workspace_size(need), direction, "get_workspace_size", s, false);
    cudnn.build_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!why.empty()) return why;
    if (need > cudnn.workspace_bytes) {
        if (cudnn.workspace) cuda_check(cudaFree(cudnn.workspace), "freeing the workspace");
        cudaError_t err = cudaMalloc(&cudnn.workspace, (size_t)need);
        if (err == cudaErrorMemoryAllocation)
            fail("out of GPU memory: the cuDNN attention's workspace needs %.1f MiB (try a smaller -b or -t)",
                 need / 1048576.0);
        cuda_check(err, "allocating the workspace");
        cudnn.workspace_bytes = need;
    }
    cudnn.graphs++;
    return "";
}

// a graph whose global types are bf16 in and out, float32 inside
std::shared_ptr<fe::graph::Graph> new_graph(void) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

// the strides (in elements) of a (B, NH, T, hs) view of rows of `row` channels, head h at channels h hs..
std::vector<int64_t> head_view_strides(const Shape& s, int64_t row) {
    int64_t T = std::get<1>(s), hs = std::get<3>(s);
    return {T * row, hs, row, 1};
}
std::vector<int64_t> head_dims(const Shape& s) {
    return {std::get<0>(s), std::get<2>(s), std::get<1>(s), std::get<3>(s)};
}
std::vector<int64_t> lse_dims(const Shape& s) { return {std::get<0>(s), std::get<2>(s), std::get<1>(s), 1}; }
std::vector<int64_t> lse_strides(const Shape& s) {
    int64_t T = std::get<1>(s), NH = std::get<2>(s);
    return {NH * T, T, 1, 1};
}
float attention_scale(const Shape& s) { return 1.0f / sqrtf((float)std::get<3>(s)); }

// q, k, v, out or dout as a (B, NH, T, hs) view of rows of `row` channels
std::shared_ptr<fe::graph::Tensor_attributes> head_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                          const Shape& s, int64_t row) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim(head_dims(s))
                        .set_stride(head_view_strides(s, row)));
}

// the graph of shape s from `cache`, or a new one: describe(graph, C) adds its tensors and node, then it is built.
// Null where cuDNN refuses the shape (now or before), with *why saying why.
template <typename Describe>
fe::graph::Graph* cached_graph(GraphCache& cache, const Shape& s, const char* direction, Describe describe,
                               std::string* why) {
    auto it = cache.graphs.find(s);
    if (it != cache.graphs.end()) return it->second.get();
    auto refused = cache.refused.find(s);
    if (refused != cache.refused.end()) {
        *why = refused->second;
        return nullptr;
    }
    auto g = new_graph();
    describe(*g, (int64_t)std::get<2>(s) * std::get<3>(s));
    *why = build(*g, direction, s);
    if (!why->empty()) {
        cache.refused[s] = *why;
        return nullptr;
    }
    return (cache.graphs[s] = g).get();
}

// the forward graph of shape s: out and lse from q, k, v
fe::graph::Graph* forward_graph(const Shape& s, std::string* why) {
    return cached_graph(cudnn.forward, s, "forward", [&](fe::graph::Graph& g, int64_t C) {
        auto q = head_tensor(g, "q", Q_UID, s, 3 * C), k = head_tensor(g, "k", K_UID, s, 3 * C),
             v = head_tensor(g, "v", V_UID, s, 3 * C);
        auto options = fe::graph::SDPA_attributes()
                           .set_name("attention")
                           .set_generate_stats(true)
                           .set_causal_mask(true)
                           .set_attn_scale(attention_scale(s));
        auto [out, lse] = g.sdpa(q, k, v, options);
        out->set_output(true).set_uid(O_UID).set_dim(head_dims(s)).set_stride(head_view_strides(s, C));
        lse->set_output(true).set_uid(LSE_UID).set_data_type(fe::DataType_t::FLOAT).set_dim(lse_dims(s))
            .set_stride(lse_strides(s));
    }, why);
}

// the backward graph of shape s: dq, dk, dv from q, k, v, out, dout, lse
fe::graph::Graph* backward_graph(const Shape& s, std::string* why) {
    return cached_graph(cudnn.backward, s, "backward", [&](fe::graph::Graph& g, int64_t C) {
        auto q = head_tensor(g, "q", Q_UID, s, 3 * C), k = head_tensor(g, "k", K_UID, s, 3 * C),
             v = head_tensor(g, "v", V_UID, s, 3 * C), out = head_tensor(g, "out", O_UID, s, C),
             dout = head_tensor(g, "dout", DOUT_UID, s, C);
        auto lse = g.tensor(fe::graph::Tensor_attributes()
                                .set_name("lse")
                                .set_uid(LSE_UID)
                                .set_data_type(fe::DataType_t::FLOAT)
                                .set_dim(lse_dims(s))
                                .set_stride(lse_strides(s)));
        auto options = fe::graph::SDPA_backward_attributes()
                           .set_name("attention_backward")
                           .set_causal_mask(true)
                           .set_attn_scale(attention_scale(s))
                           .set_deterministic_algorithm(true);
        auto [dq, dk, dv] = g.sdpa_backward(q, k, v, out, dout, lse, options);
        dq->set_output(true).set_uid(DQ_UID).set_dim(head_dims(s)).set_stride(head_view_strides(s, 3 * C));
        dk->set_output(true).set_uid(DK_UID).set_dim(head_dims(s)).set_stride(head_view_strides(s, 3 * C));
        dv->set_output(true).set_uid(DV_UID).set_dim(head_dims(s)).set_stride(head_view_strides(s, 3 * C));
    }, why);
}

// a pass's graph, or the program ends with why cuDNN refused its shape
fe::graph::Graph& graph_or_fail(fe::graph::Graph* g, const std::string& why) {
    if (!g) fail("%s", why.c_str());
    return *g;
}

// "" if the head size is one cuDNN takes (a multiple of 8, its rule for every version), else the error line's text
std::string head_size_refusal(int hs) {
    if (hs % 8 == 0) return "";
    return text("the cuDNN attention needs a head size that is a multiple of 8, but channels / heads is %d", hs);
}

void execute(fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pointers, const char* direction,
             const Shape& s) {
    for (const auto& [uid, p] : pointers)
        if ((uintptr_t)p % 16)
            fail("internal: the cuDNN attention's tensor %lld is not 16-byte aligned", (long long)uid);
    fe::error_object e = g.execute(cudnn.handle, pointers, cudnn.workspace);
    if (!e.is_good())
        fail("cuDNN's attention %s pass failed (%s): %s", direction, shape_text(s), e.err_msg.c_str());
    cuda_check(cudaGetLastError(), direction);
}

}  // namespace

void cudnn_attention_check_head_size(int hs) {
    std::string why = head_size_refusal(hs);
    if (!why.empty()) fail("%s", why.c_str());
}

std::string cudnn_attention_refusal(int B, int T, int NH, int hs, bool backward) {
    std::string why = head_size_refusal(hs);
    if (!why.empty()) return why;
    handle_init();
    Shape s(B, T, NH, hs);
    if (forward_graph(s, &why) && backward) backward_graph(s, &why);
    return why;
}

void cudnn_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int NH,
                             int hs) {
    cudnn_attention_check_head_size(hs);
    handle_init();
    Shape s(B, T, NH, hs);
    size_t C = (size_t)NH * hs;
    std::unordered_map<int64_t, void*> pointers = {
        {Q_UID, (void*)qkv}, {K_UID, (void*)(qkv + C)}, {V_UID, (void*)(qkv + 2 * C)}, {O_UID, out}, {LSE_UID, lse}};
    std::string why;
    execute(graph_or_fail(forward_graph(s, &why), why), pointers, "forward", s);
}

void cudnn_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, int B, int T, int NH, int hs) {
    cudnn_attention_check_head_size(hs);
    handle_init();
    Shape s(B, T, NH, hs);
    size_t C = (size_t)NH * hs;
    std::unordered_map<int64_t, void*> pointers = {
        {Q_UID, (void*)qkv},        {K_UID, (void*)(qkv + C)},  {V_UID, (void*)(qkv + 2 * C)},
        {O_UID, (void*)out},        {DOUT_UID, (void*)dout},    {LSE_UID, (void*)lse},
        {DQ_UID, dqkv},             {DK_UID, dqkv + C},         {DV_UID, dqkv + 2 * C}};
    std::string why;
    execute(graph_or_fail(backward_graph(s, &why), why), pointers, "backward", s);
}

CudnnAttentionStats cudnn_attention_stats(void) {
    return {cudnn.graphs, cudnn.build_seconds, (size_t)cudnn.workspace_bytes, (size_t)cudnnGetVersion()};
}

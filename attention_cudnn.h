/*
attention_cudnn.h: the cuDNN attention's interface (attention_cudnn.cpp, compiled once and linked in; make
USE_CUDNN=1). Causal self-attention forward and backward through cuDNN's fused scaled dot-product attention, bf16
only. The same function as attention.cuh's flash attention, per (batch b, head h), scale = 1/sqrt(hs):

    s_ij = scale q_i . k_j (j <= i)    lse_i = log sum_j exp(s_ij)    out_i = sum_j exp(s_ij - lse_i) v_j

with lse (cuDNN's "stats", natural log, one float a query) kept by the forward pass for the backward pass.

Layouts (no permutes): q, k and v are read where the qkv product leaves them, in qkv (B, T, 3C) rows with head h
of q at channels h hs .. h hs + hs - 1, of k at C + h hs, of v at 2C + h hs (bias already added); out and dout are
(B, T, C) with head h at channels h hs..; dqkv (B, T, 3C) is written in qkv's layout, which the qkv product's
backward pass reads; lse is (B, NH, T) float32. Every pointer must be 16-byte aligned (hs a multiple of 8 and
256-aligned buffers give that).
*/
#pragma once
#include <cstddef>
#include <string>
#include <cuda_bf16.h>

// One error line and exit 1 unless the head size is a multiple of 8 (cuDNN's rule for every version); what else a
// shape needs (the largest head size, ...) cuDNN's support check says when the shape's graphs are built.
void cudnn_attention_check_head_size(int hs);

// Whether cuDNN takes the shape, without running anything: builds (and keeps, for the passes) its forward graph and,
// with backward, its backward graph. "" where it does; else the text of the error line the pass would end the
// program with (a head size not a multiple of 8, or cuDNN's own refusal, quoted), and the program goes on.
// tests/test_gpu.cu asks first, so that a shape cuDNN refuses is recorded and every later case still runs.
std::string cudnn_attention_refusal(int B, int T, int NH, int hs, bool backward);

// out (B, T, C) and lse (B, NH, T) from qkv (B, T, 3C), C = NH hs
void cudnn_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int hs);

// dqkv (B, T, 3C) (overwritten) from dout (B, T, C) and the forward pass's qkv, out and lse
void cudnn_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, int B, int T, int NH, int hs);

// what the graph cache has cost so far: graphs built (forward and backward, one each per shape), the seconds spent
// building them, the workspace bytes; and the cuDNN library's version (cudnnGetVersion, e.g. 91900)
struct CudnnAttentionStats {
    int graphs;
    double build_seconds;
    size_t workspace_bytes;
    size_t version;
};
CudnnAttentionStats cudnn_attention_stats(void);

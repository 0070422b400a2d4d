/* policy.h - fg_policy: how one run places and batches its data (FlexGen's policy), the one
 * value fg-infer, the plan, the engine and (later) the policy search exchange. */
#ifndef FG_POLICY_H
#define FG_POLICY_H

#include <stdint.h>

#include "pager.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_schedule_kind {
    FG_SCHEDULE_ZIGZAG = 0, /* FlexGen's block schedule (paper Algorithm 1) */
    FG_SCHEDULE_ROW = 1,    /* row by row: what Accelerate and DeepSpeed do (the baseline) */
} fg_schedule_kind;

/* How the engine pages a sparse MLP's experts homed off the GPU and RAM. */
typedef enum fg_expert_paging {
    FG_EXPERTS_ROUTED = 0, /* the default: a step whose tokens are expected to choose most of a
                              layer's experts (fg_model_expert_share >= FG_EXPERTS_WHOLE) has them
                              all prefetched with their layer, another reads only the experts
                              its router chose, asked for at once right after the routing */
    FG_EXPERTS_ALL = 1,    /* every expert prefetched with its layer, always (the dense way) */
} fg_expert_paging;
#define FG_EXPERTS_WHOLE 0.9

typedef struct fg_policy {
    uint32_t gbs, ngb;          /* GPU batch size and number of GPU batches; 0 = the plan picks */
    int have_fractions;         /* 0: the plan places by its default rule */
    fg_pager_policy frac;       /* [GPU, CPU, disk] fractions of weights, KV cache, activations */
    int compress_weight;        /* 4-bit weight matrices (the store must hold them) */
    int compress_cache;         /* 4-bit KV cache, groups of 64 along the head dimension */
    float attn_sparsity;        /* top-k sparse attention: fraction of keys kept; 0 = dense */
    int sep_layer;              /* attention and MLP are separate units (FlexGen's --sep-layer) */
    int overlap;                /* prefetch the next units' weights while computing */
    int cpu_attention;          /* attention where the KV cache lives in RAM (--cpu-cache-compute) */
    fg_schedule_kind schedule;
    fg_expert_paging experts;
    uint64_t gpu_budget;        /* bytes of device memory the plan may use (0: no GPU: the plan
                                   refuses GPU fractions) */
} fg_policy;

/* The defaults fg-infer starts from: zig-zag, overlap, separate sub-layers, choose the rest. */
fg_policy fg_policy_default(void);

#ifdef __cplusplus
}
#endif
#endif

/* kernels.cc - fg's CUDA kernels compiled for the host, for the emulated runtime (runtime.cc).
 *
 * The kernel headers are the ones nvcc compiles for the device; fgemu.h gives them the
 * built-ins. The runtime finds a kernel by the name nvcc registers it under and checks that its
 * parameters are spelled the same here; a kernel missing from the table below stops the launch
 * with a message naming it. */
#include <cxxabi.h>
#include <stdlib.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#define FGEMU_KERNEL_SIDE 1
#include "fgemu.h"
#include "fgemu_int.h"

#include "kernels_cuda.cuh"
#include "quant_kernels.cuh"

namespace fgemu {
namespace {

/* "(float*, unsigned int)" for void(float*, unsigned int), without the anonymous namespace. */
const char *params_of(const char *mangled)
{
    int st = 0;
    char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &st);
    if (!d)
        return "?";
    const char *p = strchr(d, '(');
    return p ? p : d; /* kept for the table's life */
}

/* A kernel argument the GPU could not follow: a pointer to memory that is neither the device's
 * nor pinned (cudaHostAlloc, mapped into the device's address space); 0 when fine. */
template <typename T> const void *bad_arg(const T &) { return nullptr; }
template <typename T> const void *bad_arg(T *const &p) { return pointer_ok(p) ? nullptr : p; }
const void *bad_arg(const attn_k &a)
{
    for (const void *p : {(const void *)a.q, (const void *)a.k, (const void *)a.v,
                          (const void *)a.valid, (const void *)a.out, (const void *)a.scores,
                          (const void *)a.sinks})
        if (!pointer_ok(p))
            return p;
    return nullptr;
}

const void *bad_arg(const attn_dec_k &a)
{
    for (const void *p : {(const void *)a.q, (const void *)a.k, (const void *)a.v,
                          (const void *)a.valid, (const void *)a.part})
        if (!pointer_ok(p))
            return p;
    return nullptr;
}

template <auto F, typename T = decltype(F)> struct def_of;
template <auto F, typename... A> struct def_of<F, void (*)(A...)> {
    typedef std::tuple<typename std::decay<A>::type...> pack_t;

    template <size_t... I> static pack_t *copy(void **args, std::index_sequence<I...>)
    {
        return new pack_t(*(typename std::decay<A>::type *)args[I]...);
    }
    static void *pack(void **args) { return copy(args, std::index_sequence_for<A...>{}); }

    template <size_t... I> static void call(const pack_t *p, std::index_sequence<I...>)
    {
        F(std::get<I>(*p)...);
    }
    static void run(const void *p) { call((const pack_t *)p, std::index_sequence_for<A...>{}); }
    static void unpack(void *p) { delete (pack_t *)p; }

    template <size_t... I> static int first_bad(const pack_t *p, const void **at,
                                                std::index_sequence<I...>)
    {
        int bad = -1;
        (void)std::initializer_list<int>{
            (bad < 0 && (*at = bad_arg(std::get<I>(*p))) ? bad = (int)I : 0)...};
        return bad;
    }
    static int check(const void *p, const void **at)
    {
        return first_bad((const pack_t *)p, at, std::index_sequence_for<A...>{});
    }

    static kernel_def make(const char *name)
    {
        return {name, params_of(typeid(void(A...)).name()), pack, run, unpack, check};
    }
};

#define K(f) def_of<f>::make(#f)

} // namespace

const kernel_def *kernels(size_t *n)
{
    static const kernel_def table[] = {
        K(k_layernorm), K(k_rmsnorm), K(k_rope),   K(k_act),    K(k_add),
        K(k_heads),     K(k_scale),     K(k_argmax),  K(k_bias),   K(k_to16),   K(k_from16),
        K(k_gather),    K(k_scatter), K(k_attention), K(k_attn_split_f32), K(k_attn_split_q4),
        K(k_attn_split_q8), K(k_attn_split_f32_h1), K(k_attn_split_q4_h1), K(k_attn_split_q8_h1),
        K(k_attn_combine),
        K(decode_kernel), K(encode_kernel),
    };
    *n = sizeof table / sizeof table[0];
    return table;
}

} // namespace fgemu

/* toycards' per-token glue for the torch target in C++ (built by engine/torch/native.py against the
 * installed torch's headers; loaded as the Python module toycards_glue).
 *
 * A decoding step makes a handful of kernel calls per layer (RMSNorm, the Q/K/V products, attention,
 * the output product, SwiGLU). From Python each costs its checks (class, dtype, device, contiguity,
 * autograd), an output tensor and a ctypes call: several times the kernel's own work on a small
 * model, and more inside a real step than in a loop of one call, since the kernels' weight stream
 * evicts the interpreter's state from the caches. Here the same checks read the tensors' C++ fields,
 * the output is allocated without the dispatcher, and the kernel (the C kernels' entry point, by the
 * address `bind` gets from the ctypes library) is called directly, at a fraction of that cost.
 *
 * Every function returns None where its kernel does not apply (the caller then takes the Python path,
 * which decides the same cases the same way; tests/engine/test_glue_cpp.py holds the two to each other), so
 * this file adds no meaning of its own: the products are the C kernels' `tc_linear`, `tc_linears` and
 * `tc_swiglu`, the norm `tc_rms_norm`, on the same arguments engine/torch/glue.py and engine/torch/quant.py pass;
 * `gqa` completes and makes engine.torch.glue.gq_attention's call of `tc_gqa` once engine/torch/glue.py has decided it. */

#include <Python.h>

#include <ATen/EmptyTensor.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/tanh.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "structs.h"

namespace {

using Weight = tc_weight; /* engine.ckernels.Plan */

using rms_norm_fn = int (*)(const float *, const float *, int64_t, int64_t, double, float *);
using linear_fn = int (*)(const Weight *, const float *, int64_t, float *);
using linears_fn = int (*)(const Weight *, const Weight *, const Weight *, const float *, int64_t, float *,
                           float *, float *);
using swiglu_fn = int (*)(const Weight *, const Weight *, const Weight *, const float *, int64_t, float *);

using GQAArgs = gqa_args; /* engine.ckernels.GQAArgs */
using gqa_fn = int (*)(const GQAArgs *);
using gather_fn = int (*)(const Weight *, const int64_t *, int64_t, float *);

rms_norm_fn k_rms_norm;
linear_fn k_linear;
linears_fn k_linears;
swiglu_fn k_swiglu;
gqa_fn k_gqa;
gather_fn k_gather_rows;
PyObject *tensor_class, *parameter_class, *quant_class; /* torch.Tensor, nn.Parameter, QuantWeight */
PyObject *plan_name, *rows_plan_name, *gemm_name;       /* "_cplan", "_eplan", "_gemm" */
int float_direct;   /* tc_float_direct(F32): float32 weights are multiplied in place */
int64_t few_tokens; /* engine.ckernels.FEW_TOKENS, as engine/torch/native.py binds it */

/* A contiguous float32 CPU tensor of the plain classes, with no autograd to record (engine.torch.glue.plain) */
const at::Tensor *plain(PyObject *o) {
    if (Py_TYPE(o) != (PyTypeObject *)tensor_class && Py_TYPE(o) != (PyTypeObject *)parameter_class) return nullptr;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (t.layout() != at::kStrided || t.scalar_type() != at::kFloat || !t.device().is_cpu() || !t.is_contiguous())
        return nullptr;
    if (t.requires_grad() && c10::GradMode::is_enabled()) return nullptr;
    return &t;
}

/* plain(*tensors): whether each is a tensor `plain` takes (engine.torch.glue.plain's question, from C++) */
PyObject *plain_all(PyObject *, PyObject *const *args, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!plain(args[i])) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* The plan at the address a QuantWeight's attribute `name` holds (`_cplan` for products, `_eplan` for
 * gathering rows), or null where it holds 0 or none */
const Weight *plan_at(PyObject *o, PyObject *name) {
    PyObject *a = PyObject_GetAttr(o, name);
    const uintptr_t at = a && PyLong_Check(a) ? (uintptr_t)PyLong_AsUnsignedLongLong(a) : 0;
    Py_XDECREF(a);
    if (PyErr_Occurred()) PyErr_Clear();
    return (const Weight *)at;
}

/* The kernel plan of weight o for few tokens of k entries: a QuantWeight's own (its `_cplan`, 0 until
 * it may be read: not packed yet, or no kernel), or one made here for a plain 2-D float32 tensor read
 * in place (engine.torch.quant._few_token_plan). False where neither applies. */
bool weight_of(PyObject *o, int64_t k, Weight *out) {
    if (Py_TYPE(o) == (PyTypeObject *)quant_class) {
        const Weight *w = plan_at(o, plan_name);
        if (!w) return false;
        *out = *w;
        return out->k == k;
    }
    const at::Tensor *t = float_direct ? plain(o) : nullptr;
    if (!t || t->dim() != 2 || t->size(1) != k) return false;
    *out = Weight{0, 4 * k, t->size(0), k, (const uint8_t *)t->const_data_ptr(), 0};
    return true;
}

/* x as few tokens: its token count (1 … few_tokens) and row length k, or 0 */
int64_t tokens_of(const at::Tensor *x, int64_t *k) {
    if (!x || x->dim() < 1) return 0;
    *k = x->size(-1);
    if (*k <= 0) return 0;
    const int64_t t = x->numel() / *k;
    return t >= 1 && t <= few_tokens ? t : 0;
}

/* x as more than few tokens for weight o, where o multiplies any number by the int8 GEMM (a
 * QuantWeight whose `_gemm` is set, as its `linear` then calls the same product): its token count and
 * row length k, or 0 */
int64_t many_tokens(const at::Tensor *x, PyObject *o, int64_t *k) {
    if (!x || x->dim() < 1 || Py_TYPE(o) != (PyTypeObject *)quant_class || (*k = x->size(-1)) <= 0) return 0;
    PyObject *gemm = PyObject_GetAttr(o, gemm_name);
    const int yes = gemm ? PyObject_IsTrue(gemm) : 0;
    Py_XDECREF(gemm);
    if (PyErr_Occurred()) PyErr_Clear();
    return yes == 1 ? x->numel() / *k : 0;
}

/* An output tensor shaped like x with its last axis n */
at::Tensor like(const at::Tensor &x, int64_t n) {
    c10::SmallVector<int64_t, 8> sizes(x.sizes().begin(), x.sizes().end());
    sizes.back() = n;
    return at::detail::empty_cpu(sizes, at::kFloat, false, std::nullopt);
}

PyObject *failed(const char *what, int code) {
    PyErr_Format(PyExc_RuntimeError, "quant kernel %s failed with code %d", what, code);
    return nullptr;
}

float *out_of(at::Tensor &y) { return y.mutable_data_ptr<float>(); }

/* ── The tape: a decoding step's kernel calls, recorded once and replayed (engine/torch/replay.py) ──
 * While a step is recorded, each function below that runs its kernel also writes the call down: the
 * kernel, its weights (their plans, by value) and the addresses it read and wrote. The outputs stay
 * alive with the tape, so that a replayed kernel writes where the recorded one wrote and reads what the
 * call before it wrote, with no Python in between. A call is written down only where each activation
 * it reads is the output of a call written down before it (or the step's ids) and each other tensor
 * is a model weight (a Parameter, or a weight kept in its blocks); else the recording is spoiled, with
 * the reason, since a replay would read a tensor that nothing replayed remakes. engine/torch/replay.py spoils
 * it too where anything but these calls (or a view) reads an output. What a replay takes anew at each
 * step (`replay`): the ids, RoPE's angles and the mask of each attention site, the cache's rows. */

struct Span {
    uintptr_t lo, hi;
};

enum Kind { RMS, LINEAR, LINEARS, SWIGLU, GQA, GATHER, ROWS, ADD, MUL, DIV, TIMES, GELU, TANH, SILU, LAYER_NORM };

struct Entry {
    Kind kind = RMS;
    Weight w[3] = {};                            /* the products' weights; GATHER's table */
    PyObject *wo[3] = {nullptr, nullptr, nullptr}; /* the objects they came from (held by the tape) */
    int m = 0;                                   /* how many weights */
    const float *x = nullptr, *g = nullptr, *b = nullptr; /* the input; RMSNorm's γ; ADD's second term */
    float *y[3] = {nullptr, nullptr, nullptr};
    int64_t t = 0, rows = 0, d = 0, b_rows = 0; /* tokens; rows of d entries; ADD, TIMES: b's rows (rows or 1) */
    double eps = 0;
    float c = 0; /* MUL, DIV: the number, as torch rounds it (float32) */
    const int64_t *ids = nullptr; /* GATHER, ROWS: the step's ids */
    int64_t n_ids = 0;
    const float *table = nullptr; /* ROWS: a float32 table of rows of d entries */
    int64_t table_rows = 0;
    GQAArgs a = {}; /* GQA: as the recorded call had it */
    size_t site = 0;
    PyObject *kc = nullptr, *vc = nullptr; /* the cache buffers it wrote (held) */
    at::Tensor kct, vct, heads; /* (heads: the tape's copy of the call's key/value head per query head) */
    /* GELU, TANH, SILU, LAYER_NORM: torch's own operator on the recorded tensors, into the output */
    at::Tensor in, out, gamma, beta, mean, rstd;
    std::string approximate; /* GELU's */
};

struct Tape {
    std::vector<Entry> e;
    std::vector<at::Tensor> made; /* the recorded calls' outputs */
    std::vector<Span> spans;      /* their bytes */
    std::vector<Span> constants;  /* the bytes of the model's constants it read (tape_constant, in `made`) */
    std::vector<PyObject *> refs; /* weights, cache buffers, the result: held */
    std::vector<std::pair<PyObject *, Span>> params; /* each float weight read, and its bytes */
    std::vector<const GQAArgs *> site_args; /* per attention site: its prepared struct, */
    std::vector<PyObject *> sites;          /* its object (runtime.torch.ops._GQASite, held until tape_info), */
    std::vector<int64_t> site_half;         /* and its angles' width */
    at::Tensor ids;
    Span ids_span{0, 0};
    PyObject *result = nullptr; /* the step's logits: a view of a recorded output */
    unsigned long thread = 0;
    std::string spoiled; /* why it cannot be replayed */
    ~Tape() {
        for (PyObject *o : refs) Py_DECREF(o);
        for (PyObject *o : sites) Py_XDECREF(o);
    }
};

Tape *recording = nullptr;

void spoil(const char *why) {
    if (recording && recording->spoiled.empty()) recording->spoiled = why;
}

/* Whether the recording takes this call (on its thread, not spoiled); a kernel call from another
 * thread spoils it: what that thread computes is no part of this step */
bool taking() {
    if (!recording || !recording->spoiled.empty()) return false;
    if (PyThread_get_thread_ident() != recording->thread) {
        spoil("another thread called a kernel while the step was recorded");
        return false;
    }
    return true;
}

/* The bytes t's storage holds now (none once it is freed: FSDP frees a gathered weight's) */
Span bytes_of(const at::Tensor &t) {
    if (!t.has_storage()) return {0, 0};
    const uintptr_t lo = (uintptr_t)t.storage().data();
    return {lo, lo + t.storage().nbytes()};
}

/* t's bytes lie within the output of a call the tape holds, or within one of the model's constants */
bool made_by(const Tape &tape, const at::Tensor &t) {
    const uintptr_t lo = (uintptr_t)t.const_data_ptr(), hi = lo + (uintptr_t)t.numel() * t.element_size();
    for (const std::vector<Span> *spans : {&tape.spans, &tape.constants})
        for (const Span &s : *spans)
            if (s.lo <= lo && hi <= s.hi) return true;
    return false;
}

void hold(PyObject *o) {
    Py_INCREF(o);
    recording->refs.push_back(o);
}

/* o is a view of a Parameter (a card's rows of a fused float weight, `W_gu[1:d_ff, :]`), now held with
 * it: the Parameter's memory is read in place and checked as its own is (`weight_held`) */
bool view_of_parameter(PyObject *o) {
    if (!THPVariable_Check(o)) return false;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (!t.is_view()) return false;
    PyObject *base = THPVariable_Wrap(t._base()); /* (a new reference: the tape holds it) */
    if (!base) {
        PyErr_Clear();
        return false;
    }
    if (Py_TYPE(base) != (PyTypeObject *)parameter_class) {
        Py_DECREF(base);
        return false;
    }
    recording->params.push_back({base, bytes_of(THPVariable_Unpack(base))});
    recording->refs.push_back(base);
    hold(o);
    return true;
}

/* o is one of the model's weights (a Parameter, or a weight kept in its blocks), now held; a
 * Parameter's memory is read in place, so a replay first checks that it is still there */
bool weight_held(PyObject *o) {
    if (Py_TYPE(o) == (PyTypeObject *)parameter_class) {
        recording->params.push_back({o, bytes_of(THPVariable_Unpack(o))});
    } else if (Py_TYPE(o) != (PyTypeObject *)quant_class) {
        return view_of_parameter(o);
    }
    hold(o);
    return true;
}

/* A recorded call's output, kept with the tape: its address */
float *keep(const at::Tensor &y) {
    recording->made.push_back(y);
    const uintptr_t lo = (uintptr_t)y.const_data_ptr();
    recording->spans.push_back({lo, lo + (uintptr_t)y.numel() * y.element_size()});
    return (float *)recording->made.back().mutable_data_ptr();
}

void take(Entry &&entry) { recording->e.push_back(std::move(entry)); }

void take_rms(const at::Tensor &e, PyObject *go, const at::Tensor &g, double eps, int64_t d, const at::Tensor &y) {
    if (!taking()) return;
    if (!made_by(*recording, e) || !weight_held(go))
        return spoil("an RMSNorm read a tensor no recorded call made, or a γ that is not a weight");
    Entry n;
    n.kind = RMS, n.x = e.const_data_ptr<float>(), n.g = g.const_data_ptr<float>();
    n.rows = e.numel() / d, n.d = d, n.eps = eps, n.y[0] = keep(y);
    take(std::move(n));
}

void take_products(Kind kind, const at::Tensor &x, int64_t t, PyObject *const *wo, const Weight *w, int m,
                   const at::Tensor *y, int ny) {
    if (!taking()) return;
    if (!made_by(*recording, x)) return spoil("a product read a tensor no recorded call made");
    Entry n;
    n.kind = kind, n.x = x.const_data_ptr<float>(), n.t = t, n.m = m;
    for (int i = 0; i < m; i++) {
        if (!weight_held(wo[i])) return spoil("a product's weight is not one of the model's");
        n.w[i] = w[i], n.wo[i] = wo[i];
    }
    for (int i = 0; i < ny; i++) n.y[i] = keep(y[i]);
    take(std::move(n));
}

/* rms_norm(e, gamma, epsilon): e / √(mean(e²) + ε) · γ over the last axis, or None */
PyObject *rms_norm(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 3 || !(PyFloat_Check(args[2]) || PyLong_Check(args[2]))) Py_RETURN_NONE;
    const at::Tensor *e = plain(args[0]), *g = plain(args[1]);
    if (!e || !g || e->dim() < 1 || g->dim() != 1) Py_RETURN_NONE;
    const int64_t d = e->size(-1);
    if (g->size(0) != d || d == 0 || e->numel() == 0) Py_RETURN_NONE;
    const double eps = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred()) return nullptr;
    at::Tensor y = like(*e, d);
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = k_rms_norm(e->const_data_ptr<float>(), g->const_data_ptr<float>(), e->numel() / d, d, eps, out_of(y));
    Py_END_ALLOW_THREADS
    if (code != 0) return failed("rms_norm", code);
    if (recording) take_rms(*e, args[1], *g, eps, d, y);
    return THPVariable_Wrap(std::move(y));
}

/* linear(x, W): x [..., K] · Wᵀ → [..., N] for few tokens, or for more by the int8 GEMM (many_tokens);
 * or None */
PyObject *linear(PyObject *, PyObject *const *args, Py_ssize_t n) {
    int64_t k, t;
    Weight w;
    if (n != 2) Py_RETURN_NONE;
    const at::Tensor *x = plain(args[0]);
    if (!(t = tokens_of(x, &k)) && !(t = many_tokens(x, args[1], &k))) Py_RETURN_NONE;
    if (!weight_of(args[1], k, &w)) Py_RETURN_NONE;
    at::Tensor y = like(*x, w.n);
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = k_linear(&w, x->const_data_ptr<float>(), t, out_of(y));
    Py_END_ALLOW_THREADS
    if (code != 0) return failed("linear", code);
    if (recording) take_products(LINEAR, *x, t, &args[1], &w, 1, &y, 1);
    return THPVariable_Wrap(std::move(y));
}

/* linears(x, W_1, W_2[, W_3]): the products of one x by two or three weights, as a tuple, or None */
PyObject *linears(PyObject *, PyObject *const *args, Py_ssize_t n) {
    int64_t k, t;
    Weight w[3];
    if (n != 3 && n != 4) Py_RETURN_NONE;
    const at::Tensor *x = plain(args[0]);
    if (!(t = tokens_of(x, &k))) Py_RETURN_NONE;
    const int m = (int)n - 1;
    for (int i = 0; i < m; i++)
        if (!weight_of(args[i + 1], k, &w[i])) Py_RETURN_NONE;
    at::Tensor y[3];
    float *ys[3] = {nullptr, nullptr, nullptr};
    for (int i = 0; i < m; i++) {
        y[i] = like(*x, w[i].n);
        ys[i] = out_of(y[i]);
    }
    int code;
    const float *xp = x->const_data_ptr<float>();
    Py_BEGIN_ALLOW_THREADS
    code = k_linears(&w[0], &w[1], m == 3 ? &w[2] : nullptr, xp, t, ys[0], ys[1], ys[2]);
    Py_END_ALLOW_THREADS
    if (code != 0) return failed("linears", code);
    if (recording) take_products(LINEARS, *x, t, &args[1], w, m, y, m);
    PyObject *out = PyTuple_New(m);
    if (!out) return nullptr;
    for (int i = 0; i < m; i++) PyTuple_SET_ITEM(out, i, THPVariable_Wrap(std::move(y[i])));
    return out;
}

/* swiglu(x, W_gate, W_up, W_down): W_down · (SiLU(W_gate · x) ⊙ (W_up · x)) for few tokens, or None */
PyObject *swiglu(PyObject *, PyObject *const *args, Py_ssize_t n) {
    int64_t k, t;
    Weight g, u, d;
    if (n != 4) Py_RETURN_NONE;
    const at::Tensor *x = plain(args[0]);
    if (!(t = tokens_of(x, &k)) || !weight_of(args[1], k, &g) || !weight_of(args[2], k, &u)) Py_RETURN_NONE;
    if (u.n != g.n || !weight_of(args[3], g.n, &d) || d.n != k) Py_RETURN_NONE;
    at::Tensor y = like(*x, k);
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = k_swiglu(&g, &u, &d, x->const_data_ptr<float>(), t, out_of(y));
    Py_END_ALLOW_THREADS
    if (code != 0) return failed("swiglu", code);
    if (recording) {
        const Weight ws[3] = {g, u, d};
        take_products(SWIGLU, *x, t, &args[1], ws, 3, &y, 1);
    }
    return THPVariable_Wrap(std::move(y));
}

PyObject *refused(const char *what) {
    PyErr_Format(PyExc_ValueError, "grouped-query attention: %s", what);
    return nullptr;
}

/* A cache buffer: a contiguous CPU tensor of float32, or of float16 for a float16 cache (kv_half),
 * with no autograd to record */
const at::Tensor *cache_buffer(PyObject *o, const GQAArgs *a) {
    if (Py_TYPE(o) != (PyTypeObject *)tensor_class) return nullptr;
    const at::Tensor &t = THPVariable_Unpack(o);
    const auto dtype = a->kv_half ? at::kHalf : at::kFloat;
    if (t.layout() != at::kStrided || t.scalar_type() != dtype || !t.device().is_cpu() || !t.is_contiguous())
        return nullptr;
    if (t.requires_grad() && c10::GradMode::is_enabled()) return nullptr;
    return &t;
}

/* A cache buffer [..., H_kv, capacity, d] of B·H_kv·capacity·d entries with room for `rows` rows */
bool cache_fits(const at::Tensor *c, const GQAArgs *a, int64_t rows) {
    return c && c->dim() >= 3 && c->size(-1) == a->d && c->size(-3) == a->Hkv && rows <= c->size(-2) &&
           c->numel() == a->B * a->Hkv * c->size(-2) * a->d;
}

void take_gqa(const GQAArgs *a, const at::Tensor &Q, const at::Tensor &K, const at::Tensor &V, PyObject *const *caches,
              const at::Tensor &Kc, const at::Tensor &Vc, PyObject *site, PyObject *sinks, const at::Tensor &out) {
    if (!taking()) return;
    if (!site) return spoil("an attention call was made without its site");
    if (!made_by(*recording, Q) || !made_by(*recording, K) || !made_by(*recording, V))
        return spoil("an attention call read a tensor no recorded call made");
    if (sinks && !weight_held(sinks)) return spoil("an attention call's sinks are not one of the model's weights");
    Tape &tape = *recording;
    size_t s = 0;
    while (s < tape.site_args.size() && tape.site_args[s] != a) s++;
    if (s == tape.site_args.size()) {
        Py_INCREF(site);
        tape.site_args.push_back(a), tape.sites.push_back(site), tape.site_half.push_back(a->half);
    } else if (tape.sites[s] != site || tape.site_half[s] != a->half) {
        return spoil("two attention sites shared one prepared call");
    }
    Entry n;
    n.kind = GQA, n.a = *a, n.site = s, n.kc = caches[0], n.vc = caches[1], n.kct = Kc, n.vct = Vc;
    n.heads = at::detail::empty_cpu({a->H}, at::kLong, false, std::nullopt);
    std::memcpy(n.heads.mutable_data_ptr(), a->kv, a->H * sizeof(int64_t));
    n.a.kv = n.heads.const_data_ptr<int64_t>();
    hold(caches[0]), hold(caches[1]);
    n.a.out = keep(out);
    take(std::move(n));
}

/* gqa(args, Q, K, V, K_cache, V_cache, used[, decline[, site[, sinks]]]): engine.torch.glue.gq_attention's call of
 * tc_gqa, the struct at address `args` (its GQAArgs, with everything but these set) completed with the tensors'
 * addresses, the caches' strides, `used`, the sinks (None: none; else float32 [H]) and a new output, which is
 * returned. Where engine/torch/glue.py has
 * decided that the kernel applies, whatever here does not fit that struct is an error; with `decline`
 * true (its fast path for a pass's later layers, which leaves these checks to this call) it is None,
 * and nothing is written. `site` (runtime.torch.ops._GQASite) is what a recorded step's replay asks for the
 * angles and the mask at its new positions. */
PyObject *gqa(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n < 7 || n > 10) return refused("gqa takes 7 to 10 arguments");
    const int decline = n >= 8 ? PyObject_IsTrue(args[7]) : 0;
    if (decline < 0) return nullptr;
#define REFUSED(what) (decline ? (Py_INCREF(Py_None), Py_None) : refused(what))
    GQAArgs *a = (GQAArgs *)PyLong_AsVoidPtr(args[0]);
    const long long used = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return nullptr;
    if (!a || (a->half > 0 && (!a->cos || !a->sin)) || !a->allowed || !a->kv)
        return REFUSED("the arguments are not prepared");
    const at::Tensor *Q = plain(args[1]), *K = plain(args[2]), *V = plain(args[3]);
    const at::Tensor *Kc = cache_buffer(args[4], a), *Vc = cache_buffer(args[5], a);
    if (!Q || !K || !V || !Kc || !Vc) return REFUSED("not contiguous CPU tensors of the expected dtypes");
    const int64_t T = a->T, d = a->d;
    if (Q->dim() < 2 || Q->size(-2) != T || Q->size(-1) != a->H * d || Q->numel() != a->B * T * a->H * d)
        return REFUSED("Q is not [..., T, H·d]");
    if (K->dim() != Q->dim() || K->size(-2) != T || K->size(-1) != a->Hkv * d || K->numel() != a->B * T * a->Hkv * d ||
        !V->sizes().equals(K->sizes()))
        return REFUSED("K or V is not [..., T, H_kv·d]");
    if (used < 0 || !cache_fits(Kc, a, used + T) || !cache_fits(Vc, a, used + T))
        return REFUSED("the cache buffers do not hold the keys");
    PyObject *sinks = n == 10 && args[9] != Py_None ? args[9] : nullptr;
    const at::Tensor *sk = sinks ? plain(sinks) : nullptr;
    if (sinks && (!sk || sk->dim() != 1 || sk->numel() != a->H)) return REFUSED("the sinks are not float32 [H]");
#undef REFUSED
    at::Tensor out = like(*Q, Q->size(-1));
    a->Q = Q->const_data_ptr<float>(), a->K = K->const_data_ptr<float>(), a->V = V->const_data_ptr<float>();
    a->Kc = Kc->mutable_data_ptr(), a->Vc = Vc->mutable_data_ptr();
    a->kh = Kc->size(-2) * d, a->kb = a->kh * a->Hkv, a->vh = Vc->size(-2) * d, a->vb = a->vh * a->Hkv;
    a->used = used, a->out = out_of(out), a->sinks = sk ? sk->const_data_ptr<float>() : nullptr;
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = k_gqa(a);
    Py_END_ALLOW_THREADS
    if (code != 0) {
        PyErr_Format(PyExc_RuntimeError, "grouped-query attention kernel failed with code %d", code);
        return nullptr;
    }
    if (recording)
        take_gqa(a, *Q, *K, *V, &args[4], *Kc, *Vc, n >= 9 && args[8] != Py_None ? args[8] : nullptr, sinks, out);
    return THPVariable_Wrap(std::move(out));
}

/* An int64 CPU tensor of the plain class, contiguous, not empty */
const at::Tensor *id_tensor(PyObject *o) {
    if (Py_TYPE(o) != (PyTypeObject *)tensor_class) return nullptr;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (t.layout() != at::kStrided || t.scalar_type() != at::kLong || !t.device().is_cpu() || !t.is_contiguous() ||
        t.numel() == 0)
        return nullptr;
    return &t;
}

bool ids_below(const int64_t *ids, int64_t n, int64_t rows) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= rows) return false;
    return true;
}

/* embed(W, ids): the rows of W [N, d] at ids [...] → [..., d], or None (a weight with no kernel plan,
 * ids that are not an int64 tensor, or an id out of range: runtime.torch.ops.embed's own path then says so) */
PyObject *embed(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) Py_RETURN_NONE;
    const at::Tensor *ids = id_tensor(args[1]);
    if (!ids) Py_RETURN_NONE;
    const int64_t *id = ids->const_data_ptr<int64_t>(), count = ids->numel();
    Weight w{};
    const at::Tensor *table = nullptr;
    if (Py_TYPE(args[0]) == (PyTypeObject *)quant_class) {
        const Weight *plan = plan_at(args[0], rows_plan_name);
        if (!plan) Py_RETURN_NONE;
        w = *plan;
    } else if (!(table = plain(args[0])) || table->dim() != 2) {
        Py_RETURN_NONE;
    }
    const int64_t rows = table ? table->size(0) : w.n, d = table ? table->size(1) : w.k;
    if (!ids_below(id, count, rows)) Py_RETURN_NONE;
    c10::SmallVector<int64_t, 8> sizes(ids->sizes().begin(), ids->sizes().end());
    sizes.push_back(d);
    at::Tensor y = at::detail::empty_cpu(sizes, at::kFloat, false, std::nullopt);
    if (table) {
        const float *from = table->const_data_ptr<float>();
        for (int64_t i = 0; i < count; i++) std::memcpy(out_of(y) + i * d, from + id[i] * d, d * sizeof(float));
    } else {
        int code;
        Py_BEGIN_ALLOW_THREADS
        code = k_gather_rows(&w, id, count, out_of(y));
        Py_END_ALLOW_THREADS
        if (code != 0) return failed("gather_rows", code);
    }
    if (recording && taking()) {
        Tape &tape = *recording;
        if (ids->const_data_ptr() != tape.ids.const_data_ptr() || count != tape.ids.numel()) {
            spoil("an embedding read ids that are not the step's");
        } else if (!weight_held(args[0])) {
            spoil("an embedding's table is not one of the model's weights");
        } else {
            Entry e;
            e.kind = table ? ROWS : GATHER, e.ids = id, e.n_ids = count, e.d = d;
            e.w[0] = w, e.wo[0] = args[0], e.m = table ? 0 : 1;
            e.table = table ? table->const_data_ptr<float>() : nullptr, e.table_rows = rows;
            e.y[0] = keep(y);
            take(std::move(e));
        }
    }
    return THPVariable_Wrap(std::move(y));
}

/* taped(t): whether tensor t's memory holds (part of) a recorded call's output or the step's ids */
PyObject *taped(PyObject *, PyObject *o) {
    if (!recording || !THPVariable_Check(o)) Py_RETURN_FALSE;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (!t.has_storage() || !t.device().is_cpu()) Py_RETURN_FALSE;
    const uintptr_t lo = (uintptr_t)t.storage().data(), hi = lo + t.storage().nbytes();
    const Span &i = recording->ids_span;
    if (lo < i.hi && i.lo < hi) Py_RETURN_TRUE;
    for (const Span &s : recording->spans)
        if (lo < s.hi && s.lo < hi) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* tape_constant(t): t, a value of the card that follows from its hyperparameters alone and that the
 * model makes once (TorchModel.constant), is kept with the tape, and a recorded call may read it as it
 * reads a recorded output (the replay reads the same memory, which nothing writes); unlike an output it
 * is no activation: torch may read it (`taped` is false) */
PyObject *tape_constant(PyObject *, PyObject *o) {
    if (!recording || !THPVariable_Check(o) || !taking()) Py_RETURN_FALSE;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (!t.has_storage() || !t.device().is_cpu() || t.numel() == 0) Py_RETURN_FALSE;
    recording->made.push_back(t);
    const uintptr_t lo = (uintptr_t)t.const_data_ptr();
    recording->constants.push_back({lo, lo + (uintptr_t)t.numel() * t.element_size()});
    Py_RETURN_TRUE;
}

/* tape_add(a, b, out[, times]): a + b = out (a ⊙ b where `times`), just computed by torch (a residual,
 * a bias, a gate), written down; False where it cannot be (the recording is then spoiled): each term a
 * recorded output or a weight, out shaped as one of them, the other of its shape or a row of its last
 * axis (float32 sums and products of two numbers: torch's, to the bit) */
PyObject *tape_add(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if ((n != 3 && n != 4) || !taking()) Py_RETURN_FALSE;
    const int times = n == 4 ? PyObject_IsTrue(args[3]) : 0;
    if (times < 0) return nullptr;
    const at::Tensor *a = plain(args[0]), *b = plain(args[1]), *y = plain(args[2]);
    if (!a || !b || !y || y->dim() < 1 || y->numel() == 0) {
        spoil("an addition or product of tensors that are not contiguous float32 ones");
        Py_RETURN_FALSE;
    }
    PyObject *terms[2] = {args[0], args[1]};
    if (!a->sizes().equals(y->sizes())) std::swap(a, b), std::swap(terms[0], terms[1]); /* a: out's shape */
    const int64_t d = y->size(-1), rows = y->numel() / d;
    if (!a->sizes().equals(y->sizes()) || (!b->sizes().equals(y->sizes()) && b->numel() != d)) {
        spoil("an addition or product that broadcasts otherwise than a row over rows");
        Py_RETURN_FALSE;
    }
    for (int i = 0; i < 2; i++) {
        const at::Tensor &term = i == 0 ? *a : *b;
        if (!made_by(*recording, term) && !weight_held(terms[i])) {
            spoil(times ? "a product read a tensor no recorded call made" : "an addition read a tensor no recorded call made");
            Py_RETURN_FALSE;
        }
    }
    Entry e;
    e.kind = times ? TIMES : ADD, e.x = a->const_data_ptr<float>(), e.b = b->const_data_ptr<float>();
    e.rows = rows, e.d = d, e.b_rows = b->numel() == y->numel() ? rows : 1, e.y[0] = keep(*y);
    take(std::move(e));
    Py_RETURN_TRUE;
}

/* tape_scale(x, c, out, divide): x · c = out (x / c where `divide`), just computed by torch for a
 * number c, written down; False where it cannot be (the recording is then spoiled). torch multiplies
 * (divides) float32 entries by c rounded to float32, in float32: so does the replay. */
PyObject *tape_scale(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 4 || !taking()) Py_RETURN_FALSE;
    const at::Tensor *x = plain(args[0]), *y = plain(args[2]);
    const double c = PyFloat_AsDouble(args[1]);
    const int divide = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred() || divide < 0) return nullptr;
    if (!x || !y || !x->sizes().equals(y->sizes()) || y->numel() == 0) {
        spoil("a product by a number of tensors that are not contiguous float32 ones");
        Py_RETURN_FALSE;
    }
    if (!made_by(*recording, *x) && !weight_held(args[0])) {
        spoil("a product by a number read a tensor no recorded call made");
        Py_RETURN_FALSE;
    }
    Entry e;
    e.kind = divide ? DIV : MUL, e.x = x->const_data_ptr<float>(), e.rows = 1, e.d = y->numel();
    e.c = (float)c, e.y[0] = keep(*y);
    take(std::move(e));
    Py_RETURN_TRUE;
}

/* An input of a recorded torch operator: a recorded output or a weight (held), or None where `optional` */
bool operand(PyObject *o, bool optional, at::Tensor *out) {
    if (o == Py_None) return optional;
    const at::Tensor *t = plain(o);
    if (!t || (!made_by(*recording, *t) && !weight_held(o))) return false;
    *out = *t;
    return true;
}

/* tape_op(name, out, x, ...): out = name(x, ...), just computed by torch, written down to be computed
 * again by the same torch operator (so to the bit) from C++: "gelu" (…, approximate), "tanh", "silu"
 * and "layer_norm" (…, γ or None, β or None, ε) over the last axis. False where it cannot be (the
 * recording is then spoiled) */
PyObject *tape_op(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n < 3 || !taking()) Py_RETURN_FALSE;
    const char *name = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : nullptr;
    if (!name) return PyErr_Occurred() ? nullptr : (PyErr_SetString(PyExc_TypeError, "tape_op(name, …)"), nullptr);
    const at::Tensor *y = plain(args[1]);
    Entry e;
    const std::string op = name;
    bool fits = y && operand(args[2], false, &e.in) && e.in.sizes().equals(y->sizes());
    if (fits && op == "gelu" && n == 4 && PyUnicode_Check(args[3])) {
        e.kind = GELU, e.approximate = PyUnicode_AsUTF8(args[3]);
    } else if (fits && op == "tanh" && n == 3) {
        e.kind = TANH;
    } else if (fits && op == "silu" && n == 3) {
        e.kind = SILU;
    } else if (fits && op == "layer_norm" && n == 6 && operand(args[3], true, &e.gamma) && operand(args[4], true, &e.beta)) {
        const int64_t d = y->size(-1);
        e.kind = LAYER_NORM, e.eps = PyFloat_AsDouble(args[5]), e.d = d;
        if (PyErr_Occurred()) return nullptr;
        if ((e.gamma.defined() && (e.gamma.dim() != 1 || e.gamma.size(0) != d)) ||
            (e.beta.defined() && (e.beta.dim() != 1 || e.beta.size(0) != d)))
            fits = false;
        std::vector<int64_t> stats(y->sizes().begin(), y->sizes().end()); /* the shape LayerNorm gives */
        stats.back() = 1;                                                  /* its mean and 1/σ: x's, d → 1 */
        e.mean = at::detail::empty_cpu(stats, at::kFloat, false, std::nullopt);
        e.rstd = at::detail::empty_cpu(stats, at::kFloat, false, std::nullopt);
    } else {
        fits = false;
    }
    if (!fits) {
        spoil("a torch operator the tape takes on tensors it does not");
        Py_RETURN_FALSE;
    }
    keep(*y);
    e.out = *y;
    take(std::move(e));
    Py_RETURN_TRUE;
}

/* spoil(why): the recording cannot be replayed (engine/torch/replay.py's own checks) */
PyObject *spoil_py(PyObject *, PyObject *why) {
    if (recording && recording->spoiled.empty()) {
        const char *text = PyUnicode_AsUTF8(why);
        if (!text) return nullptr;
        recording->spoiled = text;
    }
    Py_RETURN_NONE;
}

/* record(ids): from now on, on this thread, the kernel calls are written down, ids the step's ids;
 * False where another thread's step is being recorded (this one then runs as it is) */
PyObject *record(PyObject *, PyObject *ids) {
    if (recording) Py_RETURN_FALSE;
    const at::Tensor *t = id_tensor(ids);
    if (!t) {
        PyErr_SetString(PyExc_TypeError, "record takes the step's ids: a contiguous int64 CPU tensor");
        return nullptr;
    }
    recording = new Tape;
    recording->ids = *t;
    const uintptr_t lo = (uintptr_t)t->const_data_ptr();
    recording->ids_span = {lo, lo + (uintptr_t)t->numel() * 8};
    recording->thread = PyThread_get_thread_ident();
    Py_RETURN_TRUE;
}

const char *TAPE = "toycards_glue.tape";

void tape_free(PyObject *capsule) { delete (Tape *)PyCapsule_GetPointer(capsule, TAPE); }

/* recorded(result): the end of the recording. The tape (a capsule), or why it cannot be replayed (a
 * str); result None drops it (the step raised) */
PyObject *recorded(PyObject *, PyObject *result) {
    Tape *tape = recording;
    recording = nullptr;
    if (!tape) {
        PyErr_SetString(PyExc_RuntimeError, "no decoding step is being recorded");
        return nullptr;
    }
    std::unique_ptr<Tape> owned(tape);
    if (result == Py_None) return Py_NewRef(Py_None);
    if (tape->spoiled.empty() && tape->e.empty()) tape->spoiled = "no kernel ran";
    const at::Tensor *out = tape->spoiled.empty() ? plain(result) : nullptr;
    if (tape->spoiled.empty() && (!out || !made_by(*tape, *out)))
        tape->spoiled = "the step's result is not a recorded call's output";
    if (!tape->spoiled.empty()) return PyUnicode_FromString(tape->spoiled.c_str());
    tape->result = result;
    Py_INCREF(result), tape->refs.push_back(result);
    PyObject *capsule = PyCapsule_New(tape, TAPE, tape_free);
    if (capsule) owned.release();
    return capsule;
}

Tape *tape_of(PyObject *capsule) {
    return (Tape *)PyCapsule_GetPointer(capsule, TAPE); /* (a TypeError where it is not one) */
}

/* tape_info(tape): ((site, half) per attention site, the number of attention calls), once: the tape
 * lets go of the sites then (a site leads to its pass's context and so to the cache that holds the
 * tape: a cycle through a capsule, which the garbage collector cannot see into) */
PyObject *tape_info(PyObject *, PyObject *capsule) {
    Tape *tape = tape_of(capsule);
    if (!tape) return nullptr;
    PyObject *sites = PyTuple_New((Py_ssize_t)tape->sites.size());
    if (!sites) return nullptr;
    for (size_t i = 0; i < tape->sites.size(); i++) {
        if (!tape->sites[i]) {
            Py_DECREF(sites);
            PyErr_SetString(PyExc_RuntimeError, "tape_info is asked once");
            return nullptr;
        }
        PyTuple_SET_ITEM(sites, i, Py_BuildValue("NL", tape->sites[i], (long long)tape->site_half[i]));
        tape->sites[i] = nullptr; /* (its reference went to the tuple) */
    }
    long long calls = 0;
    for (const Entry &e : tape->e) calls += e.kind == GQA;
    return Py_BuildValue("NL", sites, calls);
}

/* The plan of a weight kept in its blocks, as its attribute `name` gives it now: false where none */
bool plan_now(PyObject *o, PyObject *name, Weight *out) {
    const Weight *w = plan_at(o, name);
    if (!w || w->n != out->n || w->k != out->k) return false;
    *out = *w;
    return true;
}

/* tape_refresh(tape): the plans of its weights kept in their blocks as they are now (a weight packed
 * since the recording is read packed); False where one has none (the tape must go) */
PyObject *tape_refresh(PyObject *, PyObject *capsule) {
    Tape *tape = tape_of(capsule);
    if (!tape) return nullptr;
    for (Entry &e : tape->e)
        for (int i = 0; i < e.m; i++)
            if (Py_TYPE(e.wo[i]) == (PyTypeObject *)quant_class &&
                !plan_now(e.wo[i], e.kind == GATHER ? rows_plan_name : plan_name, &e.w[i]))
                Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* The i-th item of list o as a Python object of the list (borrowed), or null */
PyObject *list_item(PyObject *o, Py_ssize_t i) {
    return PyList_Check(o) && i < PyList_GET_SIZE(o) ? PyList_GET_ITEM(o, i) : nullptr;
}

int run(const Entry &e) {
    switch (e.kind) {
    case RMS: return k_rms_norm(e.x, e.g, e.rows, e.d, e.eps, e.y[0]);
    case LINEAR: return k_linear(&e.w[0], e.x, e.t, e.y[0]);
    case LINEARS: return k_linears(&e.w[0], &e.w[1], e.m == 3 ? &e.w[2] : nullptr, e.x, e.t, e.y[0], e.y[1], e.y[2]);
    case SWIGLU: return k_swiglu(&e.w[0], &e.w[1], &e.w[2], e.x, e.t, e.y[0]);
    case GQA: return k_gqa(&e.a);
    case GATHER: return k_gather_rows(&e.w[0], e.ids, e.n_ids, e.y[0]);
    case ROWS:
        for (int64_t i = 0; i < e.n_ids; i++) std::memcpy(e.y[0] + i * e.d, e.table + e.ids[i] * e.d, e.d * sizeof(float));
        return 0;
    case ADD:
    case TIMES:
        for (int64_t r = 0; r < e.rows; r++) {
            const float *x = e.x + r * e.d, *b = e.b + (e.b_rows == 1 ? 0 : r * e.d);
            float *y = e.y[0] + r * e.d;
            if (e.kind == ADD)
                for (int64_t i = 0; i < e.d; i++) y[i] = x[i] + b[i];
            else
                for (int64_t i = 0; i < e.d; i++) y[i] = x[i] * b[i];
        }
        return 0;
    case GELU: at::gelu_out(const_cast<at::Tensor &>(e.out), e.in, e.approximate); return 0;
    case TANH: at::tanh_out(const_cast<at::Tensor &>(e.out), e.in); return 0;
    case SILU: at::silu_out(const_cast<at::Tensor &>(e.out), e.in); return 0;
    case LAYER_NORM: {
        at::Tensor out = e.out, mean = e.mean, rstd = e.rstd;
        const c10::optional<at::Tensor> g = e.gamma.defined() ? c10::optional<at::Tensor>(e.gamma) : c10::nullopt;
        const c10::optional<at::Tensor> b = e.beta.defined() ? c10::optional<at::Tensor>(e.beta) : c10::nullopt;
        at::native_layer_norm_out(out, mean, rstd, e.in, {e.d}, g, b, e.eps);
        return 0;
    }
    case MUL:
        for (int64_t i = 0; i < e.d; i++) e.y[0][i] = e.x[i] * e.c;
        return 0;
    case DIV:
        for (int64_t i = 0; i < e.d; i++) e.y[0][i] = e.x[i] / e.c;
        return 0;
    }
    return -1;
}

/* replay(tape, ids, sites, slots): the recorded step for new ids: `sites` (cos, sin, mask) per attention
 * site at the new positions, `slots` the KV cache's (KVCache.slots), the i-th attention call's the
 * i-th. A new tensor of the step's logits; None where the tape does not fit these (other buffers in the
 * cache, rows it has no room for, an id out of range, angles or masks of other shapes, a weight's
 * memory moved), and then nothing was written. */
PyObject *replay(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 4) {
        PyErr_SetString(PyExc_TypeError, "replay(tape, ids, sites, slots)");
        return nullptr;
    }
    Tape *tape = tape_of(args[0]);
    if (!tape) return nullptr;
    const at::Tensor *ids = id_tensor(args[1]);
    PyObject *sites = args[2], *slots = args[3];
    if (!ids || ids->numel() != tape->ids.numel() || !PyTuple_Check(sites) ||
        PyTuple_GET_SIZE(sites) != (Py_ssize_t)tape->site_half.size() || !PyList_Check(slots))
        Py_RETURN_NONE;
    const int64_t *id = ids->const_data_ptr<int64_t>();
    for (const auto &[param, was] : tape->params) { /* (`param.data = …` moves a weight's memory) */
        const Span now = bytes_of(THPVariable_Unpack(param));
        if (now.lo != was.lo || now.hi != was.hi) Py_RETURN_NONE;
    }
    const size_t n_sites = tape->site_half.size();
    std::vector<const at::Tensor *> cos(n_sites), sin(n_sites), mask(n_sites);
    for (size_t s = 0; s < n_sites; s++) {
        PyObject *item = PyTuple_GET_ITEM(sites, s);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) Py_RETURN_NONE;
        cos[s] = plain(PyTuple_GET_ITEM(item, 0)), sin[s] = plain(PyTuple_GET_ITEM(item, 1));
        PyObject *m = PyTuple_GET_ITEM(item, 2);
        mask[s] = Py_TYPE(m) == (PyTypeObject *)tensor_class ? &THPVariable_Unpack(m) : nullptr;
        if (!cos[s] || !sin[s] || !mask[s] || cos[s]->dim() != 2 || !cos[s]->sizes().equals(sin[s]->sizes()) ||
            cos[s]->size(1) != tape->site_half[s] || mask[s]->scalar_type() != at::kBool || mask[s]->dim() != 2 ||
            !mask[s]->is_contiguous() || !mask[s]->device().is_cpu())
            Py_RETURN_NONE;
    }
    std::vector<int64_t> used;
    Py_ssize_t slot = 0;
    for (const Entry &e : tape->e) {
        if (e.kind == GATHER || e.kind == ROWS) {
            if (!ids_below(id, e.n_ids, e.kind == GATHER ? e.w[0].n : e.table_rows)) Py_RETURN_NONE;
            continue;
        }
        if (e.kind != GQA) continue;
        PyObject *entry = list_item(slots, slot++), *buffers = entry ? list_item(entry, 0) : nullptr;
        PyObject *rows = entry ? list_item(entry, 1) : nullptr;
        if (!buffers || !rows || !PyLong_Check(rows) || list_item(buffers, 0) != e.kc || list_item(buffers, 1) != e.vc)
            Py_RETURN_NONE;
        const long long u = PyLong_AsLongLong(rows);
        if (PyErr_Occurred()) return nullptr;
        const int64_t T = e.a.T;
        const at::Tensor &c = *cos[e.site], &m = *mask[e.site];
        if (u < 0 || c.size(0) != T || m.size(0) != T || m.size(1) != u + T || !cache_fits(&e.kct, &e.a, u + T) ||
            !cache_fits(&e.vct, &e.a, u + T))
            Py_RETURN_NONE;
        used.push_back(u);
    }
    if (slot != PyList_GET_SIZE(slots)) Py_RETURN_NONE;
    std::memcpy(tape->ids.mutable_data_ptr(), id, tape->ids.numel() * sizeof(int64_t));
    size_t g = 0;
    for (Entry &e : tape->e) {
        if (e.kind != GQA) continue;
        e.a.cos = cos[e.site]->const_data_ptr<float>(), e.a.sin = sin[e.site]->const_data_ptr<float>();
        e.a.allowed = (const uint8_t *)mask[e.site]->const_data_ptr(), e.a.used = used[g++];
    }
    int code = 0;
    const char *what = "";
    std::string raised;
    Py_BEGIN_ALLOW_THREADS
    try {
        c10::InferenceMode inference; /* (torch's operators write into the recorded outputs) */
        for (const Entry &e : tape->e)
            if ((code = run(e)) != 0) {
                what = e.kind == GQA ? "gqa" : e.kind == GATHER ? "gather_rows" : "a product or norm";
                break;
            }
    } catch (const std::exception &ex) {
        raised = ex.what();
    }
    Py_END_ALLOW_THREADS
    if (!raised.empty()) {
        PyErr_Format(PyExc_RuntimeError, "a replayed torch operator failed: %s", raised.c_str());
        return nullptr;
    }
    if (code != 0) return failed(what, code);
    g = 0;
    slot = 0;
    for (const Entry &e : tape->e) {
        if (e.kind != GQA) continue;
        PyObject *now = PyLong_FromLongLong(used[g++] + e.a.T);
        if (!now) return nullptr;
        PyList_SetItem(list_item(slots, slot++), 1, now); /* (steals now) */
    }
    return THPVariable_Wrap(THPVariable_Unpack(tape->result).clone());
}

/* bind(Tensor, Parameter, (rms_norm, linear, linears, swiglu, gqa, gather_rows addresses), float_direct,
 * few_tokens): what the functions above need, once */
PyObject *bind(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 5 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != 6) {
        PyErr_SetString(PyExc_TypeError, "bind(Tensor, Parameter, (6 addresses), float_direct, few)");
        return nullptr;
    }
    void *f[6];
    for (int i = 0; i < 6; i++) {
        f[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(args[2], i));
        if (!f[i]) return PyErr_Occurred() ? nullptr : (PyErr_SetString(PyExc_ValueError, "a null kernel"), nullptr);
    }
    const long direct = PyLong_AsLong(args[3]);
    const long long few = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return nullptr;
    Py_INCREF(args[0]), Py_INCREF(args[1]);
    Py_XDECREF(tensor_class), Py_XDECREF(parameter_class);
    tensor_class = args[0], parameter_class = args[1];
    k_rms_norm = (rms_norm_fn)f[0], k_linear = (linear_fn)f[1], k_linears = (linears_fn)f[2];
    k_swiglu = (swiglu_fn)f[3], k_gqa = (gqa_fn)f[4], k_gather_rows = (gather_fn)f[5];
    float_direct = direct != 0, few_tokens = few;
    Py_RETURN_NONE;
}

/* weight_class(QuantWeight): the class whose `_cplan` weight_of reads (engine/torch/quant.py registers it) */
PyObject *weight_class(PyObject *, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "weight_class takes a class");
        return nullptr;
    }
    Py_INCREF(cls);
    Py_XSETREF(quant_class, cls);
    Py_RETURN_NONE;
}

/* The sizes of Weight and GQAArgs, for engine/torch/native.py to check against their ctypes mirrors */
PyObject *sizes(PyObject *, PyObject *) { return Py_BuildValue("nn", sizeof(Weight), sizeof(GQAArgs)); }

PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "bind the classes and kernels"},
    {"weight_class", weight_class, METH_O, "the class of weights kept in their blocks"},
    {"sizes", sizes, METH_NOARGS, "the sizes of the structs shared with the C kernels"},
    {"plain", (PyCFunction)(void (*)(void))plain_all, METH_FASTCALL, "plain(*tensors): all plain float32 CPU tensors"},
    {"rms_norm", (PyCFunction)(void (*)(void))rms_norm, METH_FASTCALL, "rms_norm(e, gamma, epsilon) or None"},
    {"linear", (PyCFunction)(void (*)(void))linear, METH_FASTCALL, "linear(x, W) or None"},
    {"linears", (PyCFunction)(void (*)(void))linears, METH_FASTCALL, "linears(x, W_1, W_2[, W_3]) or None"},
    {"swiglu", (PyCFunction)(void (*)(void))swiglu, METH_FASTCALL, "swiglu(x, W_gate, W_up, W_down) or None"},
    {"gqa", (PyCFunction)(void (*)(void))gqa, METH_FASTCALL,
     "gqa(args, Q, K, V, K_cache, V_cache, used[, decline[, site[, sinks]]])"},
    {"embed", (PyCFunction)(void (*)(void))embed, METH_FASTCALL, "embed(W, ids) or None"},
    {"record", record, METH_O, "record(ids): write the kernel calls down from now on"},
    {"recorded", recorded, METH_O, "recorded(result): the tape, or why there is none"},
    {"spoil", spoil_py, METH_O, "spoil(why): the step being recorded cannot be replayed"},
    {"taped", taped, METH_O, "taped(t): t's memory is a recorded output or the step's ids"},
    {"tape_constant", tape_constant, METH_O, "tape_constant(t): t, a constant of the model, is the tape's"},
    {"tape_add", (PyCFunction)(void (*)(void))tape_add, METH_FASTCALL, "tape_add(a, b, out): write a + b down"},
    {"tape_scale", (PyCFunction)(void (*)(void))tape_scale, METH_FASTCALL,
     "tape_scale(x, c, out, divide): write x · c (x / c) down"},
    {"tape_op", (PyCFunction)(void (*)(void))tape_op, METH_FASTCALL, "tape_op(name, out, x, …): write it down"},
    {"tape_info", tape_info, METH_O, "tape_info(tape): ((site, half), …), attention calls"},
    {"tape_refresh", tape_refresh, METH_O, "tape_refresh(tape): its weights' plans as they are now"},
    {"replay", (PyCFunction)(void (*)(void))replay, METH_FASTCALL, "replay(tape, ids, sites, slots) or None"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "toycards_glue", "toycards' per-token glue in C++", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_toycards_glue(void) {
    plan_name = PyUnicode_InternFromString("_cplan");
    rows_plan_name = PyUnicode_InternFromString("_eplan");
    gemm_name = PyUnicode_InternFromString("_gemm");
    return plan_name && rows_plan_name && gemm_name ? PyModule_Create(&module) : nullptr;
}

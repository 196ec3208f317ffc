/* toycards' per-token glue for the torch target in C++ (built by runtime/glue_cpp.py against the
 * installed torch's headers; loaded as the Python module toycards_glue).
 *
 * A decoding step makes a handful of kernel calls per layer (RMSNorm, the Q/K/V products, attention,
 * the output product, SwiGLU). From Python each costs its checks (class, dtype, device, contiguity,
 * autograd), an output tensor and a ctypes call: ~5–12 µs, several times the kernel's own work on a
 * small model, and more inside a real step than in a loop of one call, since the kernels' weight
 * stream evicts the interpreter's state from the caches. Here the same checks read the tensors' C++
 * fields, the output is allocated without the dispatcher, and the kernel (quant.c, by the addresses
 * `bind` gets from the ctypes library) is called directly: under 1 µs a call.
 *
 * Every function returns None where its kernel does not apply (the caller then takes the Python path,
 * which decides the same cases the same way; tests/test_glue_cpp.py holds the two to each other), so
 * this file adds no meaning of its own: the products are quant.c's `tc_linear`, `tc_linears` and
 * `tc_swiglu`, the norm `tc_rms_norm`, on the same arguments glue_torch.py and quant_torch.py pass;
 * `gqa` completes and makes glue_torch.gq_attention's call of `tc_gqa` once glue_torch has decided it. */

#include <Python.h>

#include <ATen/EmptyTensor.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>

#include "structs.h"

namespace {

using Weight = tc_weight; /* quant_kernels.Plan */

using rms_norm_fn = int (*)(const float *, const float *, int64_t, int64_t, double, float *);
using linear_fn = int (*)(const Weight *, const float *, int64_t, float *);
using linears_fn = int (*)(const Weight *, const Weight *, const Weight *, const float *, int64_t, float *,
                           float *, float *);
using swiglu_fn = int (*)(const Weight *, const Weight *, const Weight *, const float *, int64_t, float *);

using GQAArgs = gqa_args; /* quant_kernels.GQAArgs */
using gqa_fn = int (*)(const GQAArgs *);

rms_norm_fn k_rms_norm;
linear_fn k_linear;
linears_fn k_linears;
swiglu_fn k_swiglu;
gqa_fn k_gqa;
PyObject *tensor_class, *parameter_class, *quant_class; /* torch.Tensor, nn.Parameter, QuantWeight */
PyObject *plan_name;                                    /* "_cplan" */
int float_direct;   /* tc_float_direct(F32): float32 weights are multiplied in place */
int64_t few_tokens; /* quant_torch.FEW_TOKENS */

/* A contiguous float32 CPU tensor of the plain classes, with no autograd to record (glue_torch.plain) */
const at::Tensor *plain(PyObject *o) {
    if (Py_TYPE(o) != (PyTypeObject *)tensor_class && Py_TYPE(o) != (PyTypeObject *)parameter_class) return nullptr;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (t.layout() != at::kStrided || t.scalar_type() != at::kFloat || !t.device().is_cpu() || !t.is_contiguous())
        return nullptr;
    if (t.requires_grad() && c10::GradMode::is_enabled()) return nullptr;
    return &t;
}

/* plain(*tensors): whether each is a tensor `plain` takes (glue_torch.plain's question, from C++) */
PyObject *plain_all(PyObject *, PyObject *const *args, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!plain(args[i])) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* The kernel plan of weight o for few tokens of k entries: a QuantWeight's own (its `_cplan`, 0 until
 * it may be read: not packed yet, or no kernel), or one made here for a plain 2-D float32 tensor read
 * in place (quant_torch._few_token_plan). False where neither applies. */
bool weight_of(PyObject *o, int64_t k, Weight *out) {
    if (Py_TYPE(o) == (PyTypeObject *)quant_class) {
        PyObject *a = PyObject_GetAttr(o, plan_name);
        if (!a) {
            PyErr_Clear();
            return false;
        }
        const uintptr_t at = PyLong_Check(a) ? (uintptr_t)PyLong_AsUnsignedLongLong(a) : 0;
        Py_DECREF(a);
        if (PyErr_Occurred()) PyErr_Clear();
        if (!at) return false;
        *out = *(const Weight *)at;
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
    return THPVariable_Wrap(std::move(y));
}

/* linear(x, W): x [..., K] · Wᵀ → [..., N] for few tokens, or None */
PyObject *linear(PyObject *, PyObject *const *args, Py_ssize_t n) {
    int64_t k, t;
    Weight w;
    if (n != 2) Py_RETURN_NONE;
    const at::Tensor *x = plain(args[0]);
    if (!(t = tokens_of(x, &k)) || !weight_of(args[1], k, &w)) Py_RETURN_NONE;
    at::Tensor y = like(*x, w.n);
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = k_linear(&w, x->const_data_ptr<float>(), t, out_of(y));
    Py_END_ALLOW_THREADS
    if (code != 0) return failed("linear", code);
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

/* gqa(args, Q, K, V, K_cache, V_cache, used[, decline]): glue_torch.gq_attention's call of tc_gqa, the
 * struct at address `args` (its GQAArgs, with everything but these set) completed with the tensors'
 * addresses, the caches' strides, `used` and a new output, which is returned. Where glue_torch has
 * decided that the kernel applies, whatever here does not fit that struct is an error; with `decline`
 * true (its fast path for a pass's later layers, which leaves these checks to this call) it is None,
 * and nothing is written. */
PyObject *gqa(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 7 && n != 8) return refused("gqa takes 7 or 8 arguments");
    const int decline = n == 8 ? PyObject_IsTrue(args[7]) : 0;
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
#undef REFUSED
    at::Tensor out = like(*Q, Q->size(-1));
    a->Q = Q->const_data_ptr<float>(), a->K = K->const_data_ptr<float>(), a->V = V->const_data_ptr<float>();
    a->Kc = Kc->mutable_data_ptr(), a->Vc = Vc->mutable_data_ptr();
    a->kh = Kc->size(-2) * d, a->kb = a->kh * a->Hkv, a->vh = Vc->size(-2) * d, a->vb = a->vh * a->Hkv;
    a->used = used, a->out = out_of(out);
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = k_gqa(a);
    Py_END_ALLOW_THREADS
    if (code != 0) {
        PyErr_Format(PyExc_RuntimeError, "grouped-query attention kernel failed with code %d", code);
        return nullptr;
    }
    return THPVariable_Wrap(std::move(out));
}

/* bind(Tensor, Parameter, (rms_norm, linear, linears, swiglu, gqa addresses), float_direct, few_tokens):
 * what the functions above need, once */
PyObject *bind(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 5 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != 5) {
        PyErr_SetString(PyExc_TypeError, "bind(Tensor, Parameter, (5 addresses), float_direct, few)");
        return nullptr;
    }
    void *f[5];
    for (int i = 0; i < 5; i++) {
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
    k_swiglu = (swiglu_fn)f[3], k_gqa = (gqa_fn)f[4];
    float_direct = direct != 0, few_tokens = few;
    Py_RETURN_NONE;
}

/* weight_class(QuantWeight): the class whose `_cplan` weight_of reads (quant_torch registers it) */
PyObject *weight_class(PyObject *, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "weight_class takes a class");
        return nullptr;
    }
    Py_INCREF(cls);
    Py_XSETREF(quant_class, cls);
    Py_RETURN_NONE;
}

/* The sizes of Weight and GQAArgs, for glue_cpp.py to check against their ctypes mirrors */
PyObject *sizes(PyObject *, PyObject *) { return Py_BuildValue("nn", sizeof(Weight), sizeof(GQAArgs)); }

PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "bind the classes and kernels"},
    {"weight_class", weight_class, METH_O, "the class of weights kept in their blocks"},
    {"sizes", sizes, METH_NOARGS, "the sizes of the structs shared with quant.c"},
    {"plain", (PyCFunction)(void (*)(void))plain_all, METH_FASTCALL, "plain(*tensors): all plain float32 CPU tensors"},
    {"rms_norm", (PyCFunction)(void (*)(void))rms_norm, METH_FASTCALL, "rms_norm(e, gamma, epsilon) or None"},
    {"linear", (PyCFunction)(void (*)(void))linear, METH_FASTCALL, "linear(x, W) or None"},
    {"linears", (PyCFunction)(void (*)(void))linears, METH_FASTCALL, "linears(x, W_1, W_2[, W_3]) or None"},
    {"swiglu", (PyCFunction)(void (*)(void))swiglu, METH_FASTCALL, "swiglu(x, W_gate, W_up, W_down) or None"},
    {"gqa", (PyCFunction)(void (*)(void))gqa, METH_FASTCALL, "gqa(args, Q, K, V, K_cache, V_cache, used[, decline])"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "toycards_glue", "toycards' per-token glue in C++", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_toycards_glue(void) {
    plan_name = PyUnicode_InternFromString("_cplan");
    return plan_name ? PyModule_Create(&module) : nullptr;
}

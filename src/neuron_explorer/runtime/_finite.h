/* The NaN/Inf check of a graph's outputs in C: one pass over each tensor's memory, no temporaries.
 *
 * Included by _fastpath.c (one translation unit, so setup.py compiles one file).
 *
 * A tensor's memory is reached through DLPack's C exchange API (DLPack >= 1.2): the tensor type
 * publishes a capsule ``__dlpack_c_exchange_api__`` holding a table of C functions, one of which
 * fills a caller-owned DLTensor (pointer, device, dtype, shape, strides) without allocating.  The
 * few declarations below are that public, versioned ABI (major version 1), written out so that the
 * extension needs neither torch's headers nor torch at build time.
 *
 * A value is NaN or Inf exactly when all its exponent bits are set (IEEE 754 binary16/32/64 and
 * bfloat16 alike); it is NaN when its mantissa is also non-zero.  So the check reads each element
 * as an unsigned integer of its width: a branch-free pass finds whether anything is non-finite
 * (over contiguous memory, 64 bytes at a time), and only then a second pass counts NaNs and Infs.  Elements are visited logically (an expanded
 * tensor's repeated element counts once per position), as torch.isnan(t).sum() counts them.
 *
 * Anything the C pass does not read -- another device, a tensor subclass, a float type other than
 * float16/bfloat16/float32/float64 (float8, ...), an export the producer refuses -- goes to the
 * ``slow`` Python callable, which answers with torch's own ops.  Integer, bool and complex tensors
 * are skipped, as torch.Tensor.is_floating_point() says.
 */

#include <stdint.h>

typedef struct { uint32_t major, minor; } ne_dl_version;
typedef struct { int32_t device_type; int32_t device_id; } ne_dl_device;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } ne_dl_dtype;
typedef struct {
    void *data;
    ne_dl_device device;
    int32_t ndim;
    ne_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;  /* in elements; NULL means row-major contiguous */
    uint64_t byte_offset;
} ne_dl_tensor;
typedef struct ne_dl_api_header {
    ne_dl_version version;
    struct ne_dl_api_header *prev_api;
} ne_dl_api_header;
typedef struct {
    ne_dl_api_header header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, ne_dl_tensor *out);
    void *current_work_stream;
} ne_dl_api;

#define NE_DL_CPU 1
#define NE_MAX_DIMS 64

enum { SCAN_SKIP, SCAN_C, SCAN_SLOW };

typedef struct {
    int width;     /* bytes per element: 2, 4 or 8 */
    uint64_t exp;  /* the exponent bits */
    uint64_t man;  /* the mantissa bits */
} fp_layout;

/* What to do with a tensor of this DLPack dtype (and its bit layout when C reads it). */
static int
layout_of(ne_dl_dtype t, fp_layout *l)
{
    if (t.lanes != 1)
        return SCAN_SLOW;
    switch (t.code) {
    case 0: case 1: case 5: case 6:  /* int, uint, complex, bool: not floating point */
        return SCAN_SKIP;
    case 2:  /* IEEE float */
        if (t.bits == 16) { *l = (fp_layout){2, 0x7C00u, 0x03FFu}; return SCAN_C; }
        if (t.bits == 32) { *l = (fp_layout){4, 0x7F800000u, 0x007FFFFFu}; return SCAN_C; }
        if (t.bits == 64) { *l = (fp_layout){8, 0x7FF0000000000000ull, 0x000FFFFFFFFFFFFFull}; return SCAN_C; }
        return SCAN_SLOW;
    case 4:  /* bfloat16 */
        if (t.bits == 16) { *l = (fp_layout){2, 0x7F80u, 0x007Fu}; return SCAN_C; }
        return SCAN_SLOW;
    default:  /* float8/6/4 and anything newer: torch's ops know their encodings */
        return SCAN_SLOW;
    }
}

/* Whether any of n contiguous elements is NaN or Inf, read as 64-bit words of 8/width elements
 * each.  In every one of these formats the exponent sits right below the sign bit, so adding the
 * exponent's lowest bit to (x & exp) reaches the sign bit exactly when all exponent bits are set,
 * and never carries into the next element.  Only ands, adds and ors, 64 bytes at a time into four
 * accumulators of a GCC/Clang vector type (SSE2 registers on any x86-64, NEON on arm64): the
 * element-wise compare loop stayed scalar at -O2 and read one element a cycle.  The last
 * n*width % 64 bytes are read a word at a time, the final partial word into a zeroed one (a zero
 * element is finite). */
typedef uint64_t ne_u64x2 __attribute__((vector_size(16)));
#define NE_CHUNKS_PER_BLOCK 8 /* 512 bytes between looks at the accumulators */

static int
any_nonfinite(const char *p, int64_t n, const fp_layout *l)
{
    uint64_t e = l->exp, lsb = e & (~e + 1), top = e + lsb;
    for (int k = l->width; k < 8; k *= 2) {
        e |= e << (8 * k);
        lsb |= lsb << (8 * k);
        top |= top << (8 * k);
    }
    const ne_u64x2 ve = {e, e}, vl = {lsb, lsb};
    const int64_t bytes = n * l->width, chunks = bytes / 64;
    int64_t i = 0;
    ne_u64x2 a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0, x0, x1, x2, x3;
    while (i < chunks) {
        const int64_t end = chunks - i < NE_CHUNKS_PER_BLOCK ? chunks : i + NE_CHUNKS_PER_BLOCK;
        for (; i < end; i++) {
            const char *q = p + i * 64;
            memcpy(&x0, q, 16);
            memcpy(&x1, q + 16, 16);
            memcpy(&x2, q + 32, 16);
            memcpy(&x3, q + 48, 16);
            a0 |= (x0 & ve) + vl;
            a1 |= (x1 & ve) + vl;
            a2 |= (x2 & ve) + vl;
            a3 |= (x3 & ve) + vl;
        }
        const ne_u64x2 a = a0 | a1 | a2 | a3;
        if ((a[0] | a[1]) & top)
            return 1;
    }
    uint64_t rest = 0;
    for (int64_t off = chunks * 64; off < bytes; off += 8) {
        uint64_t x = 0;
        memcpy(&x, p + off, (size_t)(bytes - off < 8 ? bytes - off : 8));
        rest |= (x & e) + lsb;
    }
    return (rest & top) != 0;
}

/* n elements of type T, `step` bytes apart: first whether any is non-finite (no branch in the
 * loop), then, only if so, the counts. */
#define NE_DEFINE_RUN(NAME, T)                                                                       \
    static void NAME(const char *p, int64_t n, int64_t step, const fp_layout *l,                    \
                     long long *nan, long long *inf)                                                 \
    {                                                                                                \
        const T e = (T)l->exp, m = (T)l->man;                                                        \
        T x;                                                                                         \
        int bad = 0;                                                                                 \
        if (step == (int64_t)sizeof(T)) {                                                            \
            bad = any_nonfinite(p, n, l);                                                            \
        }                                                                                            \
        else {                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                        \
                memcpy(&x, p + i * step, sizeof(T));                                                 \
                bad |= (x & e) == e;                                                                 \
            }                                                                                        \
        }                                                                                            \
        if (!bad)                                                                                    \
            return;                                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                            \
            memcpy(&x, p + i * step, sizeof(T));                                                     \
            if ((x & e) == e) {                                                                      \
                if (x & m)                                                                           \
                    (*nan)++;                                                                        \
                else                                                                                 \
                    (*inf)++;                                                                        \
            }                                                                                        \
        }                                                                                            \
    }

NE_DEFINE_RUN(run16, uint16_t)
NE_DEFINE_RUN(run32, uint32_t)
NE_DEFINE_RUN(run64, uint64_t)

static void
scan_run(const char *p, int64_t n, int64_t step, const fp_layout *l, long long *nan, long long *inf)
{
    if (l->width == 2)
        run16(p, n, step, l, nan, inf);
    else if (l->width == 4)
        run32(p, n, step, l, nan, inf);
    else
        run64(p, n, step, l, nan, inf);
}

/* Count a CPU tensor's NaNs and Infs into *nan and *inf; 0, or -1 when C does not read it (the
 * caller then takes the slow path). */
static int
scan_dl(const ne_dl_tensor *t, const fp_layout *l, long long *nan, long long *inf)
{
    int nd = t->ndim;
    if (nd < 0 || nd > NE_MAX_DIMS || (nd > 0 && t->shape == NULL))
        return -1;
    int64_t numel = 1;
    int contiguous = 1;
    int64_t expect = 1;  /* the row-major stride of the dimension looked at */
    for (int i = nd - 1; i >= 0; i--) {
        int64_t s = t->shape[i];
        if (s < 0)
            return -1;
        if (s == 0)
            return 0;  /* empty: nothing to check */
        if (t->strides != NULL && s != 1 && t->strides[i] != expect)
            contiguous = 0;
        expect *= s;
        if (numel > INT64_MAX / s)
            return -1;
        numel *= s;
    }
    const char *base = (const char *)t->data + t->byte_offset;
    const int64_t w = l->width;
    if (contiguous || nd == 0) {
        scan_run(base, numel, w, l, nan, inf);
        return 0;
    }
    /* strided: the innermost dimension is one run; an index walks the outer ones */
    int64_t idx[NE_MAX_DIMS] = {0};
    const int64_t inner = t->shape[nd - 1], inner_step = t->strides[nd - 1] * w;
    for (;;) {
        int64_t off = 0;
        for (int i = 0; i < nd - 1; i++)
            off += idx[i] * t->strides[i];
        scan_run(base + off * w, inner, inner_step, l, nan, inf);
        int i = nd - 2;
        while (i >= 0 && ++idx[i] == t->shape[i])
            idx[i--] = 0;
        if (i < 0)
            break;
    }
    return 0;
}

/* ---- NanScanner: scan(outputs) -> (nan, inf) ---------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyTypeObject *tensor_type;  /* torch.Tensor: only its exact instances go through DLPack */
    PyObject *api_capsule;      /* keeps the table alive (it is static in torch anyway) */
    const ne_dl_api *api;       /* NULL: every tensor takes the slow path */
    PyObject *slow;             /* slow(tensor) -> (nan, inf) */
} NanScanner;

static int
slow_one(NanScanner *s, PyObject *t, long long *nan, long long *inf)
{
    PyObject *r = PyObject_CallOneArg(s->slow, t);
    if (r == NULL)
        return -1;
    long long a = -1, b = -1;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
        a = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 0));
        b = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 1));
    }
    Py_DECREF(r);
    if (PyErr_Occurred())
        return -1;
    if (a < 0 || b < 0) {
        PyErr_SetString(PyExc_ValueError, "NanScanner: slow(t) must return (nan count, inf count)");
        return -1;
    }
    *nan += a;
    *inf += b;
    return 0;
}

static int
scan_one(NanScanner *s, PyObject *t, long long *nan, long long *inf)
{
    if (Py_TYPE(t) == s->tensor_type && s->api != NULL) {
        ne_dl_tensor dl;
        if (s->api->dltensor_from_py_object_no_sync(t, &dl) == 0) {
            fp_layout l;
            int what = dl.device.device_type == NE_DL_CPU ? layout_of(dl.dtype, &l) : SCAN_SLOW;
            if (what == SCAN_SKIP)
                return 0;
            if (what == SCAN_C && scan_dl(&dl, &l, nan, inf) == 0)
                return 0;
        }
        else {
            PyErr_Clear();  /* refused (sparse, ...): torch's ops decide */
        }
        return slow_one(s, t, nan, inf);
    }
    if (PyObject_TypeCheck(t, s->tensor_type))
        return slow_one(s, t, nan, inf);
    return 0;  /* not a tensor */
}

/* How far the scan walks nested containers: deeper levels, and containers past the budget (a
 * list holding itself, a huge tree), are not read.  A module's outputs are a few levels at most. */
#define NE_SCAN_DEPTH 32
#define NE_SCAN_CONTAINERS 4096

/* The counts over `o` and what it holds: a tensor, or tuples, lists and dict values nested to
 * NE_SCAN_DEPTH levels (*budget: the containers still allowed).  Items are read through a new
 * reference each: the slow path runs Python code, which may change a list or dict meanwhile. */
static int
scan_tree(NanScanner *s, PyObject *o, long long *nan, long long *inf, int depth, int *budget)
{
    int is_dict = PyDict_Check(o);
    if (!is_dict && !PyList_Check(o) && !PyTuple_Check(o))
        return scan_one(s, o, nan, inf);
    if (depth >= NE_SCAN_DEPTH || *budget <= 0)
        return 0;
    (*budget)--;
    PyObject *items = is_dict ? PyDict_Values(o) : (Py_INCREF(o), o);  /* (values: a new list) */
    if (items == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(items); i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(items, i);
        Py_INCREF(x);
        rc = scan_tree(s, x, nan, inf, depth + 1, budget);
        Py_DECREF(x);
    }
    Py_DECREF(items);
    return rc;
}

/* The NaN and Inf counts over a graph's outputs: a tensor, or tensors in tuples, lists and dicts
 * (a compiled graph returns a flat list or tuple; an eager module anything, such as a tuple of
 * tuples or a dict of tensors); 0, or -1 with an exception set. */
static int
scan_outputs(NanScanner *s, PyObject *outs, long long *nan, long long *inf)
{
    int budget = NE_SCAN_CONTAINERS;
    *nan = *inf = 0;
    return scan_tree(s, outs, nan, inf, 0, &budget);
}

static PyObject *
ns_call(NanScanner *s, PyObject *args, PyObject *kwds)
{
    PyObject *outs;
    if (!PyArg_ParseTuple(args, "O:NanScanner", &outs))
        return NULL;
    long long nan, inf;
    if (scan_outputs(s, outs, &nan, &inf) < 0)
        return NULL;
    return Py_BuildValue("(LL)", nan, inf);
}

static PyObject *
ns_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"tensor_type", "api", "slow", NULL};
    PyObject *tt, *api = Py_None, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO:NanScanner", kwlist, &PyType_Type, &tt, &api, &slow))
        return NULL;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "NanScanner: slow must be callable");
        return NULL;
    }
    const ne_dl_api *table = NULL;
    if (api != Py_None) {
        table = PyCapsule_GetPointer(api, "dlpack_exchange_api");
        if (table == NULL)
            return NULL;
        /* only a major version we know, and only if the non-owning export exists */
        if (table->header.version.major != 1 || table->header.version.minor < 2 ||
                table->dltensor_from_py_object_no_sync == NULL)
            table = NULL;
    }
    NanScanner *s = (NanScanner *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    Py_INCREF(tt);
    s->tensor_type = (PyTypeObject *)tt;
    Py_INCREF(api);
    s->api_capsule = api;
    s->api = table;
    Py_INCREF(slow);
    s->slow = slow;
    return (PyObject *)s;
}

static PyObject *
ns_uses_c(NanScanner *s, void *closure)
{
    return PyBool_FromLong(s->api != NULL);
}

static int
ns_traverse(NanScanner *s, visitproc visit, void *arg)
{
    Py_VISIT(s->tensor_type);
    Py_VISIT(s->api_capsule);
    Py_VISIT(s->slow);
    return 0;
}

static int
ns_clear(NanScanner *s)
{
    Py_CLEAR(s->tensor_type);
    Py_CLEAR(s->api_capsule);
    Py_CLEAR(s->slow);
    return 0;
}

static void
ns_dealloc(NanScanner *s)
{
    PyObject_GC_UnTrack(s);
    ns_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyGetSetDef ns_getset[] = {
    {"reads_memory", (getter)ns_uses_c, NULL, "whether CPU float tensors are read in C (else all go to slow)", NULL},
    {NULL},
};

static PyTypeObject NanScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.NanScanner",
    .tp_basicsize = sizeof(NanScanner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "NanScanner(tensor_type, api, slow): scanner(outputs) -> (nan count, inf count)",
    .tp_new = ns_new,
    .tp_call = (ternaryfunc)ns_call,
    .tp_dealloc = (destructor)ns_dealloc,
    .tp_traverse = (traverseproc)ns_traverse,
    .tp_clear = (inquiry)ns_clear,
    .tp_getset = ns_getset,
};

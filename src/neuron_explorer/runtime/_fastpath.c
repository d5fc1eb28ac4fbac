/* The execution hot path in C: the wrapper around a compiled graph that records one execution
 * per call.
 *
 * It does what the pure-Python wrapper in integrations/torch_hooks.py (_wrap_execution, the lean
 * ``run``) does, without a Python frame of its own: two CLOCK_MONOTONIC reads (the clock of
 * time.perf_counter_ns), the OS thread id cached in thread-local storage, the next execution id
 * from the ring's itertools.count, one 9-tuple and one deque append.  The graph is called with
 * the caller's vectorcall arguments as they are, so no tuple or dict is built for them.
 *
 * Everything that is not the common case stays in Python and is reached through callables the
 * wrapper is given: the general path (NDET, NaN checks, device profiles), taken whenever the
 * runtime has a device profiler on; the neuron-monitor feed; and the one-time search for the
 * graph's backward.  Built by hatch_build.py; when it is missing the Python wrapper is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- clock and thread id ------------------------------------------------------------------ */

static __thread long tls_tid;  /* 0 until the thread's first event */

static void
forget_tid(void)
{
    tls_tid = 0;  /* a forked child's only thread is not its parent's thread */
}

static inline long
thread_id(void)
{
    long t = tls_tid;
    if (t == 0) {
        t = (long)syscall(SYS_gettid);
        tls_tid = t;
    }
    return t;
}

static inline long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the wrapper ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;        /* the compiled graph */
    PyObject *append;    /* the ring's deque.append */
    PyObject *counter;   /* the ring's execution ids (itertools.count) */
    PyObject *head;      /* the record's first field: EXEC_PAIR */
    PyObject *mid;       /* the model id */
    PyObject *runtime;   /* whose ``devprof`` attribute selects the general path */
    PyObject *general;   /* called with the same arguments when devprof is not None */
    PyObject *stats;     /* stats(record) after the append, or NULL */
    PyObject *backward;  /* backward(out) -> true once it need not be called again, or NULL */
    PyObject *dict;      /* attributes set by the integration (__wrapped__, _boxed_call, ...) */
} ExecWrapper;

static PyObject *str_devprof;
static PyObject *small_zero;
static PyObject *small_one;

/* Build and append the record; returns 0, or -1 with an exception set. */
static int
record(ExecWrapper *self, long long t0, long long t1, PyObject *ret)
{
    PyObject *eid = Py_TYPE(self->counter)->tp_iternext(self->counter);
    if (eid == NULL)
        return -1;
    PyObject *rec = PyTuple_New(9);
    if (rec == NULL) {
        Py_DECREF(eid);
        return -1;
    }
    PyObject *a = PyLong_FromLongLong(t0);
    PyObject *b = PyLong_FromLongLong(t1);
    PyObject *c = PyLong_FromLong(thread_id());
    if (a == NULL || b == NULL || c == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_DECREF(eid);
        Py_DECREF(rec);
        return -1;
    }
    Py_INCREF(self->head);
    PyTuple_SET_ITEM(rec, 0, self->head);
    PyTuple_SET_ITEM(rec, 1, a);
    PyTuple_SET_ITEM(rec, 2, b);
    PyTuple_SET_ITEM(rec, 3, c);
    Py_INCREF(self->mid);
    PyTuple_SET_ITEM(rec, 4, self->mid);
    PyTuple_SET_ITEM(rec, 5, eid);
    Py_INCREF(ret);
    PyTuple_SET_ITEM(rec, 6, ret);
    Py_INCREF(small_zero);
    PyTuple_SET_ITEM(rec, 7, small_zero);
    Py_INCREF(small_zero);
    PyTuple_SET_ITEM(rec, 8, small_zero);
    PyObject *r = PyObject_CallOneArg(self->append, rec);
    if (r == NULL) {
        Py_DECREF(rec);
        return -1;
    }
    Py_DECREF(r);
    if (self->stats != NULL) {
        r = PyObject_CallOneArg(self->stats, rec);
        if (r == NULL) {
            Py_DECREF(rec);
            return -1;
        }
        Py_DECREF(r);
    }
    Py_DECREF(rec);
    return 0;
}

static PyObject *
ew_call(ExecWrapper *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *dp = PyObject_GetAttr(self->runtime, str_devprof);
    if (dp == NULL)
        return NULL;
    int general = dp != Py_None;
    Py_DECREF(dp);
    if (general)
        return PyObject_Vectorcall(self->general, args, nargsf, kwnames);

    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    if (out == NULL) {
        /* record the failed call, then let its exception through unchanged */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (record(self, t0, now_ns(), small_one) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    long long t1 = now_ns();
    if (record(self, t0, t1, small_zero) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (self->backward != NULL) {
        PyObject *r = PyObject_CallOneArg(self->backward, out);
        if (r == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        int done = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (done > 0)
            Py_CLEAR(self->backward);
    }
    return out;
}

static PyObject *
ew_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "append", "counter", "head", "mid", "runtime", "general", "stats",
                             "backward", NULL};
    PyObject *fn, *append, *counter, *head, *mid, *runtime, *general, *stats = Py_None, *backward = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO|OO:ExecWrapper", kwlist, &fn, &append, &counter,
                                     &head, &mid, &runtime, &general, &stats, &backward))
        return NULL;
    if (Py_TYPE(counter)->tp_iternext == NULL || !PyCallable_Check(fn) || !PyCallable_Check(append) ||
            !PyCallable_Check(general)) {
        PyErr_SetString(PyExc_TypeError, "ExecWrapper: fn, append and general must be callable and counter an iterator");
        return NULL;
    }
    ExecWrapper *self = (ExecWrapper *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)ew_call;
#define KEEP(field, value) do { Py_INCREF(value); self->field = (value); } while (0)
    KEEP(fn, fn);
    KEEP(append, append);
    KEEP(counter, counter);
    KEEP(head, head);
    KEEP(mid, mid);
    KEEP(runtime, runtime);
    KEEP(general, general);
    if (stats != Py_None)
        KEEP(stats, stats);
    if (backward != Py_None)
        KEEP(backward, backward);
#undef KEEP
    return (PyObject *)self;
}

static int
ew_traverse(ExecWrapper *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->append);
    Py_VISIT(self->counter);
    Py_VISIT(self->head);
    Py_VISIT(self->mid);
    Py_VISIT(self->runtime);
    Py_VISIT(self->general);
    Py_VISIT(self->stats);
    Py_VISIT(self->backward);
    Py_VISIT(self->dict);
    return 0;
}

static int
ew_clear(ExecWrapper *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->append);
    Py_CLEAR(self->counter);
    Py_CLEAR(self->head);
    Py_CLEAR(self->mid);
    Py_CLEAR(self->runtime);
    Py_CLEAR(self->general);
    Py_CLEAR(self->stats);
    Py_CLEAR(self->backward);
    Py_CLEAR(self->dict);
    return 0;
}

static void
ew_dealloc(ExecWrapper *self)
{
    PyObject_GC_UnTrack(self);
    ew_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ew_pending_backward(ExecWrapper *self, void *closure)
{
    return PyBool_FromLong(self->backward != NULL);
}

static PyObject *
ew_repr(ExecWrapper *self)
{
    return PyUnicode_FromFormat("<neuron-explorer execution wrapper of %R>", self->fn);
}

static PyMemberDef ew_members[] = {
    {"fn", T_OBJECT, offsetof(ExecWrapper, fn), READONLY, "the wrapped graph"},
    {NULL},
};

static PyGetSetDef ew_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"backward_pending", (getter)ew_pending_backward, NULL, "whether the backward is still looked for", NULL},
    {NULL},
};

static PyTypeObject ExecWrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.ExecWrapper",
    .tp_basicsize = sizeof(ExecWrapper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "ExecWrapper(fn, append, counter, head, mid, runtime, general, stats=None, backward=None)\n"
              "Calls fn and appends (head, t0, t1, tid, mid, next(counter), ret, 0, 0) per call.",
    .tp_new = ew_new,
    .tp_dealloc = (destructor)ew_dealloc,
    .tp_traverse = (traverseproc)ew_traverse,
    .tp_clear = (inquiry)ew_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(ExecWrapper, vectorcall),
    .tp_dictoffset = offsetof(ExecWrapper, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_members = ew_members,
    .tp_getset = ew_getset,
    .tp_repr = (reprfunc)ew_repr,
};

/* ---- module ------------------------------------------------------------------------------- */

static PyObject *
fp_now_ns(PyObject *mod, PyObject *unused)
{
    return PyLong_FromLongLong(now_ns());
}

static PyObject *
fp_thread_id(PyObject *mod, PyObject *unused)
{
    return PyLong_FromLong(thread_id());
}

static PyMethodDef fp_methods[] = {
    {"now_ns", fp_now_ns, METH_NOARGS, "CLOCK_MONOTONIC in nanoseconds (what the wrapper stamps)"},
    {"thread_id", fp_thread_id, METH_NOARGS, "the OS thread id the wrapper records"},
    {NULL},
};

static struct PyModuleDef fp_module = {
    PyModuleDef_HEAD_INIT, "_fastpath", "The execution hot path in C (see _fastpath.c).", -1, fp_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&ExecWrapperType) < 0)
        return NULL;
    str_devprof = PyUnicode_InternFromString("devprof");
    small_zero = PyLong_FromLong(0);
    small_one = PyLong_FromLong(1);
    if (str_devprof == NULL || small_zero == NULL || small_one == NULL)
        return NULL;
    if (pthread_atfork(NULL, NULL, forget_tid) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
    PyObject *m = PyModule_Create(&fp_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ExecWrapperType);
    if (PyModule_AddObject(m, "ExecWrapper", (PyObject *)&ExecWrapperType) < 0) {
        Py_DECREF(&ExecWrapperType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

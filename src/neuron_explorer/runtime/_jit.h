/* The call of a ``jax.jit`` stand-in in C (included by _fastpath.c; integrations/jax/jit.py makes
 * one per jitted function and puts it in the stand-in's class as ``__call__``).
 *
 * JitCall(fn, ring, counter, head, mid_box, gate, level, top, compiles, slow, record_compiled,
 * stats=None) does what ``_Jit.make_call``'s Python closure does, without a Python frame, an
 * argument tuple of its own or a record tuple:
 *
 *   - ``gate[0] is not None`` (a first call, NDET, a device profile) or ``level.value is not top``
 *     (JAX is tracing: the call is staged out, not run): ``slow(args, kwargs)``, kwargs a dict;
 *   - else t0, ``fn(*args, **kwargs)`` with the caller's vectorcall arguments as they are, t1;
 *     when ``compiles`` (JAX's compile spans, appended by its listener) is not empty, JAX compiled
 *     in the call: ``record_compiled(t0, t1, ret)``; else the execution's row
 *     (head, t0, t1, thread, mid_box[0], next(counter), ret, 0, 0) goes into the ring and to
 *     ``stats`` (neuron-monitor's feed: the row itself when it is a 9-wide RingBuffer's append);
 *   - a call that raises is recorded with ret 1 and its exception reaches the caller unchanged (a
 *     failure to record it is dropped, as in ExecWrapper).
 *
 * Nothing here reads ew_paused: the Python closure never did either. */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;              /* the PjitFunction */
    RingBuffer *ring;          /* the core's capture ring */
    PyObject *counter;         /* the ring's execution ids */
    long long head;            /* EXEC_PAIR */
    PyObject *mid_box;         /* [model id]: set by the first call */
    PyObject *gate;            /* [None] while the lean path may run */
    PyObject *level;           /* JAX's thread-local trace state: .value */
    PyObject *top;             /* .value at the top level */
    PyObject *compiles;        /* list of compile spans not yet taken */
    PyObject *slow;            /* slow(args, kwargs) */
    PyObject *record_compiled; /* record_compiled(t0, t1, ret) */
    PyObject *stats;           /* stats(record), or NULL */
    RingBuffer *stats_ring;    /* stats' ring when stats is a 9-wide RingBuffer's append (stats holds it) */
} JitCall;

static PyObject *jc_str_value;  /* "value" */

/* The arguments as (tuple, dict), for the Python paths. */
static PyObject *
jc_slow(JitCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    PyObject *tuple = PyTuple_New(n);
    PyObject *kwargs = PyDict_New();
    PyObject *out = NULL;
    if (tuple == NULL || kwargs == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[n + i]) < 0)
                goto done;
        }
    }
    out = PyObject_CallFunctionObjArgs(self->slow, tuple, kwargs, NULL);
done:
    Py_XDECREF(tuple);
    Py_XDECREF(kwargs);
    return out;
}

/* The execution's row in the ring and the monitor's feed; 0, or -1 with an exception set. */
static int
jc_record(JitCall *self, long long t0, long long t1, long long ret)
{
    long long eid;
    long long mid = as_ns(PyList_GET_ITEM(self->mid_box, 0));
    if (mid == -1 && PyErr_Occurred())
        return -1;
    long long tid = thread_id();
    if (next_id(self->counter, &eid) < 0)
        return -1;
    long long v[WIDTH] = {self->head, t0, t1, tid, mid, eid, ret, 0, 0};
    if (ring_push(self->ring, v) < 0)
        return -1;
    return push_stats(self->stats, self->stats_ring, v);
}

/* record_compiled(t0, t1, ret); 0, or -1 with an exception set. */
static int
jc_record_compiled(JitCall *self, long long t0, long long t1, long long ret)
{
    PyObject *r = PyObject_CallFunction(self->record_compiled, "LLL", t0, t1, ret);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *
jc_call(JitCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyList_GET_ITEM(self->gate, 0) != Py_None)
        return jc_slow(self, args, nargsf, kwnames);
    PyObject *trace = PyObject_GetAttr(self->level, jc_str_value);
    if (trace == NULL)
        return NULL;
    Py_DECREF(trace);  /* (only its identity is compared; JAX holds it) */
    if (trace != self->top)
        return jc_slow(self, args, nargsf, kwnames);
    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    long long t1 = now_ns();
    int compiled = PyList_GET_SIZE(self->compiles) != 0;
    if (out == NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if ((compiled ? jc_record_compiled(self, t0, t1, 1) : jc_record(self, t0, t1, 1)) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    if ((compiled ? jc_record_compiled(self, t0, t1, 0) : jc_record(self, t0, t1, 0)) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *
jc_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "ring", "counter", "head", "mid_box", "gate", "level", "top", "compiles",
                             "slow", "record_compiled", "stats", NULL};
    PyObject *fn, *ring, *counter, *mid_box, *gate, *level, *top, *compiles, *slow, *record_compiled;
    PyObject *stats = Py_None;
    long long head;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OLO!O!OOO!OO|O:JitCall", kwlist, &fn, &RingBufferType, &ring,
                                     &counter, &head, &PyList_Type, &mid_box, &PyList_Type, &gate, &level, &top,
                                     &PyList_Type, &compiles, &slow, &record_compiled, &stats))
        return NULL;
    if (((RingBuffer *)ring)->width != WIDTH) {
        PyErr_Format(PyExc_ValueError, "JitCall: the capture ring must be %d wide", WIDTH);
        return NULL;
    }
    /* gate and mid_box are read as gate[0] and mid_box[0]: lists that hold one item, always
     * (the Python side only assigns their item) */
    if (PyList_GET_SIZE(mid_box) != 1 || PyList_GET_SIZE(gate) != 1 || !PyList_CheckExact(mid_box) ||
            !PyList_CheckExact(gate) || !PyList_CheckExact(compiles)) {
        PyErr_SetString(PyExc_TypeError, "JitCall: mid_box and gate must be one-item lists, compiles a list");
        return NULL;
    }
    if (Py_TYPE(counter)->tp_iternext == NULL || !PyCallable_Check(fn) || !PyCallable_Check(slow) ||
            !PyCallable_Check(record_compiled) || (stats != Py_None && !PyCallable_Check(stats))) {
        PyErr_SetString(PyExc_TypeError, "JitCall: fn, slow, record_compiled and stats must be callable, "
                                         "counter an iterator");
        return NULL;
    }
    JitCall *self = (JitCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)jc_call;
    self->head = head;
#define KEEP(field, value) do { Py_INCREF(value); self->field = (value); } while (0)
    KEEP(fn, fn);
    Py_INCREF(ring);
    self->ring = (RingBuffer *)ring;
    KEEP(counter, counter);
    KEEP(mid_box, mid_box);
    KEEP(gate, gate);
    KEEP(level, level);
    KEEP(top, top);
    KEEP(compiles, compiles);
    KEEP(slow, slow);
    KEEP(record_compiled, record_compiled);
    if (stats != Py_None) {
        KEEP(stats, stats);
        self->stats_ring = stats_ring_of(stats);
    }
#undef KEEP
    return (PyObject *)self;
}

static int
jc_traverse(JitCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->ring);
    Py_VISIT(self->counter);
    Py_VISIT(self->mid_box);
    Py_VISIT(self->gate);
    Py_VISIT(self->level);
    Py_VISIT(self->top);
    Py_VISIT(self->compiles);
    Py_VISIT(self->slow);
    Py_VISIT(self->record_compiled);
    Py_VISIT(self->stats);
    return 0;
}

static int
jc_clear(JitCall *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->ring);
    Py_CLEAR(self->counter);
    Py_CLEAR(self->mid_box);
    Py_CLEAR(self->gate);
    Py_CLEAR(self->level);
    Py_CLEAR(self->top);
    Py_CLEAR(self->compiles);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->record_compiled);
    self->stats_ring = NULL;
    Py_CLEAR(self->stats);
    return 0;
}

static void
jc_dealloc(JitCall *self)
{
    PyObject_GC_UnTrack(self);
    jc_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
jc_repr(JitCall *self)
{
    return PyUnicode_FromFormat("<neuron-explorer jax.jit call of %R>", self->fn);
}

static PyMemberDef jc_members[] = {
    {"fn", T_OBJECT, offsetof(JitCall, fn), READONLY, "the PjitFunction called"},
    {NULL},
};

static PyTypeObject JitCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.JitCall",
    .tp_basicsize = sizeof(JitCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "JitCall(fn, ring, counter, head, mid_box, gate, level, top, compiles, slow, record_compiled, "
              "stats=None)\nThe recording call of a jax.jit stand-in (see _jit.h).",
    .tp_new = jc_new,
    .tp_dealloc = (destructor)jc_dealloc,
    .tp_traverse = (traverseproc)jc_traverse,
    .tp_clear = (inquiry)jc_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(JitCall, vectorcall),
    .tp_members = jc_members,
    .tp_repr = (reprfunc)jc_repr,
};

/* Ready the type and add it to the module; -1 with an exception set. */
static int
jit_add_types(PyObject *m)
{
    jc_str_value = PyUnicode_InternFromString("value");
    if (jc_str_value == NULL || PyType_Ready(&JitCallType) < 0)
        return -1;
    Py_INCREF(&JitCallType);
    if (PyModule_AddObject(m, "JitCall", (PyObject *)&JitCallType) < 0) {
        Py_DECREF(&JitCallType);
        return -1;
    }
    return 0;
}

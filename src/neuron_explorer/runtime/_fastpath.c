/* The execution hot path in C: the wrapper around a compiled graph that records one execution
 * per call.
 *
 * It does what the pure-Python wrapper in integrations/torch/execution.py (_lean_wrapper, its
 * ``run``) does, without a Python frame of its own: two CLOCK_MONOTONIC reads (the clock of
 * time.perf_counter_ns), the OS thread id cached in thread-local storage, the next execution id
 * from the ring's itertools.count, and one row written to the ring.  The graph is called with the
 * caller's vectorcall arguments as they are, so no tuple or dict is built for them.
 *
 * Records go into RingBuffer, a bounded circular buffer of fixed-width int64 rows: the wrapper
 * writes its nine fields straight into it (no tuple, no int objects), Python producers append
 * tuples, and a drain hands the rows out as one bytes block that numpy views without conversion.
 *
 * Everything that is not the common case stays in Python and is reached through callables the
 * wrapper is given: the general path (NDET, NaN checks, device profiles), taken whenever the
 * runtime has a device profiler on; the neuron-monitor feed; and the one-time search for the
 * graph's backward.  Built by setup.py; when it is missing the Python wrapper is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
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

/* ---- the ring --------------------------------------------------------------------------------- */

#define WIDTH 9      /* events.RECORD_WIDTH: the capture ring's rows */
#define MAX_WIDTH 16 /* rows of other rings (NDET's are 11 wide) */

typedef struct {
    PyObject_HEAD
    long long *rows;     /* alloc rows of width values, used circularly */
    Py_ssize_t width;    /* values per row */
    Py_ssize_t alloc;    /* rows allocated; grows by doubling up to capacity */
    Py_ssize_t capacity; /* rows kept: the oldest is overwritten beyond it */
    Py_ssize_t first;    /* index of the oldest row */
    Py_ssize_t count;    /* rows held */
    int mapped;          /* rows is a private mapping (ring_rows_resize), not from PyMem_RawMalloc */
} RingBuffer;

/* The rows' storage: from PyMem_RawMalloc while small, a private anonymous mapping from
 * RING_MAP_BYTES on where mremap is there, so that growing a large ring moves its pages instead of
 * copying its bytes (the allocator's realloc copied: ~1 instruction a byte, ~0.4k a compiled step
 * while a long flush period let the ring grow, issue 33).  Rows 0..keep-1 are kept, in place. */
#define RING_MAP_BYTES ((size_t)256 * 1024)

static void
ring_rows_free(RingBuffer *r)
{
#ifdef MREMAP_MAYMOVE
    if (r->mapped) {
        munmap(r->rows, (size_t)r->alloc * r->width * sizeof(long long));
        r->rows = NULL;
        r->mapped = 0;
        return;
    }
#endif
    PyMem_RawFree(r->rows);
    r->rows = NULL;
}

/* Storage for n rows with the first `keep` rows as they were; -1 with MemoryError, the ring
 * unchanged.  Sets rows and alloc. */
static int
ring_rows_resize(RingBuffer *r, Py_ssize_t n, Py_ssize_t keep)
{
    size_t row = (size_t)r->width * sizeof(long long), bytes = (size_t)n * row;
    long long *rows;
#ifdef MREMAP_MAYMOVE
    if (r->mapped || bytes >= RING_MAP_BYTES) {
        void *p;
        if (r->mapped)
            p = mremap(r->rows, (size_t)r->alloc * row, bytes, MREMAP_MAYMOVE);
        else {
            p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED && keep > 0)
                memcpy(p, r->rows, (size_t)keep * row);  /* (once: the block becomes a mapping) */
            if (p != MAP_FAILED)
                PyMem_RawFree(r->rows);
        }
        if (p == MAP_FAILED) {
            PyErr_NoMemory();
            return -1;
        }
        r->rows = p;
        r->mapped = 1;
        r->alloc = n;
        return 0;
    }
#endif
    (void)keep;  /* (realloc keeps them all) */
    rows = PyMem_RawRealloc(r->rows, bytes);
    if (rows == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r->rows = rows;
    r->alloc = n;
    return 0;
}

/* The rows of a ring's first storage: 64, or, for a ring that may hold RING_MAP_BYTES or more, a
 * mapping of that size at once.  Its pages are taken only as rows come, and it grows by mremap, so
 * no growth copies rows (the copies below it cost ~0.3k instructions a compiled step while a long
 * flush period let the ring grow, issue 33). */
static Py_ssize_t
ring_first_rows(const RingBuffer *r)
{
#ifdef MREMAP_MAYMOVE
    size_t row = (size_t)r->width * sizeof(long long);
    Py_ssize_t big = (Py_ssize_t)((RING_MAP_BYTES + row - 1) / row);
    if (r->capacity >= big)
        return big;
#endif
    return 64;
}

/* Append one row (the caller holds the GIL and runs no Python code while here).  Returns -1 on
 * memory exhaustion with an exception set. */
static int
ring_push(RingBuffer *r, const long long *v)
{
    if (r->count == r->alloc) {
        if (r->alloc < r->capacity) {
            Py_ssize_t n = r->alloc ? r->alloc * 2 : ring_first_rows(r);
            if (n > r->capacity)
                n = r->capacity;
            if (r->first != 0) {
                /* (never so: rows are dropped only at capacity, where the ring no longer grows;
                 * ring_take puts first back to 0) the oldest row moved to the front first */
                long long *flat = PyMem_RawMalloc((size_t)r->count * r->width * sizeof(long long));
                if (flat == NULL) {
                    PyErr_NoMemory();
                    return -1;
                }
                Py_ssize_t tail = r->alloc - r->first;  /* rows from first to the end of the buffer */
                memcpy(flat, r->rows + r->first * r->width, (size_t)tail * r->width * sizeof(long long));
                memcpy(flat + tail * r->width, r->rows, (size_t)(r->count - tail) * r->width * sizeof(long long));
                memcpy(r->rows, flat, (size_t)r->count * r->width * sizeof(long long));
                PyMem_RawFree(flat);
                r->first = 0;
            }
            if (ring_rows_resize(r, n, r->count) < 0)
                return -1;
        }
        else {  /* full: drop the oldest */
            r->first = (r->first + 1) % r->alloc;
            r->count--;
        }
    }
    Py_ssize_t at = r->first + r->count;
    if (at >= r->alloc)
        at -= r->alloc;
    if (r->width == WIDTH)  /* (the capture ring's rows: a copy of known size, no call) */
        memcpy(r->rows + at * WIDTH, v, WIDTH * sizeof(long long));
    else
        memcpy(r->rows + at * r->width, v, r->width * sizeof(long long));
    r->count++;
    return 0;
}

/* An int as a long long.  A clock reading (three 30-bit digits) goes through a byte array in
 * PyLong_AsLongLong (~180 instructions), digit by digit in PyLong_AsLong where long has 64 bits;
 * both take __index__ and raise OverflowError alike. */
static inline long long
as_ns(PyObject *t)
{
#if LONG_MAX == LLONG_MAX
    return PyLong_AsLong(t);
#else
    return PyLong_AsLongLong(t);
#endif
}

static PyObject *
ring_append(RingBuffer *r, PyObject *rec)
{
    long long v[MAX_WIDTH];
    PyObject *seq = PySequence_Fast(rec, "a ring record must be a tuple of ints");
    if (seq == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != r->width) {
        PyErr_Format(PyExc_ValueError, "a ring record has %zd fields, not %zd", r->width, PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (int i = 0; i < r->width; i++) {
        v[i] = as_ns(items[i]);  /* (two clock readings in every record) */
        if (v[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    if (ring_push(r, v) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* All rows, oldest first, as one bytes object (native int64s), and the ring emptied. */
static PyObject *
ring_take(RingBuffer *r, PyObject *unused)
{
    Py_ssize_t n = r->count;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * r->width * (Py_ssize_t)sizeof(long long));
    if (out == NULL)
        return NULL;
    if (n == 0)
        return out;  /* (the buffer may not be allocated yet) */
    char *dst = PyBytes_AS_STRING(out);
    Py_ssize_t tail = r->alloc - r->first;
    if (tail > n)
        tail = n;
    memcpy(dst, r->rows + r->first * r->width, (size_t)tail * r->width * sizeof(long long));
    memcpy(dst + tail * r->width * sizeof(long long), r->rows, (size_t)(n - tail) * r->width * sizeof(long long));
    r->first = 0;
    r->count = 0;
    return out;
}

static PyObject *
ring_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"capacity", "width", NULL};
    Py_ssize_t capacity, width = WIDTH;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|n:RingBuffer", kwlist, &capacity, &width))
        return NULL;
    if (capacity < 1 || width < 1 || width > MAX_WIDTH) {
        PyErr_Format(PyExc_ValueError, "RingBuffer needs capacity >= 1 and 1 <= width <= %d", MAX_WIDTH);
        return NULL;
    }
    RingBuffer *r = (RingBuffer *)type->tp_alloc(type, 0);
    if (r != NULL) {
        r->capacity = capacity;
        r->width = width;
    }
    return (PyObject *)r;
}

static void
ring_dealloc(RingBuffer *r)
{
    ring_rows_free(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static Py_ssize_t
ring_len(RingBuffer *r)
{
    return r->count;
}

static PyMethodDef ring_methods[] = {
    {"append", (PyCFunction)ring_append, METH_O, "append(record): one tuple of `width` ints"},
    {"take", (PyCFunction)ring_take, METH_NOARGS, "the rows held, oldest first, as native int64 bytes; empties the ring"},
    {NULL},
};

static PyMemberDef ring_members[] = {
    {"capacity", T_PYSSIZET, offsetof(RingBuffer, capacity), READONLY, "rows kept"},
    {"width", T_PYSSIZET, offsetof(RingBuffer, width), READONLY, "values per row"},
    {NULL},
};

static PySequenceMethods ring_as_sequence = {
    .sq_length = (lenfunc)ring_len,
};

static PyTypeObject RingBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.RingBuffer",
    .tp_basicsize = sizeof(RingBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RingBuffer(capacity, width=9): the newest `capacity` records of `width` int64 fields",
    .tp_new = ring_new,
    .tp_dealloc = (destructor)ring_dealloc,
    .tp_methods = ring_methods,
    .tp_members = ring_members,
    .tp_as_sequence = &ring_as_sequence,
};

/* ---- NDET's in-flight records: a small table of C slots ------------------------------------ */

/* While an execution runs, NDET keeps its begin record where a write can copy it into the log (a
 * hang shows as that record).  The C wrapper puts it in a slot of this table: two stores and a
 * flag, where a dict entry cost two tuples, eleven ints, a hash and a delete per call.  The table
 * is shared by every wrapper of a recorder; when all slots are taken (more executions running at
 * once than NE_SLOTS) the wrapper falls back to the recorder's dict. */

#define NE_SLOTS 32
#define NE_SLOT_WIDTH 11  /* NDET's record width */

typedef struct {
    PyObject_HEAD
    long long rows[NE_SLOTS][NE_SLOT_WIDTH];
    unsigned char used[NE_SLOTS];
} SlotTable;

/* A free slot holding `row` now, or -1 when all are taken (the caller holds the GIL). */
static int
slot_take(SlotTable *t, const long long *row)
{
    for (int i = 0; i < NE_SLOTS; i++) {
        if (!t->used[i]) {
            memcpy(t->rows[i], row, sizeof t->rows[i]);
            t->used[i] = 1;
            return i;
        }
    }
    return -1;
}

/* The records held, as a list of tuples (what the recorder's dict holds as values). */
static PyObject *
slots_records(SlotTable *t, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    for (int i = 0; out != NULL && i < NE_SLOTS; i++) {
        if (!t->used[i])
            continue;
        PyObject *row = PyTuple_New(NE_SLOT_WIDTH);
        for (int j = 0; row != NULL && j < NE_SLOT_WIDTH; j++) {
            PyObject *x = PyLong_FromLongLong(t->rows[i][j]);
            if (x == NULL)
                Py_CLEAR(row);
            else
                PyTuple_SET_ITEM(row, j, x);
        }
        if (row == NULL || PyList_Append(out, row) < 0)
            Py_CLEAR(out);
        Py_XDECREF(row);
    }
    return out;
}

static Py_ssize_t
slots_len(SlotTable *t)
{
    Py_ssize_t n = 0;
    for (int i = 0; i < NE_SLOTS; i++)
        n += t->used[i];
    return n;
}

static PyMethodDef slots_methods[] = {
    {"records", (PyCFunction)slots_records, METH_NOARGS, "the in-flight records held, as tuples of 11 ints"},
    {NULL},
};

static PySequenceMethods slots_as_sequence = {
    .sq_length = (lenfunc)slots_len,
};

static PyTypeObject SlotTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.SlotTable",
    .tp_basicsize = sizeof(SlotTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SlotTable(): NDET's in-flight execution records, written by the C execution wrapper",
    .tp_new = PyType_GenericNew,
    .tp_methods = slots_methods,
    .tp_as_sequence = &slots_as_sequence,
};

#include "_finite.h"

/* ---- the wrapper ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;        /* the compiled graph */
    RingBuffer *ring;    /* where the records go */
    PyObject *counter;   /* the ring's execution ids (a Counter, or itertools.count) */
    long long head_v;    /* the record's first field: EXEC_PAIR */
    long long mid_v;     /* the model id */
    PyObject *devprof;   /* Runtime.devprof_cell: [profiler or None]; a profiler selects the general path */
    PyObject *settled;   /* [the profiler that wants no more of this graph's calls], or NULL */
    PyObject *general;   /* called with the same arguments when devprof is not None */
    PyObject *stats;     /* stats(record) after the append, or NULL */
    RingBuffer *stats_ring; /* stats' ring when stats is a 9-wide RingBuffer's append (borrowed: stats holds it) */
    PyObject *backward;  /* backward(out) -> true once it need not be called again, or NULL */
    PyObject *dict;      /* attributes set by the integration (__wrapped__, _boxed_call, ...) */
    /* NDET (all NULL when it is off); see NdetRecorder.exec_hooks */
    PyObject *inflight;  /* dict: (nc, exec id) -> in-flight record while the call runs */
    RingBuffer *ndet_ring; /* where the ended records go (11 wide) */
    PyObject *opened;    /* the ring's exec_open / exec_close counters (as counter) */
    PyObject *closed;
    long long nc_v;      /* the core index */
    long long kind_exec, state_in_flight;
    SlotTable *slots;    /* where the in-flight record goes (the dict when every slot is taken) */
    /* the NaN/Inf check of the outputs (NULL when off) */
    NanScanner *scan;
    PyObject *numerr;    /* numerr(eid, t0, t1, tid, nan, inf) records a numerical error */
    long long ret_numerr;  /* the execution's ret then (RET_NUM_ERR) */
    int scan_failed;     /* a scan raised once: reported once, then the outputs count as finite */
    PyObject *watch;     /* Ring.watch: thread ident -> [executions recorded on it], or NULL */
} ExecWrapper;


/* A tuple of n ints; NULL with an exception set. */
static PyObject *
tuple_of(const long long *v, int n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* ---- ids ------------------------------------------------------------------------------------ */

/* An itertools.count(start) that the wrapper advances without making an int: the ring's execution
 * ids and NDET's open/close counts are taken on every execution, and three int objects made and
 * freed a call were most of NDET's instructions per execution.  Python code takes ids with
 * next(), reads the next one with .value (its repr is itertools.count's, "count(N)"). */
typedef struct {
    PyObject_HEAD
    long long next;  /* what the next id is */
} Counter;

static int
counter_take(Counter *c, long long *out)
{
    if (c->next == LLONG_MAX) {
        PyErr_SetString(PyExc_OverflowError, "Counter: no ids left");
        return -1;
    }
    *out = c->next++;
    return 0;
}

static PyObject *
counter_next(Counter *c)
{
    long long v;
    return counter_take(c, &v) < 0 ? NULL : PyLong_FromLongLong(v);
}

static PyObject *
counter_repr(Counter *c)
{
    return PyUnicode_FromFormat("count(%lld)", c->next);
}

static PyObject *
counter_value(Counter *c, void *closure)
{
    return PyLong_FromLongLong(c->next);
}

static PyObject *
counter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"start", NULL};
    long long start = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|L:Counter", kwlist, &start))
        return NULL;
    Counter *c = (Counter *)type->tp_alloc(type, 0);
    if (c != NULL)
        c->next = start;
    return (PyObject *)c;
}

static PyGetSetDef counter_getset[] = {
    {"value", (getter)counter_value, NULL, "the id next() hands out next", NULL},
    {NULL},
};

static PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.Counter",
    .tp_basicsize = sizeof(Counter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Counter(start=0): itertools.count(start) that the C execution wrapper advances in place",
    .tp_new = counter_new,
    .tp_repr = (reprfunc)counter_repr,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)counter_next,
    .tp_getset = counter_getset,
};

/* ---- a completion stamp ------------------------------------------------------------------- */

/* Stamp(): a callable for a collective's future (``add_done_callback``) that stores the clock and
 * the calling thread's id at its first call and does nothing else.  The backend's thread runs it
 * holding the GIL for no Python frame; a Python callback there kept the training thread waiting
 * for the GIL (~5% of a 2-rank DDP step's CPU, decision 0220).  A Python thread reads ``t`` later
 * and records the span.  ``stamps_alive()`` counts the stamps not yet freed: the exit waits until the backends'
 * threads have let go of theirs (a thread that takes the GIL to free one during finalization is
 * aborted, decision 0198). */
typedef struct {
    PyObject_HEAD
    long long t;    /* CLOCK_MONOTONIC ns of the first call, 0 before */
    long tid;       /* the OS thread id of that call */
} Stamp;

static Py_ssize_t stamps_alive;  /* changed with the GIL held */

static void
forget_stamps(void)
{
    stamps_alive = 0;  /* a forked child has no backend thread to free its parent's */
}

static PyObject *
stamp_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Stamp() takes no arguments");
        return NULL;
    }
    Stamp *s = (Stamp *)type->tp_alloc(type, 0);
    if (s != NULL)
        stamps_alive++;
    return (PyObject *)s;
}

static void
stamp_dealloc(Stamp *s)
{
    if (stamps_alive > 0)
        stamps_alive--;
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *
stamp_call(Stamp *s, PyObject *args, PyObject *kwds)
{
    if (s->t == 0) {
        s->tid = thread_id();
        s->t = now_ns();
    }
    Py_RETURN_NONE;
}

static PyMemberDef stamp_members[] = {
    {"t", T_LONGLONG, offsetof(Stamp, t), READONLY, "CLOCK_MONOTONIC ns of the first call (0: not called)"},
    {"tid", T_LONG, offsetof(Stamp, tid), READONLY, "the OS thread id of the first call"},
    {NULL},
};

static PyTypeObject StampType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.Stamp",
    .tp_basicsize = sizeof(Stamp),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Stamp(): a callable that keeps the clock and the thread id of its first call (t, tid)",
    .tp_new = stamp_new,
    .tp_dealloc = (destructor)stamp_dealloc,
    .tp_call = (ternaryfunc)stamp_call,
    .tp_members = stamp_members,
};

static PyObject *
fp_stamps_alive(PyObject *mod, PyObject *unused)
{
    return PyLong_FromSsize_t(stamps_alive);
}

/* ---- a rate gate ---------------------------------------------------------------------------- */

/* RateGate(fn, period_s, calls, max_s): gate(obj, *rest) calls fn(obj, *rest) unless the last
 * call for obj that went through was less than period_s ago, or less than max_s ago with fewer
 * than `calls` calls since.  It stands for a Python hook that runs on every step and does its
 * work only now and then (the device-memory source's optimizer pre-hook): a step with nothing to
 * do costs a clock read and a weak reference's lookup, not a Python frame.  It remembers up to
 * RG_OBJS objects (optimizers: a GAN steps two); a further one replaces the oldest entry. */
#define RG_OBJS 4

typedef struct {
    PyObject *ref;       /* weak reference to the object, or NULL */
    long long last_ns;   /* when its last call went through */
    long long held;      /* its calls held back since */
} RateEntry;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;
    long long period_ns, max_ns, calls;
    RateEntry seen[RG_OBJS];
    int next;            /* the entry a new object takes when none is free */
} RateGate;

static PyObject *
rg8_call(RateGate *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    long long now = now_ns();
    RateEntry *e = NULL;
    for (int i = 0; n >= 1 && i < RG_OBJS; i++) {
        if (self->seen[i].ref != NULL && PyWeakref_GET_OBJECT(self->seen[i].ref) == args[0]) {
            e = &self->seen[i];
            break;
        }
    }
    if (e != NULL) {
        long long age = now - e->last_ns;
        e->held++;
        if (age >= 0 && (age < self->period_ns || (age < self->max_ns && e->held < self->calls)))
            Py_RETURN_NONE;
    }
    PyObject *out = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    if (out == NULL || n < 1)
        return out;
    if (e == NULL) {  /* a free entry (never used, or its object is gone), else the next in turn */
        for (int i = 0; e == NULL && i < RG_OBJS; i++) {
            if (self->seen[i].ref == NULL || PyWeakref_GET_OBJECT(self->seen[i].ref) == Py_None)
                e = &self->seen[i];
        }
        if (e == NULL) {
            e = &self->seen[self->next];
            self->next = (self->next + 1) % RG_OBJS;
        }
        PyObject *ref = PyWeakref_NewRef(args[0], NULL);
        if (ref == NULL)
            PyErr_Clear();  /* an object without weak references: its every call goes through */
        Py_XSETREF(e->ref, ref);
    }
    e->last_ns = now;
    e->held = 0;
    return out;
}

static PyObject *
rg8_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "period_s", "calls", "max_s", NULL};
    PyObject *fn;
    double period_s, max_s;
    long long calls;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OdLd:RateGate", kwlist, &fn, &period_s, &calls, &max_s))
        return NULL;
    if (!PyCallable_Check(fn) || !(period_s >= 0 && period_s <= 1e6) || !(max_s >= 0 && max_s <= 1e6)) {
        PyErr_SetString(PyExc_ValueError, "RateGate: fn must be callable, period_s and max_s in [0, 1e6] seconds");
        return NULL;
    }
    RateGate *self = (RateGate *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)rg8_call;
    Py_INCREF(fn);
    self->fn = fn;
    self->period_ns = (long long)(period_s * 1e9);
    self->max_ns = (long long)(max_s * 1e9);
    self->calls = calls;
    return (PyObject *)self;
}

static int
rg8_traverse(RateGate *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    for (int i = 0; i < RG_OBJS; i++)
        Py_VISIT(self->seen[i].ref);
    return 0;
}

static int
rg8_clear(RateGate *self)
{
    Py_CLEAR(self->fn);
    for (int i = 0; i < RG_OBJS; i++)
        Py_CLEAR(self->seen[i].ref);
    return 0;
}

static void
rg8_dealloc(RateGate *self)
{
    PyObject_GC_UnTrack(self);
    rg8_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef rg8_members[] = {
    {"fn", T_OBJECT, offsetof(RateGate, fn), READONLY, "what the gate calls"},
    {NULL},
};

static PyTypeObject RateGateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.RateGate",
    .tp_basicsize = sizeof(RateGate),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "RateGate(fn, period_s, calls, max_s): calls fn(obj, ...) at most as often as it says (see _fastpath.c)",
    .tp_new = rg8_new,
    .tp_traverse = (traverseproc)rg8_traverse,
    .tp_clear = (inquiry)rg8_clear,
    .tp_dealloc = (destructor)rg8_dealloc,
    .tp_vectorcall_offset = offsetof(RateGate, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_members = rg8_members,
};

/* The next value of a Counter or any other iterator of ints such as itertools.count (into *out
 * when out is not NULL); -1 with an exception set. */
static int
next_id(PyObject *counter, long long *out)
{
    long long v;
    if (Py_IS_TYPE(counter, &CounterType)) {
        if (counter_take((Counter *)counter, &v) < 0)
            return -1;
        if (out != NULL)
            *out = v;
        return 0;
    }
    PyObject *x = Py_TYPE(counter)->tp_iternext(counter);
    if (x == NULL)
        return -1;
    v = PyLong_AsLongLong(x);
    Py_DECREF(x);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (out != NULL)
        *out = v;
    return 0;
}

/* neuron-monitor's feed (``stats``, NULL when off) takes the record as the tuple a Python producer
 * would append, or the row itself when ``stats_ring`` (``stats_ring_of``) is its ring. */
static int
push_stats(PyObject *stats, RingBuffer *stats_ring, const long long *v)
{
    if (stats == NULL)
        return 0;
    if (stats_ring != NULL)  /* the row itself, no tuple: nothing allocated per execution */
        return ring_push(stats_ring, v);
    PyObject *t = tuple_of(v, WIDTH);
    if (t == NULL)
        return -1;
    PyObject *r = PyObject_CallOneArg(stats, t);
    Py_DECREF(t);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The ring of a feed that is a 9-wide RingBuffer's bound ``append``, else NULL (borrowed: the
 * feed holds it). */
static RingBuffer *
stats_ring_of(PyObject *stats)
{
    PyObject *owner = PyCFunction_Check(stats) ? PyCFunction_GET_SELF(stats) : NULL;
    if (owner != NULL && PyCFunction_GET_FUNCTION(stats) == (PyCFunction)ring_append &&
            PyObject_TypeCheck(owner, &RingBufferType) && ((RingBuffer *)owner)->width == WIDTH)
        return (RingBuffer *)owner;
    return NULL;
}

static int
feed_stats(ExecWrapper *self, const long long *v)
{
    return push_stats(self->stats, self->stats_ring, v);
}

/* Count an execution for the thread that ran it when that thread is watched (Ring.watch: an
 * eager root's first call asks whether compiled graphs ran inside it, on its own thread).  The
 * dict is empty but during first calls: the common cost is reading its size.  Never fails. */
static void
watch_count(ExecWrapper *self)
{
    if (self->watch == NULL || PyDict_GET_SIZE(self->watch) == 0)
        return;
    PyObject *k = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    PyObject *cell = k != NULL ? PyDict_GetItemWithError(self->watch, k) : NULL;
    Py_XDECREF(k);
    if (cell != NULL && PyList_CheckExact(cell) && PyList_GET_SIZE(cell) == 1) {
        long long c = PyLong_AsLongLong(PyList_GET_ITEM(cell, 0));
        PyObject *n = c == -1 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(c + 1);
        if (n != NULL)
            PyList_SetItem(cell, 0, n);  /* (steals n) */
    }
    if (PyErr_Occurred())
        PyErr_Clear();
}

/* Append the record of execution `eid` and feed the stats; returns 0, or -1 with an exception set. */
static int
record(ExecWrapper *self, long long t0, long long t1, long long ret, long long eid)
{
    long long v[WIDTH] = {self->head_v, t0, t1, thread_id(), self->mid_v, eid, ret, 0, 0};
    if (ring_push(self->ring, v) < 0)
        return -1;
    watch_count(self);
    return feed_stats(self, v);
}

/* The NaN/Inf check of a successful call's outputs: the execution's ret (0, or ret_numerr after
 * numerr has recorded the numerical error).  It never fails the call: a scan or a numerr that
 * raises is reported once (as an unraisable exception) and the outputs count as finite. */
static long long
check_outputs(ExecWrapper *self, PyObject *out, long long eid, long long t0, long long t1)
{
    long long nan, inf;
    if (self->scan == NULL)
        return 0;
    if (scan_outputs(self->scan, out, &nan, &inf) == 0) {
        if (nan == 0 && inf == 0)
            return 0;
        PyObject *r = PyObject_CallFunction(self->numerr, "LLLLLL", eid, t0, t1, (long long)thread_id(), nan, inf);
        if (r != NULL) {
            Py_DECREF(r);
            return self->ret_numerr;
        }
    }
    if (!self->scan_failed) {
        self->scan_failed = 1;
        PyErr_WriteUnraisable(self->fn);
    }
    PyErr_Clear();
    return 0;
}

/* A successful call's last step: the forward graph looks for its backward until it is found. */
static PyObject *
finish(ExecWrapper *self, PyObject *out)
{
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

/* The NDET variant: the execution id is taken before the call (NDET logs the call as in flight
 * while it runs), and the call is bracketed by the ring's open/close counters so an event count
 * taken meanwhile does not count it as an overwritten event -- what run_general does in Python. */
static PyObject *
ew_call_ndet(ExecWrapper *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    long long eid;
    if (next_id(self->counter, &eid) < 0 || next_id(self->opened, NULL) < 0)
        return NULL;
    long long t0 = now_ns();
    /* in flight while it runs: (kind, state, nc, ret, t0, t1, model, exec id, ...) */
    long long flight[11] = {self->kind_exec, self->state_in_flight, self->nc_v, 0, t0, 0, self->mid_v, eid, 0, 0, 0};
    PyObject *out = NULL, *key = NULL;
    int slot = self->slots != NULL ? slot_take(self->slots, flight) : -1;
    int ok = 1;
    if (slot < 0) {  /* every slot taken: the recorder's dict, keyed as NdetRecorder.exec_begin keys it */
        long long k[2] = {self->nc_v, eid};
        PyObject *rec = tuple_of(flight, 11);
        key = tuple_of(k, 2);
        ok = rec != NULL && key != NULL && PyDict_SetItem(self->inflight, key, rec) == 0;
        Py_XDECREF(rec);
    }
    if (ok)
        out = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    /* from here on the call has ended, or never started (then it counts as a failed call) */
    long long t1 = now_ns();
    long long ret = out == NULL;
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    if (out == NULL)
        PyErr_Fetch(&et, &ev, &tb);
    else
        ret = check_outputs(self, out, eid, t0, t1);
    if (slot >= 0)
        self->slots->used[slot] = 0;
    long long v[WIDTH] = {self->head_v, t0, t1, thread_id(), self->mid_v, eid, ret, 0, 0};
    long long done[11] = {self->kind_exec, 0, self->nc_v, ret, t0, t1, self->mid_v, eid, 0, 0, 0};
    ok = ring_push(self->ring, v) == 0 && next_id(self->closed, NULL) == 0;
    if (ok)
        watch_count(self);
    if (ok && key != NULL && PyDict_DelItem(self->inflight, key) < 0) {
        if (PyErr_ExceptionMatches(PyExc_KeyError))
            PyErr_Clear();  /* never set, or a flush took it meanwhile */
        else
            ok = 0;
    }
    Py_XDECREF(key);
    ok = ok && ring_push(self->ndet_ring, done) == 0 && feed_stats(self, v) == 0;
    if (out == NULL) {  /* the call's own exception (or the failed set-up's) wins over a recording error */
        if (!ok)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    if (!ok) {
        Py_DECREF(out);
        return NULL;
    }
    return finish(self, out);
}

/* Benchmarks only (bench/ndet_bench.py, capture_overhead.py --same-process): while set, every
 * wrapper calls its graph and records nothing, and record_function regions run torch's own
 * methods only (_hooks.h), so one process can time its steps with and without that work at the
 * same memory layout.  Never set by the runtime. */
static int ew_paused = 0;

static PyObject *
ew_call(ExecWrapper *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (ew_paused)
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    PyObject *dp = PyList_GET_ITEM(self->devprof, 0);
    /* a device profiler is on, and may want this call (model mode wants a graph's first only) */
    if (dp != Py_None && (self->settled == NULL || dp != PyList_GET_ITEM(self->settled, 0)))
        return PyObject_Vectorcall(self->general, args, nargsf, kwnames);
    if (self->inflight != NULL)
        return ew_call_ndet(self, args, nargsf, kwnames);

    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    long long eid;
    if (out == NULL) {
        /* record the failed call, then let its exception through unchanged */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        long long t1 = now_ns();
        if (next_id(self->counter, &eid) < 0 || record(self, t0, t1, 1, eid) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    long long t1 = now_ns();
    /* the id is taken when the call has returned, next to the append, so the event count never
     * includes a call still running */
    if (next_id(self->counter, &eid) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    long long ret = check_outputs(self, out, eid, t0, t1);
    if (record(self, t0, t1, ret, eid) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return finish(self, out);
}

static PyObject *
ew_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "ring", "counter", "head", "mid", "devprof", "general", "stats",
                             "backward", "ndet", "scan", "settled", "watch", NULL};
    PyObject *fn, *ring, *counter, *devprof, *general, *stats = Py_None, *backward = Py_None, *ndet = Py_None;
    PyObject *scan = Py_None, *scanner = NULL, *numerr = NULL, *settled = Py_None, *watch = Py_None;
    long long head, mid, ret_numerr = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OLLO!O|OOOOOO:ExecWrapper", kwlist, &fn, &RingBufferType, &ring,
                                     &counter, &head, &mid, &PyList_Type, &devprof, &general, &stats, &backward, &ndet,
                                     &scan, &settled, &watch))
        return NULL;
    if (watch != Py_None && !PyDict_CheckExact(watch)) {
        PyErr_SetString(PyExc_TypeError, "ExecWrapper: watch must be a dict or None");
        return NULL;
    }
    if (settled != Py_None && (!PyList_CheckExact(settled) || PyList_GET_SIZE(settled) != 1)) {
        PyErr_SetString(PyExc_TypeError, "ExecWrapper: settled must be a one-item list or None");
        return NULL;
    }
    if (scan != Py_None) {
        if (!PyArg_ParseTuple(scan, "O!OL:ExecWrapper scan=(scanner, numerr, ret)", &NanScannerType, &scanner,
                              &numerr, &ret_numerr))
            return NULL;
        if (!PyCallable_Check(numerr)) {
            PyErr_SetString(PyExc_TypeError, "ExecWrapper: numerr must be callable");
            return NULL;
        }
    }
    PyObject *inflight = NULL, *ndet_ring = NULL, *opened = NULL, *closed = NULL, *slots = Py_None;
    long long nc = 0, kind_exec = 0, state_in_flight = 0;
    if (((RingBuffer *)ring)->width != WIDTH) {
        PyErr_Format(PyExc_ValueError, "ExecWrapper: the capture ring must be %d wide", WIDTH);
        return NULL;
    }
    if (ndet != Py_None) {
        if (!PyArg_ParseTuple(ndet, "O!O!OOLLL|O:ExecWrapper ndet=(inflight, ring, opened, closed, nc, kind, state, slots)",
                              &PyDict_Type, &inflight, &RingBufferType, &ndet_ring, &opened, &closed, &nc,
                              &kind_exec, &state_in_flight, &slots))
            return NULL;
        if (slots != Py_None && !PyObject_TypeCheck(slots, &SlotTableType)) {
            PyErr_SetString(PyExc_TypeError, "ExecWrapper: ndet slots must be a SlotTable or None");
            return NULL;
        }
        if (Py_TYPE(opened)->tp_iternext == NULL || Py_TYPE(closed)->tp_iternext == NULL ||
                ((RingBuffer *)ndet_ring)->width != 11) {
            PyErr_SetString(PyExc_TypeError, "ExecWrapper: ndet needs an 11-wide ring and opened/closed iterators");
            return NULL;
        }
    }
    if (Py_TYPE(counter)->tp_iternext == NULL || !PyCallable_Check(fn) || !PyCallable_Check(general) ||
            PyList_GET_SIZE(devprof) != 1) {
        PyErr_SetString(PyExc_TypeError, "ExecWrapper: fn and general must be callable, counter an iterator and "
                                         "devprof a one-item list");
        return NULL;
    }
    ExecWrapper *self = (ExecWrapper *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)ew_call;
    self->head_v = head;
    self->mid_v = mid;
#define KEEP(field, value) do { Py_INCREF(value); self->field = (value); } while (0)
    KEEP(fn, fn);
    Py_INCREF(ring);
    self->ring = (RingBuffer *)ring;
    KEEP(counter, counter);
    KEEP(devprof, devprof);
    if (settled != Py_None)
        KEEP(settled, settled);
    KEEP(general, general);
    if (stats != Py_None) {
        KEEP(stats, stats);
        self->stats_ring = stats_ring_of(stats);
    }
    if (backward != Py_None)
        KEEP(backward, backward);
    if (watch != Py_None)
        KEEP(watch, watch);
    if (inflight != NULL) {
        KEEP(inflight, inflight);
        Py_INCREF(ndet_ring);
        self->ndet_ring = (RingBuffer *)ndet_ring;
        self->nc_v = nc;
        KEEP(opened, opened);
        KEEP(closed, closed);
        self->kind_exec = kind_exec;
        self->state_in_flight = state_in_flight;
        if (slots != Py_None) {
            Py_INCREF(slots);
            self->slots = (SlotTable *)slots;
        }
    }
    if (scanner != NULL) {
        Py_INCREF(scanner);
        self->scan = (NanScanner *)scanner;
        KEEP(numerr, numerr);
        self->ret_numerr = ret_numerr;
    }
#undef KEEP
    return (PyObject *)self;
}

static int
ew_traverse(ExecWrapper *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->ring);
    Py_VISIT(self->counter);
    Py_VISIT(self->devprof);
    Py_VISIT(self->settled);
    Py_VISIT(self->general);
    Py_VISIT(self->stats);
    Py_VISIT(self->backward);
    Py_VISIT(self->dict);
    Py_VISIT(self->inflight);
    Py_VISIT(self->ndet_ring);
    Py_VISIT(self->opened);
    Py_VISIT(self->closed);
    Py_VISIT(self->slots);
    Py_VISIT(self->scan);
    Py_VISIT(self->numerr);
    Py_VISIT(self->watch);
    return 0;
}

static int
ew_clear(ExecWrapper *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->ring);
    Py_CLEAR(self->counter);
    Py_CLEAR(self->devprof);
    Py_CLEAR(self->settled);
    Py_CLEAR(self->general);
    Py_CLEAR(self->stats);
    Py_CLEAR(self->backward);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->inflight);
    Py_CLEAR(self->ndet_ring);
    Py_CLEAR(self->opened);
    Py_CLEAR(self->closed);
    Py_CLEAR(self->slots);
    Py_CLEAR(self->scan);
    Py_CLEAR(self->numerr);
    Py_CLEAR(self->watch);
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
    .tp_doc = "ExecWrapper(fn, ring, counter, head, mid, devprof, general, stats=None, backward=None, ndet=None, "
              "scan=None, settled=None, watch=None)\n"
              "Calls fn and appends (head, t0, t1, tid, mid, next(counter), ret, 0, 0) to ring per call.",
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

#include "_local.h"
#include "_step.h"
#include "_hooks.h"
#include "_expand.h"
#include "_jit.h"  /* the jax.jit stand-in's call (JitCall) */
#include "_procread.h"  /* read_file: small /proc files with the GIL held */

/* ---- signals: wake a watcher thread at once (runtime/signals.py) --------------------------- */

/* CPython runs a Python signal handler in the main thread between bytecodes, so a thread blocked in
 * C (a rank waiting in a gloo all_reduce) never runs it.  forward_signal() puts a C handler in front
 * of the one installed (Python's own, which keeps its work: trip the Python handler and write the
 * wakeup fd): it writes the signal number to a pipe a watcher thread reads, then calls the previous
 * handler with the same arguments.  write() is async-signal-safe and the pipe is non-blocking, so
 * the handler never waits.  die_by_signal() ends the process as the default disposition does. */

static volatile sig_atomic_t sig_fd = -1;    /* the pipe's write end, -1 when not forwarding */
static struct sigaction sig_prev[NSIG];      /* the action each forwarded signal had before */
static volatile sig_atomic_t sig_on[NSIG];   /* 1 while our handler is installed for it */

static void
sig_forward_handler(int sig, siginfo_t *info, void *uctx)
{
    int saved = errno;
    int fd = sig_fd;
    if (fd >= 0) {
        unsigned char b = (unsigned char)sig;
        ssize_t rc = write(fd, &b, 1);  /* a full pipe already holds a wake-up: dropping is fine */
        (void)rc;
    }
    errno = saved;
    struct sigaction *p = &sig_prev[sig];
    if (p->sa_flags & SA_SIGINFO) {
        if (p->sa_sigaction != NULL)
            p->sa_sigaction(sig, info, uctx);
    }
    else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN && p->sa_handler != NULL) {
        p->sa_handler(sig);
    }
}

static PyObject *
fp_forward_signal(PyObject *mod, PyObject *args)
{
    int sig, fd;
    if (!PyArg_ParseTuple(args, "ii:forward_signal", &sig, &fd))
        return NULL;
    if (sig <= 0 || sig >= NSIG || fd < 0) {
        PyErr_Format(PyExc_ValueError, "forward_signal needs 0 < signal < %d and a file descriptor", NSIG);
        return NULL;
    }
    struct sigaction cur, sa;
    if (sigaction(sig, NULL, &cur) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (sig_on[sig] && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == sig_forward_handler) {
        sig_fd = fd;
        Py_RETURN_NONE;  /* already in front */
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sig_forward_handler;
    sa.sa_mask = cur.sa_mask;
    sa.sa_flags = (cur.sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
    sig_prev[sig] = cur;
    sig_fd = fd;
    if (sigaction(sig, &sa, NULL) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    sig_on[sig] = 1;
    Py_RETURN_NONE;
}

/* Put back the previous action of every forwarded signal that still has ours (one replaced since,
 * e.g. by signal.signal(), is left alone), and stop writing to the pipe. */
static PyObject *
fp_stop_forwarding(PyObject *mod, PyObject *unused)
{
    sig_fd = -1;
    for (int sig = 1; sig < NSIG; sig++) {
        if (!sig_on[sig])
            continue;
        struct sigaction cur;
        if (sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == sig_forward_handler)
            sigaction(sig, &sig_prev[sig], NULL);
        sig_on[sig] = 0;
    }
    Py_RETURN_NONE;
}

static void
forget_forwarding(void)
{
    sig_fd = -1;  /* a forked child must never wake its parent's watcher through the shared pipe */
}

/* Default disposition, unblocked in this thread, then raise(): the process ends the way it would
 * have without us, and its parent sees it killed by `sig`.  Returns only if the default action of
 * `sig` does not end the process. */
static PyObject *
fp_die_by_signal(PyObject *mod, PyObject *arg)
{
    long sig = PyLong_AsLong(arg);
    if (sig == -1 && PyErr_Occurred())
        return NULL;
    if (sig <= 0 || sig >= NSIG) {
        PyErr_Format(PyExc_ValueError, "die_by_signal needs 0 < signal < %d, not %ld", NSIG, sig);
        return NULL;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction((int)sig, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, (int)sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise((int)sig);
    Py_RETURN_NONE;
}

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

static PyObject *
fp_pause_executions(PyObject *mod, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    int was = ew_paused;
    ew_paused = on;
    return PyBool_FromLong(was);
}

static PyMethodDef fp_methods[] = {
    {"pause_executions", fp_pause_executions, METH_O,
     "pause_executions(flag) -> previous: benchmarks only; while true, execution wrappers and regions record nothing"},
    {"now_ns", fp_now_ns, METH_NOARGS, "CLOCK_MONOTONIC in nanoseconds (what the wrapper stamps)"},
    {"thread_id", fp_thread_id, METH_NOARGS, "the OS thread id the wrapper records"},
    {"stamps_alive", fp_stamps_alive, METH_NOARGS, "how many Stamp objects are not freed yet"},
    {"forward_signal", fp_forward_signal, METH_VARARGS,
     "forward_signal(sig, fd): a C handler in front of sig's current one writes sig to fd, then chains"},
    {"stop_forwarding", fp_stop_forwarding, METH_NOARGS, "put back the handlers forward_signal replaced"},
    {"die_by_signal", fp_die_by_signal, METH_O, "die_by_signal(sig): default disposition, unblock, raise"},
    {"module_call_gate", fp_module_call_gate, METH_VARARGS,
     "module_call_gate(func, tl, inner, graph_type): a C vectorcall for the Python Module.__call__ func (_hooks.h)"},
    {"module_call_skip", fp_module_call_skip, METH_O, "module_call_skip(mod): mod is a compiled root (_hooks.h)"},
    {"module_call_root", fp_module_call_root, METH_VARARGS,
     "module_call_root(mod, run, ex, enabled, index, grad_on): mod's root calls recorded by run in C (_hooks.h)"},
    {"backward_settle", fp_backward_settle, METH_VARARGS,
     "backward_settle(gate, ex, run): the backward after a root run of ex recorded by run in C (_hooks.h)"},
    {"backward_gate", fp_backward_gate, METH_VARARGS,
     "backward_gate(name, tl, orig, slow, pending=None, after=None, enabled=None, index=0): "
     "torch.autograd.backward/grad as a builtin function (_hooks.h)"},
    {"region_methods", fp_region_methods, METH_VARARGS,
     "region_methods(cls, enter, exit, ring, ticks, strings, intern, enabled, index): (__enter__, __exit__) (_hooks.h)"},
    {"grad_entries", fp_grad_entries, METH_VARARGS,
     "grad_entries(groups, tensor_type, core) -> [(storage address, core, bytes)]: the optimizer's gradients (_hooks.h)"},
    {"read_file", fp_read_file, METH_O,
     "read_file(path) -> bytes | None: a small file (/proc) read whole with the GIL held; None when unreadable"},
    {"expand_pairs", fp_expand_pairs, METH_VARARGS,
     "expand_pairs(rows, out, last_model, runtime_rows, types) -> (m, last_model): a drain's events as columns (_expand.h)"},
    {NULL},
};

static struct PyModuleDef fp_module = {
    PyModuleDef_HEAD_INIT, "_fastpath", "The execution hot path in C (see _fastpath.c).", -1, fp_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&ExecWrapperType) < 0 || PyType_Ready(&RingBufferType) < 0 ||
            PyType_Ready(&SlotTableType) < 0 || PyType_Ready(&NanScannerType) < 0 ||
            PyType_Ready(&EagerStepType) < 0 || PyType_Ready(&CounterType) < 0 ||
            PyType_Ready(&RateGateType) < 0 || PyType_Ready(&EagerLocalType) < 0 ||
            PyType_Ready(&StampType) < 0)
        return NULL;
    str_depth = PyUnicode_InternFromString("depth");
    int_zero = PyLong_FromLong(0);
    int_one = PyLong_FromLong(1);
    str_grad_root = PyUnicode_InternFromString("grad_root");
    str_t0_attr = PyUnicode_InternFromString("_neuron_explorer_t0");
    str_name = PyUnicode_InternFromString("name");
    str_params = PyUnicode_InternFromString("params");
    str_grad = PyUnicode_InternFromString("grad");
    str_untyped_storage = PyUnicode_InternFromString("untyped_storage");
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    str_nbytes = PyUnicode_InternFromString("nbytes");
    str_get = PyUnicode_InternFromString("get");
    if (str_depth == NULL || int_zero == NULL || int_one == NULL || str_grad_root == NULL || str_t0_attr == NULL ||
            str_name == NULL || str_params == NULL || str_grad == NULL || str_untyped_storage == NULL ||
            str_data_ptr == NULL || str_nbytes == NULL || str_get == NULL)
        return NULL;
    if (pthread_atfork(NULL, NULL, forget_tid) != 0 || pthread_atfork(NULL, NULL, forget_forwarding) != 0 ||
            pthread_atfork(NULL, NULL, forget_stamps) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
    PyObject *m = PyModule_Create(&fp_module);
    if (m == NULL)
        return NULL;
    struct { const char *name; PyTypeObject *type; } types[] = {
        {"ExecWrapper", &ExecWrapperType}, {"RingBuffer", &RingBufferType}, {"SlotTable", &SlotTableType},
        {"NanScanner", &NanScannerType}, {"EagerStep", &EagerStepType}, {"Counter", &CounterType},
        {"RateGate", &RateGateType}, {"EagerLocal", &EagerLocalType}, {"Stamp", &StampType},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        Py_INCREF(types[i].type);
        if (PyModule_AddObject(m, types[i].name, (PyObject *)types[i].type) < 0) {
            Py_DECREF(types[i].type);
            Py_DECREF(m);
            return NULL;
        }
    }
    if (jit_add_types(m) < 0) {  /* _jit.h */
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "WIDTH", WIDTH);
    return m;
}

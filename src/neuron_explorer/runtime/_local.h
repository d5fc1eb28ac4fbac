/* The eager hooks' per-thread state in C (included by _fastpath.c, before _step.h).
 *
 * The eager hooks keep two values per thread (integrations/torch/eager.py): ``depth`` (> 0 while a
 * root module or a recorded backward runs on the thread) and ``grad_root`` (the graph of the first
 * root run with gradients on since the last backward).  As a ``threading.local`` subclass every
 * read cost ~530 instructions (the thread's dict found through the thread state, the module state
 * looked up by type, then a generic attribute lookup through the class), and a small eager step
 * read it 13 times: ~7k instructions, a sixth of what the system profile added to it.
 * ``EagerLocal`` keeps them in C thread-local storage: the gates read and write them directly,
 * and Python reads ``tl.depth`` through a getset descriptor (docs/decisions/0161-*.md).
 *
 * One instance is in use per process (the eager hooks are installed once).  Each instance has a
 * serial number, and a thread's storage belongs to the instance that last wrote it there: another
 * instance reads the defaults (0 and None) on that thread until it writes.  ``grad_root`` is a
 * strong reference held in the thread's storage: a thread that ends with one set keeps that
 * object alive (a graph the hooks' registry keeps alive anyway).  A forked child keeps the
 * forking thread's values, as a ``threading.local`` does. */

static PyObject *str_depth;  /* "depth", interned at module init */
static PyObject *int_zero;   /* 0: CPython keeps one object for it, so `depth == 0` is a pointer test */

static __thread struct {
    unsigned long long owner;  /* the serial of the instance whose values these are; 0: none */
    long depth;
    PyObject *grad_root;       /* NULL: None */
} el_tls;

static unsigned long long el_serial;  /* the last serial given (under the GIL) */

typedef struct {
    PyObject_HEAD
    unsigned long long serial;
} EagerLocal;

static PyTypeObject EagerLocalType;

/* This thread's storage, made this instance's (another instance's values dropped). */
static void
el_claim(EagerLocal *self)
{
    if (el_tls.owner != self->serial) {
        PyObject *old = el_tls.grad_root;
        el_tls.owner = self->serial;
        el_tls.depth = 0;
        el_tls.grad_root = NULL;
        Py_XDECREF(old);
    }
}

static inline long
el_depth(EagerLocal *self)
{
    return el_tls.owner == self->serial ? el_tls.depth : 0;
}

/* The thread's grad_root, borrowed: NULL for None. */
static inline PyObject *
el_grad_root(EagerLocal *self)
{
    return el_tls.owner == self->serial ? el_tls.grad_root : NULL;
}

static void
el_set_depth(EagerLocal *self, long v)
{
    el_claim(self);
    el_tls.depth = v;
}

/* grad_root = obj (None or NULL: None); the old value released last (its destructor may run code). */
static void
el_set_grad_root(EagerLocal *self, PyObject *obj)
{
    el_claim(self);
    PyObject *old = el_tls.grad_root;
    if (obj == Py_None)
        obj = NULL;
    Py_XINCREF(obj);
    el_tls.grad_root = obj;
    Py_XDECREF(old);
}

static PyObject *
el_get_depth_attr(EagerLocal *self, void *closure)
{
    return PyLong_FromLong(el_depth(self));
}

static int
el_set_depth_attr(EagerLocal *self, PyObject *v, void *closure)
{
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "EagerLocal.depth cannot be deleted");
        return -1;
    }
    long d = PyLong_AsLong(v);
    if (d == -1 && PyErr_Occurred())
        return -1;
    el_set_depth(self, d);
    return 0;
}

static PyObject *
el_get_root_attr(EagerLocal *self, void *closure)
{
    PyObject *r = el_grad_root(self);
    r = r != NULL ? r : Py_None;
    Py_INCREF(r);
    return r;
}

static int
el_set_root_attr(EagerLocal *self, PyObject *v, void *closure)
{
    el_set_grad_root(self, v);  /* (del: None) */
    return 0;
}

static PyObject *
el_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "EagerLocal() takes no arguments");
        return NULL;
    }
    EagerLocal *self = (EagerLocal *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->serial = ++el_serial;
    return (PyObject *)self;
}

static void
el_dealloc(EagerLocal *self)
{
    if (el_tls.owner == self->serial) {  /* (other threads' storage cannot be reached from here) */
        PyObject *old = el_tls.grad_root;
        el_tls.owner = 0;
        el_tls.grad_root = NULL;
        Py_XDECREF(old);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef el_getset[] = {
    {"depth", (getter)el_get_depth_attr, (setter)el_set_depth_attr,
     "> 0 while a root module or a recorded backward runs on this thread", NULL},
    {"grad_root", (getter)el_get_root_attr, (setter)el_set_root_attr,
     "this thread's graph whose backward is to be recorded next, or None", NULL},
    {NULL},
};

static PyTypeObject EagerLocalType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.EagerLocal",
    .tp_basicsize = sizeof(EagerLocal),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "EagerLocal()\nThe eager hooks' per-thread depth and grad_root, in C thread-local storage (_local.h).",
    .tp_new = el_new,
    .tp_dealloc = (destructor)el_dealloc,
    .tp_getset = el_getset,
};

/* ---- the gates' access, whatever the thread-local's type ---------------------------------- */

/* grad_root of `tl` as a new reference (None included); NULL with an exception set. */
static PyObject *
tl_grad_root(PyObject *tl, PyObject *name)
{
    if (Py_IS_TYPE(tl, &EagerLocalType)) {
        PyObject *r = el_grad_root((EagerLocal *)tl);
        r = r != NULL ? r : Py_None;
        Py_INCREF(r);
        return r;
    }
    return PyObject_GetAttr(tl, name);
}

/* tl.<name> = v; 0, or -1 with an exception set. */
static int
tl_set(PyObject *tl, PyObject *name, PyObject *v)
{
    if (Py_IS_TYPE(tl, &EagerLocalType)) {
        EagerLocal *el = (EagerLocal *)tl;
        if (name == str_depth)
            el_set_depth(el, v == int_zero ? 0 : PyLong_AsLong(v));
        else
            el_set_grad_root(el, v);
        return PyErr_Occurred() ? -1 : 0;
    }
    return PyObject_SetAttr(tl, name, v);
}

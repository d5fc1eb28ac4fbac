/* The eager optimizer step's per-step path in C (included by _fastpath.c).
 *
 * A compiled training step usually leaves ``optimizer.step()`` eager, and the eager hooks record
 * each step as one execution of the optimizer's graph (integrations/torch/eager.py).  Done in
 * Python, that took four to six Python frames per step (the step wrapper, the graph lookup, the
 * recorder, and with NDET its general path with exec_begin/exec_end): about 1% of a small
 * compiled step's instructions.  EagerStep takes the Python step wrapper's place: the class's
 * ``step`` is a one-line Python function calling it (Dynamo must see a function there; the object
 * also binds like a method), and once the Python path has recorded an optimizer's first step it is
 * handed an ExecWrapper for that optimizer (``settle``), which records every later step without a
 * Python frame of ours -- the same records, ids and NDET in-flight slots as a compiled graph's
 * calls (docs/decisions/0052-eager-optimizer-step-in-c.md).
 *
 * Per call: no positional argument, another optimizer than the settled one, or an optimizer that
 * died -> the Python path (``slow``), which does everything as before and may settle again.
 * Recording off (``enabled[index]`` false, a forked child) or a step inside a root module or a
 * recorded backward (the eager thread-local's ``depth`` > 0) -> torch's step as it is.  Otherwise
 * the ExecWrapper, which itself yields to the Python general path while a device profiler wants
 * the call. */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;        /* torch's hooked step: Optimizer.profile_hook_step(step) */
    PyObject *tl;        /* the eager hooks' thread-local; tl.depth > 0: not a root call */
    PyObject *enabled;   /* Runtime.enabled (a list of bools, changed in place) */
    Py_ssize_t index;    /* the execution event's index in it */
    PyObject *slow;      /* the Python path: slow(*args, **kwargs) */
    PyObject *key;       /* a weak reference to the optimizer `run` records, or NULL */
    PyObject *run;       /* the ExecWrapper that records that optimizer's steps, or NULL */
    PyObject *dict;      /* __wrapped__, __name__, ... and torch's `hooked` flag */
} EagerStep;

/* 1 when the eager thread-local ``tl`` says a root module or a recorded backward is running on
 * this thread (``tl.depth`` > 0), 0 when not, -1 when it cannot say (the Python path then decides). */
static int
tl_nested(PyObject *tl)
{
    if (Py_IS_TYPE(tl, &EagerLocalType))
        return el_depth((EagerLocal *)tl) != 0;
    PyObject *d = PyObject_GetAttr(tl, str_depth);
    if (d == NULL) {
        PyErr_Clear();
        return -1;
    }
    int r = d == int_zero ? 0 : PyObject_IsTrue(d);
    Py_DECREF(d);
    if (r < 0)
        PyErr_Clear();
    return r;
}

static PyObject *
es_call(EagerStep *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n == 0 || self->key == NULL || args[0] == Py_None || PyWeakref_GET_OBJECT(self->key) != args[0])
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    if (self->index >= PyList_GET_SIZE(self->enabled) || PyList_GET_ITEM(self->enabled, self->index) != Py_True)
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    int nested = tl_nested(self->tl);
    if (nested != 0)
        return PyObject_Vectorcall(nested > 0 ? self->fn : self->slow, args, nargsf, kwnames);
    /* held for the call: another thread's step may settle another optimizer meanwhile */
    PyObject *run = self->run;
    Py_INCREF(run);
    PyObject *r = PyObject_Vectorcall(run, args, nargsf, kwnames);
    Py_DECREF(run);
    return r;
}

/* settle(optimizer, run): record this optimizer's later steps with `run` (an ExecWrapper);
 * settle(None, None) forgets. */
static PyObject *
es_settle(EagerStep *self, PyObject *args)
{
    PyObject *opt, *run;
    if (!PyArg_ParseTuple(args, "OO:settle", &opt, &run))
        return NULL;
    if (opt == Py_None) {
        Py_CLEAR(self->key);
        Py_CLEAR(self->run);
        Py_RETURN_NONE;
    }
    if (!PyObject_TypeCheck(run, &ExecWrapperType)) {
        PyErr_SetString(PyExc_TypeError, "EagerStep.settle: run must be an ExecWrapper");
        return NULL;
    }
    PyObject *key = PyWeakref_NewRef(opt, NULL);
    if (key == NULL)
        return NULL;
    Py_XSETREF(self->key, key);
    Py_INCREF(run);
    Py_XSETREF(self->run, run);
    Py_RETURN_NONE;
}

static PyObject *
es_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "tl", "enabled", "index", "slow", NULL};
    PyObject *fn, *tl, *enabled, *slow;
    Py_ssize_t index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!nO:EagerStep", kwlist, &fn, &tl, &PyList_Type, &enabled,
                                     &index, &slow))
        return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(slow) || index < 0) {
        PyErr_SetString(PyExc_TypeError, "EagerStep: fn and slow must be callable, index >= 0");
        return NULL;
    }
    EagerStep *self = (EagerStep *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)es_call;
    Py_INCREF(fn);
    self->fn = fn;
    Py_INCREF(tl);
    self->tl = tl;
    Py_INCREF(enabled);
    self->enabled = enabled;
    self->index = index;
    Py_INCREF(slow);
    self->slow = slow;
    return (PyObject *)self;
}

static int
es_traverse(EagerStep *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->tl);
    Py_VISIT(self->enabled);
    Py_VISIT(self->slow);
    Py_VISIT(self->key);
    Py_VISIT(self->run);
    Py_VISIT(self->dict);
    return 0;
}

static int
es_clear(EagerStep *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->tl);
    Py_CLEAR(self->enabled);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->key);
    Py_CLEAR(self->run);
    Py_CLEAR(self->dict);
    return 0;
}

static void
es_dealloc(EagerStep *self)
{
    PyObject_GC_UnTrack(self);
    es_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A method, as the function it replaces: `opt.step` binds the optimizer (the type also says
 * Py_TPFLAGS_METHOD_DESCRIPTOR, so `opt.step()` calls it with the optimizer first, unbound). */
static PyObject *
es_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *
es_settled(EagerStep *self, void *closure)
{
    PyObject *opt = self->key != NULL ? PyWeakref_GET_OBJECT(self->key) : Py_None;
    Py_INCREF(opt);
    return opt;
}

static PyObject *
es_repr(EagerStep *self)
{
    return PyUnicode_FromFormat("<neuron-explorer optimizer step recorder of %R>", self->fn);
}

static PyMethodDef es_methods[] = {
    {"settle", (PyCFunction)es_settle, METH_VARARGS,
     "settle(optimizer, run): record that optimizer's steps with the ExecWrapper run; settle(None, None) forgets"},
    {NULL},
};

static PyGetSetDef es_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"settled", (getter)es_settled, NULL, "the optimizer whose steps are recorded in C, or None", NULL},
    {NULL},
};

static PyMemberDef es_members[] = {
    {"fn", T_OBJECT, offsetof(EagerStep, fn), READONLY, "torch's step"},
    {NULL},
};

static PyTypeObject EagerStepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "neuron_explorer.runtime._fastpath.EagerStep",
    .tp_basicsize = sizeof(EagerStep),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "EagerStep(fn, tl, enabled, index, slow)\n"
              "An optimizer's step: slow(*args, **kwargs) until settle(opt, run), then run(...) for opt's steps.",
    .tp_new = es_new,
    .tp_dealloc = (destructor)es_dealloc,
    .tp_traverse = (traverseproc)es_traverse,
    .tp_clear = (inquiry)es_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(EagerStep, vectorcall),
    .tp_dictoffset = offsetof(EagerStep, dict),
    .tp_descr_get = es_get,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_methods = es_methods,
    .tp_members = es_members,
    .tp_getset = es_getset,
    .tp_repr = (reprfunc)es_repr,
};

/* The eager hooks' and the regions' per-call gates in C (included by _fastpath.c, after _step.h).
 *
 * Every step of a compiled training loop calls ``torch.autograd.backward``, which the eager hooks
 * wrap but which has nothing to record when no eager root ran with gradients; with a capture it
 * also opens the two ``record_function`` regions of torch's optimizer.  As Python functions the
 * wrappers were a frame each per call, ~1.5-2k instructions, 0.1-0.15% of a small compiled step
 * each; so was ``Module.__call__`` for every nested module call, every FX graph module call
 * (AOTAutograd's graphs under ``aot_eager``) and every call of a compiled root.  Here they decide
 * in C and run the Python path (integrations/torch/eager.py, regions.py) only when there is
 * something to do (docs/decisions/0058-hook-gates-in-c.md):
 *
 * - ``module_call_gate(func, tl, inner, graph_type)``, ``module_call_skip(mod)`` and
 *   ``module_call_root(mod, run, ex, enabled, index, grad_on)``: a C vectorcall for the Python
 *   ``Module.__call__`` (see its section below).
 * - ``backward_gate(name, tl, orig, slow, pending, after, enabled, index)`` and
 *   ``backward_settle(gate, ex, run)``: a builtin function for ``torch.autograd.backward`` /
 *   ``grad`` (named ``name``, with ``orig``'s docstring): ``orig`` when ``tl.grad_root`` is None
 *   or ``tl.depth`` > 0, the settled graph's backward recorded in C when ``tl.grad_root`` is the
 *   graph last settled, else ``slow``.
 * - ``region_methods(cls, enter, exit, ring, ticks, strings, intern, enabled, index)``: the
 *   ``__enter__``/``__exit__`` method descriptors of ``record_function``: enter stamps the start on
 *   the instance, exit appends the framework event to the ring (``strings``/``intern``: the label's
 *   id) and advances ``ticks`` (the ring's event counter).  One per process, as ``install_regions``
 *   wraps the class once.
 *
 * Our bookkeeping never fails the user's call: an error in it is cleared and that call goes
 * unrecorded (or takes the Python path, which decides as before). */

static PyObject *str_grad_root;  /* "grad_root" */
static PyObject *str_t0_attr;    /* "_neuron_explorer_t0" */
static PyObject *str_name;       /* "name" */
static PyObject *int_one;        /* 1 */

/* ---- Module.__call__ ------------------------------------------------------------------------ */

/* The eager hooks' ``Module.__call__`` stays a Python function: Dynamo short-cuts a module call to
 * its forward only when ``type(mod).__call__`` is the function it saw (a bound Python method), and
 * traces its polyfill in place of ours.  But the calls that reach it from C -- ``mod(x)`` (the
 * type's call slot), ``super().__call__`` from an FX graph module -- go through the function's
 * vectorcall, and ``module_call_gate`` puts one there that answers the calls with nothing to
 * record without running the Python frame: nested calls (``tl.depth`` > 0) and FX graph modules go
 * straight to ``inner`` (Module's own), and the compiled root last marked with
 * ``module_call_skip(mod)`` runs ``inner`` with ``tl.depth`` 1 (its graphs are its executions).
 * The recorded root last settled with ``module_call_root`` (once its graph's first call has been
 * recorded and its C wrapper made) is recorded here too: depth 1, ``grad_root`` set as the Python
 * code sets it, the C wrapper, depth 0 -- no Python frame of ours (docs/decisions/0161-*.md).
 * Everything else runs the function's own code, as before.  One function per process has the gate
 * (a later one takes it over; the earlier then runs its own code). */

static struct {
    PyObject *func, *tl, *inner, *graph_type;
    PyObject *skip;  /* a weak reference to the compiled root last seen, or NULL */
    /* the recorded root last settled (module_call_root), all NULL when none: a weak reference to
     * the module, the C wrapper recording its calls, its graph (the eager hooks' _Exec, what
     * tl.grad_root names), Runtime.enabled and the executions' index in it, torch.is_grad_enabled */
    PyObject *root, *root_run, *root_ex, *enabled, *grad_on;
    Py_ssize_t index;
} mg;

/* ``enabled[index]`` is True (a list of bools changed in place: False in a forked child). */
static inline int
recording_on(PyObject *enabled, Py_ssize_t index)
{
    return index < PyList_GET_SIZE(enabled) && PyList_GET_ITEM(enabled, index) == Py_True;
}

/* The settled root's call, as the Python ``__call__`` then ``record`` run it: depth 1, grad_root
 * set when it is None and gradients are on, the C wrapper, depth 0.  NULL from the call with its
 * exception unchanged; a bookkeeping error before the call hands it to the Python code (which
 * decides as before), one after it is cleared. */
static PyObject *
mg_root_call(PyObject *func, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *run = mg.root_run, *ex = mg.root_ex;
    if (tl_set(mg.tl, str_depth, int_one) < 0) {
        PyErr_Clear();
        return _PyFunction_Vectorcall(func, args, nargsf, kwnames);
    }
    /* held for the call: another thread may settle another root meanwhile */
    Py_INCREF(run);
    Py_INCREF(ex);
    PyObject *root = tl_grad_root(mg.tl, str_grad_root);
    if (root == Py_None) {
        PyObject *on = PyObject_CallNoArgs(mg.grad_on);
        int yes = on != NULL ? PyObject_IsTrue(on) : -1;
        Py_XDECREF(on);
        if (yes > 0 && tl_set(mg.tl, str_grad_root, ex) < 0)
            yes = -1;
        if (yes < 0)
            PyErr_Clear();
    }
    else if (root == NULL)
        PyErr_Clear();
    Py_XDECREF(root);
    PyObject *out = PyObject_Vectorcall(run, args, nargsf, kwnames);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (tl_set(mg.tl, str_depth, int_zero) < 0)
        PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    Py_DECREF(ex);
    Py_DECREF(run);
    return out;
}

static PyObject *
mg_vectorcall(PyObject *func, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (func == mg.func && PyVectorcall_NARGS(nargsf) >= 1) {
        PyObject *self = args[0];
        int nested = tl_nested(mg.tl);
        if (nested > 0 || (nested == 0 && PyObject_TypeCheck(self, (PyTypeObject *)mg.graph_type)))
            return PyObject_Vectorcall(mg.inner, args, nargsf, kwnames);
        if (nested == 0 && mg.root != NULL && PyWeakref_GET_OBJECT(mg.root) == self &&
                recording_on(mg.enabled, mg.index))
            return mg_root_call(func, args, nargsf, kwnames);
        if (nested == 0 && mg.skip != NULL && PyWeakref_GET_OBJECT(mg.skip) == self) {
            if (tl_set(mg.tl, str_depth, int_one) == 0) {
                PyObject *r = PyObject_Vectorcall(mg.inner, args, nargsf, kwnames);
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                if (tl_set(mg.tl, str_depth, int_zero) < 0)
                    PyErr_Clear();
                PyErr_Restore(et, ev, tb);
                return r;
            }
            PyErr_Clear();
        }
    }
    return _PyFunction_Vectorcall(func, args, nargsf, kwnames);
}

static PyObject *
fp_module_call_gate(PyObject *mod, PyObject *args)
{
    PyObject *func, *tl, *inner, *graph_type;
    if (!PyArg_ParseTuple(args, "O!OOO!:module_call_gate", &PyFunction_Type, &func, &tl, &inner, &PyType_Type,
                          &graph_type))
        return NULL;
    if (!PyCallable_Check(inner)) {
        PyErr_SetString(PyExc_TypeError, "module_call_gate: inner must be callable");
        return NULL;
    }
    Py_INCREF(func);
    Py_INCREF(tl);
    Py_INCREF(inner);
    Py_INCREF(graph_type);
    Py_XSETREF(mg.func, func);
    Py_XSETREF(mg.tl, tl);
    Py_XSETREF(mg.inner, inner);
    Py_XSETREF(mg.graph_type, graph_type);
    Py_CLEAR(mg.skip);
    Py_CLEAR(mg.root);
    Py_CLEAR(mg.root_run);
    Py_CLEAR(mg.root_ex);
#if PY_VERSION_HEX >= 0x030C0000
    PyFunction_SetVectorcall((PyFunctionObject *)func, mg_vectorcall);
#else
    ((PyFunctionObject *)func)->vectorcall = mg_vectorcall;
#endif
    Py_RETURN_NONE;
}

static PyObject *
fp_module_call_skip(PyObject *mod, PyObject *obj)
{
    if (mg.func == NULL)
        Py_RETURN_NONE;
    PyObject *ref = PyWeakref_NewRef(obj, NULL);
    if (ref == NULL)
        PyErr_Clear();  /* no weak references: its calls keep running the Python code */
    Py_XSETREF(mg.skip, ref);
    Py_RETURN_NONE;
}

/* module_call_root(mod, run, ex, enabled, index, grad_on): mod's calls as a root (no module's
 * forward running on the thread) are recorded by `run` (its graph's C wrapper) in C from now on;
 * module_call_root(None) forgets.  One root at a time: the last settled. */
static PyObject *
fp_module_call_root(PyObject *mod, PyObject *args)
{
    PyObject *obj, *run = NULL, *ex = NULL, *enabled = NULL, *grad_on = NULL;
    Py_ssize_t index = 0;
    if (!PyArg_ParseTuple(args, "O|OOO!nO:module_call_root", &obj, &run, &ex, &PyList_Type, &enabled, &index,
                          &grad_on))
        return NULL;
    if (obj != Py_None && (run == NULL || ex == NULL || enabled == NULL || grad_on == NULL || index < 0 ||
                           !PyCallable_Check(run) || !PyCallable_Check(grad_on))) {
        PyErr_SetString(PyExc_TypeError, "module_call_root(mod, run, ex, enabled, index, grad_on): callables, "
                        "a list and an index >= 0");
        return NULL;
    }
    if (obj == Py_None || mg.func == NULL) {  /* (no gate: nothing would read it) */
        Py_CLEAR(mg.root);
        Py_CLEAR(mg.root_run);
        Py_CLEAR(mg.root_ex);
        Py_RETURN_NONE;
    }
    if (mg.root != NULL && PyWeakref_GET_OBJECT(mg.root) == obj && mg.root_run == run && mg.root_ex == ex)
        Py_RETURN_NONE;  /* (already: the common case of a call that took the Python path) */
    PyObject *ref = PyWeakref_NewRef(obj, NULL);
    if (ref == NULL)
        return NULL;
    Py_INCREF(run);
    Py_INCREF(ex);
    Py_INCREF(enabled);
    Py_INCREF(grad_on);
    Py_XSETREF(mg.root, ref);
    Py_XSETREF(mg.root_run, run);
    Py_XSETREF(mg.root_ex, ex);
    Py_XSETREF(mg.enabled, enabled);
    Py_XSETREF(mg.grad_on, grad_on);
    mg.index = index;
    Py_RETURN_NONE;
}

/* ---- torch.autograd.backward / grad ------------------------------------------------------- */

/* A backward gate's state: a list; BW_FOR and BW_RUN are set by backward_settle. */
enum { BW_TL, BW_ORIG, BW_SLOW, BW_PENDING, BW_AFTER, BW_ENABLED, BW_INDEX, BW_FOR, BW_RUN, BW_QUEUED, BW_N };

/* The settled backward, as the Python ``run`` then ``record`` run it: grad_root None, depth 1,
 * the C wrapper, depth 0, then ``after()`` when collectives wait for their end: ``pending`` (a
 * dict) not empty, or the C++ kernels' queue not empty (``queued``: the address of its size, a
 * ``long`` the extension of integrations/torch/native.py keeps for the process's life). */
static PyObject *
bw_run(PyObject *state, PyObject *tl, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *run = PyList_GET_ITEM(state, BW_RUN), *pending = PyList_GET_ITEM(state, BW_PENDING);
    PyObject *after = PyList_GET_ITEM(state, BW_AFTER);
    Py_INCREF(run);
    Py_INCREF(after);
    Py_INCREF(pending);
    PyObject *out = NULL;
    if (tl_set(tl, str_grad_root, Py_None) == 0 && tl_set(tl, str_depth, int_one) == 0)
        out = PyObject_Vectorcall(run, args, (size_t)nargs, kwnames);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (tl_set(tl, str_depth, int_zero) < 0)
        PyErr_Clear();
    PyObject *queued = PyList_GET_ITEM(state, BW_QUEUED);
    int waiting = PyDict_Check(pending) && PyDict_GET_SIZE(pending) > 0;
    if (!waiting && PyLong_CheckExact(queued)) {
        long *size = (long *)PyLong_AsVoidPtr(queued);
        waiting = size != NULL && __atomic_load_n(size, __ATOMIC_RELAXED) > 0;
        if (size == NULL)
            PyErr_Clear();
    }
    if (after != Py_None && waiting) {
        PyObject *r = PyObject_CallNoArgs(after);  /* (never raises: it warns instead) */
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
    }
    PyErr_Restore(et, ev, tb);
    Py_DECREF(pending);
    Py_DECREF(after);
    Py_DECREF(run);
    return out;
}

static PyObject *
bw_call(PyObject *state, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *tl = PyList_GET_ITEM(state, BW_TL), *orig = PyList_GET_ITEM(state, BW_ORIG);
    PyObject *slow = PyList_GET_ITEM(state, BW_SLOW);
    PyObject *root = tl_grad_root(tl, str_grad_root);
    if (root == NULL) {
        PyErr_Clear();
        return PyObject_Vectorcall(slow, args, (size_t)nargs, kwnames);
    }
    int none = root == Py_None, settled = root == PyList_GET_ITEM(state, BW_FOR);
    Py_DECREF(root);
    int nested = none ? 0 : tl_nested(tl);
    if (none || nested > 0)
        return PyObject_Vectorcall(orig, args, (size_t)nargs, kwnames);
    PyObject *enabled = PyList_GET_ITEM(state, BW_ENABLED);
    if (settled && nested == 0 && PyList_Check(enabled) &&
            recording_on(enabled, PyLong_AsSsize_t(PyList_GET_ITEM(state, BW_INDEX))))
        return bw_run(state, tl, args, nargs, kwnames);
    if (PyErr_Occurred())
        PyErr_Clear();
    return PyObject_Vectorcall(slow, args, (size_t)nargs, kwnames);
}

/* backward_gate(name, tl, orig, slow): the method definition is made per gate (two a process) and
 * kept for the process's life, so the builtin carries torch's own name and docstring for help(). */
static PyObject *
fp_backward_gate(PyObject *mod, PyObject *args)
{
    const char *name;
    PyObject *tl, *orig, *slow, *pending = Py_None, *after = Py_None, *enabled = Py_None, *queued = Py_None;
    Py_ssize_t index = 0;
    if (!PyArg_ParseTuple(args, "sOOO|OOOnO:backward_gate", &name, &tl, &orig, &slow, &pending, &after, &enabled,
                          &index, &queued))
        return NULL;
    if (!PyCallable_Check(orig) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "backward_gate: orig and slow must be callable");
        return NULL;
    }
    const char *doc = NULL;
    PyObject *d = PyObject_GetAttrString(orig, "__doc__");
    if (d != NULL && PyUnicode_Check(d))
        doc = PyUnicode_AsUTF8(d);
    if (doc == NULL)
        PyErr_Clear();
    PyMethodDef *def = PyMem_RawCalloc(1, sizeof(PyMethodDef));
    char *name_copy = PyMem_RawMalloc(strlen(name) + 1);
    char *doc_copy = doc != NULL ? PyMem_RawMalloc(strlen(doc) + 1) : NULL;
    if (doc_copy != NULL)
        strcpy(doc_copy, doc);
    Py_XDECREF(d);  /* (doc points into it: copied first) */
    if (def == NULL || name_copy == NULL || (doc != NULL && doc_copy == NULL)) {
        PyMem_RawFree(def);
        PyMem_RawFree(name_copy);
        PyMem_RawFree(doc_copy);
        return PyErr_NoMemory();
    }
    strcpy(name_copy, name);
    def->ml_name = name_copy;
    def->ml_meth = (PyCFunction)(void (*)(void))bw_call;
    def->ml_flags = METH_FASTCALL | METH_KEYWORDS;
    def->ml_doc = doc_copy;
    PyObject *ix = PyLong_FromSsize_t(index);
    PyObject *state = ix != NULL ? PyList_New(BW_N) : NULL;
    if (state == NULL) {
        Py_XDECREF(ix);
        return NULL;  /* (the definition is a few bytes, kept) */
    }
    PyObject *items[BW_N] = {tl, orig, slow, pending, after, enabled, ix, Py_None, Py_None, queued};
    for (int i = 0; i < BW_N; i++) {
        Py_INCREF(items[i]);
        PyList_SET_ITEM(state, i, items[i]);
    }
    Py_DECREF(ix);
    PyObject *f = PyCFunction_NewEx(def, state, NULL);
    Py_DECREF(state);
    return f;
}

/* backward_settle(gate, ex, run): the backward that follows a root run of graph `ex` (tl.grad_root
 * is ex) is recorded by `run` (its C wrapper) in C from now on; backward_settle(gate, None, None)
 * forgets.  One graph per gate at a time: the last settled. */
static PyObject *
fp_backward_settle(PyObject *mod, PyObject *args)
{
    PyObject *gate, *ex, *run;
    if (!PyArg_ParseTuple(args, "OOO:backward_settle", &gate, &ex, &run))
        return NULL;
    PyObject *state = PyCFunction_Check(gate) && PyCFunction_GET_FUNCTION(gate) == (PyCFunction)(void (*)(void))bw_call
        ? PyCFunction_GET_SELF(gate) : NULL;
    if (state == NULL || !PyList_CheckExact(state) || PyList_GET_SIZE(state) != BW_N) {
        PyErr_SetString(PyExc_TypeError, "backward_settle: gate must be a backward_gate");
        return NULL;
    }
    if (ex != Py_None && (!PyCallable_Check(run) || !PyList_Check(PyList_GET_ITEM(state, BW_ENABLED)))) {
        PyErr_SetString(PyExc_TypeError, "backward_settle: run must be callable, and the gate made with enabled");
        return NULL;
    }
    if (ex == Py_None)
        run = Py_None;
    /* run first: a call reading the pair sees either the old pair or ex with a run made for it */
    Py_INCREF(run);
    if (PyList_SetItem(state, BW_RUN, run) < 0)
        return NULL;
    Py_INCREF(ex);
    if (PyList_SetItem(state, BW_FOR, ex) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- record_function regions --------------------------------------------------------------- */

static struct {
    PyObject *enter, *exit, *ticks, *strings, *intern, *enabled;
    RingBuffer *ring;
    Py_ssize_t index;
} rg;

/* The start of a region is kept from its enter to its exit in a small table keyed by the instance,
 * where an int set as an attribute (``_neuron_explorer_t0``, what the Python path does) cost an int
 * made and freed, a set and a get: ~500 instructions a region, 1k a compiled step that opens two
 * (issue 33).  An entry stays after its exit (a second exit without an enter records the region
 * again, as the attribute did) until a region entered later takes its place: the entries are taken
 * in turn, skipping those still open, which are never taken.  With all RG_OPEN entries open, the
 * start goes to the attribute as before, and an exit that finds no entry reads the attribute.
 * The instance is held by identity only (no reference): a later instance at the same address
 * takes its entry over at its enter, and torch's __exit__ refuses an instance never entered. */
#define RG_OPEN 8
static struct {
    PyObject *obj;  /* borrowed, compared only; NULL: free */
    long long t0;
    int open;
} rg_open[RG_OPEN];
static int rg_open_next;  /* the entry taken next, unless open */

/* The entry of `obj`, or -1. */
static inline int
rg_find(PyObject *obj)
{
    for (int i = 0; i < RG_OPEN; i++) {
        if (rg_open[i].obj == obj)
            return i;
    }
    return -1;
}

/* Keep `obj`'s start: in its own entry, else in the next one not open; -1 when every entry is
 * open (the caller then sets the attribute). */
static int
rg_keep(PyObject *obj, long long t0)
{
    int at = rg_find(obj);
    for (int k = 0; at < 0 && k < RG_OPEN; k++) {
        int i = (rg_open_next + k) % RG_OPEN;
        if (!rg_open[i].open) {
            at = i;
            rg_open_next = (i + 1) % RG_OPEN;
        }
    }
    if (at >= 0) {
        rg_open[at].obj = obj;
        rg_open[at].t0 = t0;
        rg_open[at].open = 1;
    }
    return at;
}

/* Mark `obj`'s entry closed (it stays until taken); its index, or -1 when it has none. */
static inline int
rg_close(PyObject *obj)
{
    int i = rg_find(obj);
    if (i >= 0)
        rg_open[i].open = 0;
    return i;
}

static PyObject *
rg_enter(PyObject *self, PyObject *unused)
{
    if (ew_paused)  /* benchmarks only (pause_executions): torch's own __enter__, nothing of ours */
        return PyObject_CallOneArg(rg.enter, self);
    long long t0 = now_ns();
    if (rg_keep(self, t0) < 0) {
        PyObject *t = PyLong_FromLongLong(t0);
        if (t == NULL || PyObject_SetAttr(self, str_t0_attr, t) < 0)
            PyErr_Clear();
        Py_XDECREF(t);
    }
    PyObject *out = PyObject_CallOneArg(rg.enter, self);
    if (out == NULL)
        (void)rg_close(self);  /* (no exit follows: its entry may be taken, its start kept meanwhile) */
    return out;
}

/* The last labels looked up, by content: torch builds its optimizers' labels anew at each call
 * ("Optimizer.step#SGD.step"), so a dict lookup hashed a fresh string every time; comparing the
 * few recent ones costs a length check and a memcmp.  The ids never change (``strings`` only grows). */
#define RG_LABELS 4
static struct {
    PyObject *name;  /* an exact str, or NULL */
    long long sid;
} rg_labels[RG_LABELS];
static int rg_labels_next;

static int
rg_same_text(PyObject *a, PyObject *b)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    return a == b || (PyUnicode_GET_LENGTH(b) == n && PyUnicode_KIND(a) == PyUnicode_KIND(b) &&
                      memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * PyUnicode_KIND(a)) == 0);
}

/* The label's string id: strings[name], else intern(name as a str); -1 when it cannot be had. */
static long long
rg_label(PyObject *name)
{
    int text = PyUnicode_CheckExact(name) && PyUnicode_IS_READY(name);
    if (text) {
        for (int i = 0; i < RG_LABELS && rg_labels[i].name != NULL; i++) {
            if (rg_same_text(rg_labels[i].name, name))
                return rg_labels[i].sid;
        }
    }
    PyObject *sid = text ? PyDict_GetItemWithError(rg.strings, name) : NULL;
    if (sid != NULL) {
        long long v = PyLong_AsLongLong(sid);
        if (v >= 0 && !PyErr_Occurred()) {
            Py_INCREF(name);
            Py_XSETREF(rg_labels[rg_labels_next].name, name);
            rg_labels[rg_labels_next].sid = v;
            rg_labels_next = (rg_labels_next + 1) % RG_LABELS;
        }
        return v;
    }
    if (PyErr_Occurred())
        return -1;
    PyObject *s = PyObject_Str(name);
    if (s == NULL)
        return -1;
    PyObject *got = PyObject_CallOneArg(rg.intern, s);
    Py_DECREF(s);
    if (got == NULL)
        return -1;
    long long v = PyLong_AsLongLong(got);
    Py_DECREF(got);
    return v;
}

static void
rg_record(PyObject *self, int entry, long long t1)
{
    if (rg.index >= PyList_GET_SIZE(rg.enabled) || PyList_GET_ITEM(rg.enabled, rg.index) != Py_True)
        return;
    long long t0 = -1, sid = -1;
    if (entry >= 0)
        t0 = rg_open[entry].t0;
    else {
        PyObject *t = PyObject_GetAttr(self, str_t0_attr);  /* 0 or missing: entered before we hooked */
        if (t != NULL) {
            t0 = as_ns(t);
            Py_DECREF(t);
        }
    }
    if (t0 > 0) {
        PyObject *name = PyObject_GetAttr(self, str_name);
        if (name != NULL) {
            sid = rg_label(name);
            Py_DECREF(name);
        }
    }
    if (t0 > 0 && sid >= 0) {
        long long v[WIDTH] = {0};
        v[0] = rg.index;  /* the framework event's type, which is also its index in `enabled` */
        v[1] = t0;
        v[2] = t1;
        v[3] = thread_id();
        v[4] = sid;
        if (ring_push(rg.ring, v) == 0)
            (void)next_id(rg.ticks, NULL);  /* the event counted: a Counter's in place, no int made */
    }
    if (PyErr_Occurred())
        PyErr_Clear();
}

static PyObject *
rg_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* record_function.__exit__(self, exc_type, exc_value, traceback): three arguments */
    PyObject *stack[4] = {self};
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "__exit__ takes 3 arguments after self (%zd given)", nargs);
        return NULL;
    }
    memcpy(stack + 1, args, (size_t)nargs * sizeof(PyObject *));
    PyObject *out = PyObject_Vectorcall(rg.exit, stack, (size_t)nargs + 1, NULL);
    int entry = rg_close(self);  /* (whether it is recorded or not: paused, off, or torch's exit raised) */
    if (out != NULL && !ew_paused)
        rg_record(self, entry, now_ns());
    return out;
}

static PyMethodDef rg_defs[] = {
    {"__enter__", (PyCFunction)rg_enter, METH_NOARGS, "record_function.__enter__, timed (runtime/_hooks.h)"},
    {"__exit__", (PyCFunction)(void (*)(void))rg_exit, METH_FASTCALL,
     "record_function.__exit__, appending the region's framework event (runtime/_hooks.h)"},
};

static PyObject *
fp_region_methods(PyObject *mod, PyObject *args)
{
    PyObject *cls, *enter, *exit_, *ring, *ticks, *strings, *intern, *enabled;
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "O!OOO!OO!OO!n:region_methods", &PyType_Type, &cls, &enter, &exit_, &RingBufferType,
                          &ring, &ticks, &PyDict_Type, &strings, &intern, &PyList_Type, &enabled, &index))
        return NULL;
    if (rg.enter != NULL)
        Py_RETURN_NONE;  /* one per process */
    if (((RingBuffer *)ring)->width != WIDTH || index < 0 || !PyCallable_Check(enter) || !PyCallable_Check(exit_) ||
            Py_TYPE(ticks)->tp_iternext == NULL || !PyCallable_Check(intern)) {
        PyErr_SetString(PyExc_TypeError, "region_methods: a capture ring, callables, a ticks iterator and an index >= 0");
        return NULL;
    }
    PyObject *e = PyDescr_NewMethod((PyTypeObject *)cls, &rg_defs[0]);
    PyObject *x = e != NULL ? PyDescr_NewMethod((PyTypeObject *)cls, &rg_defs[1]) : NULL;
    PyObject *pair = x != NULL ? PyTuple_Pack(2, e, x) : NULL;
    Py_XDECREF(e);
    Py_XDECREF(x);
    if (pair == NULL)
        return NULL;
    PyObject *objs[] = {enter, exit_, ticks, strings, intern, enabled, ring};
    for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++)
        Py_INCREF(objs[i]);
    rg.enter = enter;
    rg.exit = exit_;
    rg.ticks = ticks;
    rg.strings = strings;
    rg.intern = intern;
    rg.enabled = enabled;
    rg.ring = (RingBuffer *)ring;
    rg.index = index;
    return pair;
}

/* ---- the gradient snapshot's loop ------------------------------------------------------------ */

/* ``grad_entries(groups, tensor_type, core)``: for each group of ``groups`` (a sequence of an
 * optimizer's ``param_groups``) and each parameter of ``group.get("params", ())``, the gradient
 * ``getattr(p, "grad", None)`` when it is a ``tensor_type``, as ``(storage.data_ptr(), core,
 * int(storage.nbytes()))`` of its ``untyped_storage()``, in order.  Twin: ``_grad_entries`` of
 * integrations/torch/memory.py, which the tests hold this to.  Any exception of those calls
 * propagates (the snapshot then keeps nothing, as the Python loop did); as a Python frame the loop
 * cost ~23k instructions a call for 4 gradients, most of it the interpreter's
 * (docs/decisions/0206-*.md). */
static PyObject *str_params, *str_grad, *str_untyped_storage, *str_data_ptr, *str_nbytes, *str_get;

static int
ge_add(PyObject *out, PyObject *p, PyObject *tensor_type, PyObject *core)
{
    PyObject *t = PyObject_GetAttr(p, str_grad);
    if (t == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;  /* getattr(p, "grad", None): no gradient */
    }
    int is = PyObject_IsInstance(t, tensor_type);
    if (is <= 0) {
        Py_DECREF(t);
        return is;
    }
    PyObject *st = PyObject_CallMethodNoArgs(t, str_untyped_storage);
    Py_DECREF(t);
    if (st == NULL)
        return -1;
    PyObject *ptr = PyObject_CallMethodNoArgs(st, str_data_ptr);
    PyObject *nb = ptr != NULL ? PyObject_CallMethodNoArgs(st, str_nbytes) : NULL;
    Py_DECREF(st);
    PyObject *nbi = nb != NULL ? PyNumber_Long(nb) : NULL;
    Py_XDECREF(nb);
    PyObject *e = nbi != NULL ? PyTuple_Pack(3, ptr, core, nbi) : NULL;
    Py_XDECREF(ptr);
    Py_XDECREF(nbi);
    if (e == NULL)
        return -1;
    int rc = PyList_Append(out, e);
    Py_DECREF(e);
    return rc;
}

static PyObject *
fp_grad_entries(PyObject *Py_UNUSED(mod), PyObject *args)
{
    PyObject *groups, *tensor_type, *core;
    if (!PyArg_ParseTuple(args, "OOO:grad_entries", &groups, &tensor_type, &core))
        return NULL;
    PyObject *out = PyList_New(0);
    PyObject *gs = out != NULL ? PySequence_Fast(groups, "grad_entries: groups must be a sequence") : NULL;
    if (gs == NULL) {
        Py_XDECREF(out);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(gs); i++) {
        PyObject *g = PySequence_Fast_GET_ITEM(gs, i), *params;
        if (PyDict_CheckExact(g)) {
            params = PyDict_GetItemWithError(g, str_params);
            if (params == NULL && PyErr_Occurred())
                goto fail;
            if (params == NULL)
                continue;  /* g.get("params", ()) */
            Py_INCREF(params);
        } else {
            PyObject *empty = PyTuple_New(0);
            params = empty != NULL ? PyObject_CallMethodObjArgs(g, str_get, str_params, empty, NULL) : NULL;
            Py_XDECREF(empty);
            if (params == NULL)
                goto fail;
        }
        PyObject *it = PyObject_GetIter(params);
        Py_DECREF(params);
        if (it == NULL)
            goto fail;
        PyObject *p;
        while ((p = PyIter_Next(it)) != NULL) {
            int rc = ge_add(out, p, tensor_type, core);
            Py_DECREF(p);
            if (rc < 0)
                break;
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            goto fail;
    }
    Py_DECREF(gs);
    return out;
fail:
    Py_DECREF(gs);
    Py_DECREF(out);
    return NULL;
}

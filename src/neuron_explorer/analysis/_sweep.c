/* The step detector's covered time in one pass (analysis/steps.py, ``_figures``; decision 0192).
 *
 *   covered(points, intervals) -> bytes or None
 *
 * ``points``: int64, ascending (repeats allowed): the steps' distinct boundaries.  ``intervals``: a
 * tuple of 12 int64 arrays, the starts and the ends of six categories in priority order (compute,
 * exposed collective, wait, compile, data loading, host): category k's intervals are
 * ``[s, max(e, s))`` of ``intervals[2k]`` and ``intervals[2k + 1]``, listed by ascending start.
 *
 * Returns 8 rows of ``len(points)`` int64 (native order), row r at ``[r * n, (r + 1) * n)``: per
 * point, the time before it covered by the union of categories 0..r (r < 6), by category 1 alone
 * (r = 6: the collectives) and by categories 1 or 2 (r = 7: collectives or waits).  What the numpy
 * twin finds from each union's merged runs and their cumulative covered time (``_Spans.within``);
 * here one sweep over the six lists merged by start: each category's current run is [its first
 * start, the furthest end of the intervals that started in it], and between two breakpoints (a
 * start, a run's end, a point) the set of categories on is constant.  None when some category's
 * starts are not ascending (the caller sorts that one and asks again).  Integer arithmetic only:
 * the same integers as the twin.
 *
 *   check_events(typ, ntypes, slots, start, end) -> (tmax, slot, index, lo, hi)
 *
 * A chunk of a capture's events checked in one pass for the reader (``analysis.reader``, decision
 * 0215): type ids, the argument slots' string and model ids against their type's limits, and the
 * range of the timestamps (see the function).
 *
 *   keep(name, src, model, model_valid, model_offset, type_of, fw_of, (fw_type, exec_type, ml_type),
 *        (start, end, ids), (typ, fw, rows, ostart, oend, oids, omodel, order, bounds)) -> int
 *
 * One events file's rows a diff reads (``analysis.occurrences._File``; decision 0209), in one pass:
 * row i's type is ``type_of[name[i]]`` and it is a framework region when ``fw_of[src[i]]``; it is
 * kept when it is a framework region or its type is >= 0 and not ``fw_type``.  The kept rows'
 * type, framework flag, index, start, end, id and graph (``model[i]`` for an execution or a model
 * load outside the framework whose bit in ``model_valid`` is set, counted from bit
 * ``model_offset``; else -1; ``model`` None: -1) are written in row order at the front of the
 * outputs (each at least as long as the file); ``order`` gets the kept rows (their positions among
 * the kept) grouped by the type the step detector sees (``fw_type`` for a framework region), each
 * group in row order, group t at ``[bounds[t], bounds[t + 1])``.  Returns the count kept.
 * ``name``, ``src`` and ``model``: int32 dictionary indices (no nulls in the first two);
 * ``type_of`` int64 and ``fw_of`` uint8 per dictionary value; the outputs int64 but ``fw`` (bool
 * or uint8).  ``ValueError`` for an index outside its table, a type at or beyond
 * ``len(bounds) - 1`` or inputs of different lengths.  Its numpy twin: ``_File._keep_numpy``.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define CATS 6
#define ROWS 8
#define DROWS 10

static int get_int64(PyObject *o, Py_buffer *b, const char *what) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->itemsize != 8 || b->format == NULL || (strcmp(b->format, "l") && strcmp(b->format, "q")
                                                   && strcmp(b->format, "<q") && strcmp(b->format, "=q"))) {
        PyErr_Format(PyExc_TypeError, "%s: an int64 buffer is needed", what);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

typedef struct {
    int64_t acc[ROWS];  /* covered time so far, per row */
    int64_t cur;        /* the sweep's time: everything before it is accounted */
    int64_t re[CATS];   /* each category's current run end (INT64_MIN: none yet) */
    int act[CATS];      /* the categories that have intervals (the others are never on) */
    int nact;
    const int64_t *points;
    Py_ssize_t np, ip;
    int64_t *out;       /* the figures per point (``upto``), or NULL: per step (``steps``) */
    int64_t **steps;    /* consecutive steps (step k from point k to k + 1): their DROWS rows of
                         * np - 1, written as each point is passed (no figures per point kept) */
    int64_t prev[ROWS]; /* (with ``steps``) the figures at the point before */
} sweep;

static inline int64_t pos(int64_t x) { return x > 0 ? x : 0; }

/* step k's DROWS figures (``out[r][k]``) from the covered time at its ends ``ua`` and ``ub``
 * (ROWS each) and its wall time */
static inline void figure(const int64_t *ua, const int64_t *ub, int64_t wall, int64_t *const *out, Py_ssize_t k) {
    int64_t cov[ROWS];
    for (int r = 0; r < ROWS; r++) cov[r] = pos(ub[r] - ua[r]);
    int64_t prev = 0;
    for (int r = 0; r < CATS; r++) {
        out[r][k] = pos(cov[r] - prev);
        if (cov[r] > prev) prev = cov[r];
    }
    out[6][k] = pos(wall - prev);
    out[7][k] = cov[6];
    out[8][k] = pos(wall - cov[7]);
    out[9][k] = pos(cov[2] - cov[7]);
}

/* rows that hold a category set ``mask`` (non-zero): the unions from its lowest category on */
static void add(sweep *w, unsigned mask, int64_t len) {
    int low = __builtin_ctz(mask);
    for (int r = low; r < CATS; r++) w->acc[r] += len;
    if (mask & 2u) w->acc[6] += len;
    if (mask & 6u) w->acc[7] += len;
}

/* the ROWS figures of a point side by side (``out``: point-major, one cache line a point; the
 * rows strided by the number of points cost a cache miss per row and point at 10^5 steps) */
static inline void put(sweep *w) {
    if (w->steps == NULL) {
        memcpy(w->out + (Py_ssize_t)ROWS * w->ip, w->acc, sizeof w->acc);
        return;
    }
    if (w->ip > 0)
        figure(w->prev, w->acc, w->points[w->ip] - w->points[w->ip - 1], w->steps, w->ip - 1);
    memcpy(w->prev, w->acc, sizeof w->acc);
}

static void record(sweep *w) {
    while (w->ip < w->np && w->points[w->ip] <= w->cur) {
        put(w);
        w->ip++;
    }
}

/* account the time from ``cur`` up to ``t`` (runs end on the way; points on the way are recorded) */
static void advance(sweep *w, int64_t t, int last) {
    for (;;) {
        int64_t nb = t;
        unsigned mask = 0;
        for (int j = 0; j < w->nact; j++) {
            int c = w->act[j];
            if (w->re[c] > w->cur) {
                mask |= 1u << c;
                if (w->re[c] < nb) nb = w->re[c];
            }
        }
        if (w->ip < w->np && w->points[w->ip] < nb) nb = w->points[w->ip];
        if (mask && nb > w->cur) add(w, mask, nb - w->cur);
        if (nb > w->cur) w->cur = nb;
        record(w);
        if (w->ip >= w->np) return;
        if (!last && w->cur >= t) return;
        if (last && !mask) { /* nothing on and no start left: the points ahead see no more time */
            for (; w->ip < w->np; w->ip++) put(w);
            return;
        }
    }
}

/* the arguments both functions take: the points and the 12 arrays, checked; 1 when some category
 * is not by start (the caller answers None), -1 on an error (set), 0 when the sweep can run */
typedef struct {
    Py_buffer pb, bufs[2 * CATS];
    int got;
    const int64_t *s[CATS], *e[CATS];
    Py_ssize_t n[CATS];
    const int64_t *points;
    Py_ssize_t np;
} inputs;

static int take_inputs(inputs *in, PyObject *opoints, PyObject *ocats) {
    in->got = -1;
    if (PyTuple_GET_SIZE(ocats) != 2 * CATS) {
        PyErr_SetString(PyExc_ValueError, "intervals: 12 arrays (the starts and ends of 6 categories)");
        return -1;
    }
    if (get_int64(opoints, &in->pb, "points") < 0) return -1;
    in->got = 0;
    for (; in->got < 2 * CATS; in->got++)
        if (get_int64(PyTuple_GET_ITEM(ocats, in->got), &in->bufs[in->got], in->got % 2 ? "ends" : "starts") < 0)
            return -1;
    int unsorted = 0;
    for (int c = 0; c < CATS; c++) {
        in->s[c] = in->bufs[2 * c].buf;
        in->e[c] = in->bufs[2 * c + 1].buf;
        in->n[c] = in->bufs[2 * c].len / 8;
        if (in->bufs[2 * c + 1].len / 8 != in->n[c]) {
            PyErr_SetString(PyExc_ValueError, "a category's starts and ends differ in length");
            return -1;
        }
        for (Py_ssize_t k = 1; k < in->n[c] && !unsorted; k++)
            if (in->s[c][k] < in->s[c][k - 1]) unsorted = 1;  /* not by start: the caller sorts it */
    }
    if (unsorted) return 1;
    in->np = in->pb.len / 8;
    in->points = in->pb.buf;
    for (Py_ssize_t k = 1; k < in->np; k++) {
        if (in->points[k] < in->points[k - 1]) {
            PyErr_SetString(PyExc_ValueError, "points: not ascending");
            return -1;
        }
    }
    return 0;
}

static void release_inputs(inputs *in) {
    if (in->got < 0) return;
    PyBuffer_Release(&in->pb);
    for (int k = 0; k < in->got; k++) PyBuffer_Release(&in->bufs[k]);
}

/* the sweep itself: ``out`` gets ROWS figures per point, point after point (``out[ip * ROWS + r]``;
 * no Python calls: run without the GIL) */
static void run_sweep(const inputs *in, int64_t *out, int64_t **steps) {
    Py_ssize_t i[CATS];
    sweep w;
    memset(&w, 0, sizeof w);
    w.cur = INT64_MIN;
    for (int c = 0; c < CATS; c++) {
        w.re[c] = INT64_MIN;
        i[c] = 0;
        if (in->n[c]) w.act[w.nact++] = c;  /* (in priority order) */
    }
    w.points = in->points;
    w.np = in->np;
    w.out = out;
    w.steps = steps;
    record(&w);
    while (w.ip < w.np) {
        int best = -1;
        int64_t t = INT64_MAX;
        for (int j = 0; j < w.nact; j++) {
            int c = w.act[j];
            if (i[c] < in->n[c] && (best < 0 || in->s[c][i[c]] < t)) { best = c; t = in->s[c][i[c]]; }
        }
        if (best < 0) {
            advance(&w, INT64_MAX, 1);
            break;
        }
        advance(&w, t, 0);
        int64_t end = in->e[best][i[best]];
        if (end < t) end = t;  /* (a reversed interval is empty) */
        if (end > w.re[best]) w.re[best] = end;
        i[best]++;
    }
}

static PyObject *covered(PyObject *self, PyObject *args) {
    PyObject *opoints, *ocats;
    if (!PyArg_ParseTuple(args, "OO!", &opoints, &PyTuple_Type, &ocats)) return NULL;
    inputs in;
    PyObject *res = NULL;
    int st = take_inputs(&in, opoints, ocats);
    if (st == 1) {
        res = Py_None;
        Py_INCREF(res);
    } else if (st == 0) {
        int64_t *upto = PyMem_Malloc((size_t)(ROWS * in.np + 1) * 8);
        if (upto == NULL) {
            PyErr_NoMemory();
        } else {
            res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)ROWS * in.np * 8);
            if (res != NULL) {
                int64_t *out = (int64_t *)PyBytes_AS_STRING(res);
                Py_BEGIN_ALLOW_THREADS
                run_sweep(&in, upto, NULL);
                for (int r = 0; r < ROWS; r++)  /* (rows out: row r at [r * np, (r + 1) * np)) */
                    for (Py_ssize_t k = 0; k < in.np; k++) out[r * in.np + k] = upto[k * ROWS + r];
                Py_END_ALLOW_THREADS
            }
            PyMem_Free(upto);
        }
    }
    release_inputs(&in);
    return res;
}


/* durations(points, intervals, lo, hi) -> 10 bytearrays or None: the step figures ``analysis.steps._figures``
 * makes of the covered time (its numpy twin ``_durations_numpy``), per step i of the span
 * [points[lo[i]], points[hi[i]]) (``lo``/``hi``: int64 indexes into ``points``; both None: the steps
 * follow one another, step i from point i to point i + 1).  10 rows of n int64, each its own
 * bytearray (a figure the caller lets go is freed, not held by the others): compute, exposed
 * collective, sync wait, compile, data loading, host (each the growth of the union by its category,
 * the priority partition), idle (the wall time none of them covers), collective (all collective
 * time), own (neither a collective nor a wait) and compute_own (the first three categories'
 * union outside collectives and waits). */
static PyObject *durations(PyObject *self, PyObject *args) {
    PyObject *opoints, *ocats, *olo, *ohi;
    if (!PyArg_ParseTuple(args, "OO!OO", &opoints, &PyTuple_Type, &ocats, &olo, &ohi)) return NULL;
    inputs in;
    Py_buffer lb, hb;
    int have_idx = 0;
    PyObject *res = NULL;
    int64_t *upto = NULL;
    int st = take_inputs(&in, opoints, ocats);
    if (st == 1) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    if (st < 0) goto done;
    Py_ssize_t n;
    const int64_t *lo = NULL, *hi = NULL;
    if (olo == Py_None && ohi == Py_None) {
        n = in.np > 0 ? in.np - 1 : 0;
    } else {
        if (get_int64(olo, &lb, "lo") < 0) goto done;
        if (get_int64(ohi, &hb, "hi") < 0) {
            PyBuffer_Release(&lb);
            goto done;
        }
        have_idx = 1;
        n = lb.len / 8;
        lo = lb.buf;
        hi = hb.buf;
        if (hb.len / 8 != n) {
            PyErr_SetString(PyExc_ValueError, "lo and hi differ in length");
            goto done;
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            if (lo[k] < 0 || lo[k] >= in.np || hi[k] < 0 || hi[k] >= in.np) {
                PyErr_SetString(PyExc_ValueError, "lo, hi: an index outside the points");
                goto done;
            }
        }
    }
    if (lo != NULL) {
        upto = PyMem_Malloc((size_t)(ROWS * in.np + 1) * 8);
        if (upto == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    res = PyTuple_New(DROWS);  /* (a writable column a row, each its own block: one let go is freed) */
    if (res == NULL) goto done;
    int64_t *out[DROWS];
    for (int r = 0; r < DROWS; r++) {
        PyObject *row = PyByteArray_FromStringAndSize(NULL, n * 8);
        if (row == NULL) {
            Py_CLEAR(res);
            goto done;
        }
        PyTuple_SET_ITEM(res, r, row);
        out[r] = (int64_t *)PyByteArray_AS_STRING(row);
    }
    Py_BEGIN_ALLOW_THREADS
    if (lo == NULL) {  /* consecutive steps: each one's figures as the sweep passes its end */
        run_sweep(&in, NULL, out);
    } else {
        run_sweep(&in, upto, NULL);
        const int64_t *pts = in.points;
        for (Py_ssize_t k = 0; k < n; k++)
            figure(upto + lo[k] * ROWS, upto + hi[k] * ROWS, pts[hi[k]] - pts[lo[k]], out, k);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(upto);
    if (have_idx) {
        PyBuffer_Release(&lb);
        PyBuffer_Release(&hb);
    }
    release_inputs(&in);
    return res;
}

static int get_buf(PyObject *o, Py_buffer *b, const char *what, Py_ssize_t itemsize, const char *kinds, int writable) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    const char *f = b->format == NULL ? "B" : b->format;
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (b->itemsize != itemsize || strlen(f) != 1 || strchr(kinds, *f) == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: a buffer of %zd-byte integers is needed", what, itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* the kept rows of one events file, written in one pass (see the top of the file) */
static PyObject *keep(PyObject *self, PyObject *args) {
    PyObject *oname, *osrc, *omodel, *ovalid, *otype_of, *ofw_of, *ocols, *oout;
    Py_ssize_t moff;
    long long fw_type, exec_type, ml_type;
    if (!PyArg_ParseTuple(args, "OOOOnOO(LLL)O!O!", &oname, &osrc, &omodel, &ovalid, &moff, &otype_of, &ofw_of,
                          &fw_type, &exec_type, &ml_type, &PyTuple_Type, &ocols, &PyTuple_Type, &oout))
        return NULL;
    if (PyTuple_GET_SIZE(ocols) != 3 || PyTuple_GET_SIZE(oout) != 9) {
        PyErr_SetString(PyExc_ValueError, "3 columns and 9 outputs are needed");
        return NULL;
    }
    /* 0 name, 1 src, 2 model, 3 model_valid, 4 type_of, 5 fw_of, 6-8 start end ids,
     * 9 typ, 10 fw, 11 rows, 12-14 start end ids, 15 model, 16 order, 17 bounds */
    enum { NB = 18 };
    static const char *what[NB] = {"name", "src", "model", "model_valid", "type_of", "fw_of", "start", "end", "ids",
                                   "typ", "fw", "rows", "ostart", "oend", "oids", "omodel", "order", "bounds"};
    PyObject *o[NB] = {oname, osrc, omodel, ovalid, otype_of, ofw_of};
    for (int j = 0; j < 3; j++) o[6 + j] = PyTuple_GET_ITEM(ocols, j);
    for (int j = 0; j < 9; j++) o[9 + j] = PyTuple_GET_ITEM(oout, j);
    Py_buffer b[NB];
    int got[NB] = {0};
    PyObject *res = NULL;
    for (int k = 0; k < NB; k++) {
        if ((k == 2 || k == 3) && o[k] == Py_None) continue;
        int small = k == 0 || k == 1 || k == 2;
        int bytes = k == 3 || k == 5 || k == 10;
        if (get_buf(o[k], &b[k], what[k], small ? 4 : bytes ? 1 : 8, small ? "i" : bytes ? "B?b" : "lq", k >= 9) < 0)
            goto done;
        got[k] = 1;
    }
    Py_ssize_t n = b[0].len / 4, ntypes = b[4].len / 8, nfw = b[5].len, nout = b[17].len / 8 - 1;
    if (b[1].len / 4 != n || b[6].len / 8 != n || b[7].len / 8 != n || b[8].len / 8 != n
        || (got[2] && b[2].len / 4 != n)) {
        PyErr_SetString(PyExc_ValueError, "the file's columns differ in length");
        goto done;
    }
    if (got[3] && (moff < 0 || (b[3].len - (moff >> 3)) * 8 < n + (moff & 7))) {
        PyErr_SetString(PyExc_ValueError, "model_valid: shorter than the file");
        goto done;
    }
    for (int k = 9; k < 17; k++) {
        if (b[k].len / b[k].itemsize < n) {
            PyErr_Format(PyExc_ValueError, "%s: shorter than the file", what[k]);
            goto done;
        }
    }
    if (nout < 1 || fw_type < 0 || fw_type >= nout) {
        PyErr_SetString(PyExc_ValueError, "bounds: one more than the types, fw_type among them");
        goto done;
    }
    const int32_t *name = b[0].buf, *src = b[1].buf, *model = got[2] ? b[2].buf : NULL;
    const uint8_t *valid = got[3] ? b[3].buf : NULL;
    const int64_t *type_of = b[4].buf;
    const uint8_t *fw_of = b[5].buf;
    const int64_t *start = b[6].buf, *end = b[7].buf, *ids = b[8].buf;
    int64_t *typ = b[9].buf, *rows = b[11].buf, *os = b[12].buf, *oe = b[13].buf, *oi = b[14].buf;
    int64_t *om = b[15].buf, *order = b[16].buf, *bounds = b[17].buf;
    uint8_t *fw = b[10].buf;
    Py_ssize_t k = 0, bad = -1;
    int badkind = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j <= nout; j++) bounds[j] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t c = name[i], d = src[i];
        if (c < 0 || c >= ntypes || d < 0 || d >= nfw) { bad = i; break; }
        int64_t t = type_of[c];
        uint8_t f = fw_of[d] != 0;
        if (!(f || (t >= 0 && t != fw_type))) continue;
        int64_t e = f ? fw_type : t;  /* the type the step detector sees */
        if (e >= nout) { bad = i; badkind = 1; break; }
        int64_t m = -1;
        if (!f && (t == exec_type || t == ml_type) && model != NULL) {
            Py_ssize_t v = i + (moff & 7);
            if (valid == NULL || ((valid[(moff >> 3) + (v >> 3)] >> (v & 7)) & 1)) m = model[i];
        }
        typ[k] = t;
        fw[k] = f;
        rows[k] = i;
        os[k] = start[i];
        oe[k] = end[i];
        oi[k] = ids[i];
        om[k] = m;
        bounds[e + 1]++;
        k++;
    }
    if (bad < 0) {  /* the kept rows grouped by the type the detector sees, each group in row order */
        for (Py_ssize_t j = 0; j < nout; j++) bounds[j + 1] += bounds[j];
        int64_t *at = PyMem_RawMalloc((size_t)(nout > 0 ? nout : 1) * sizeof(int64_t));
        if (at == NULL) {
            bad = -2;
        } else {
            for (Py_ssize_t j = 0; j < nout; j++) at[j] = bounds[j];
            for (Py_ssize_t r = 0; r < k; r++) order[at[fw[r] ? fw_type : typ[r]]++] = r;
            PyMem_RawFree(at);
        }
    }
    Py_END_ALLOW_THREADS
    if (bad == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, badkind ? "row %zd: a type beyond the bounds" :
                     "row %zd: a dictionary index outside its table", bad);
        goto done;
    }
    res = PyLong_FromSsize_t(k);
done:
    for (int j = 0; j < NB; j++)
        if (got[j]) PyBuffer_Release(&b[j]);
    return res;
}

/* check_events(typ, ntypes, slots, start, end) -> (tmax, slot, index, lo, hi): one pass over a chunk
 * of a capture's events for ``analysis.reader._check_events`` (decision 0215).  ``typ``: uint16
 * type ids; ``slots``: a tuple of (values, low, high), int64 values per event and, per type id, the
 * lowest and past-highest value allowed; ``start`` and ``end``: int64.  Returns the largest type
 * id, the first slot (in the tuple's order) holding a value outside its type's [low, high) and its
 * first such event (-1, -1 when none, or when some type is not below ``ntypes``: the caller refuses
 * that type first), and the smallest and largest of the
 * starts and ends (0, 0 for no event).  Its numpy twin is ``_check_events_numpy``. */
#define MAX_SLOTS 5
static PyObject *check_events(PyObject *self, PyObject *args) {
    PyObject *otyp, *oslots, *ostart, *oend;
    Py_ssize_t ntypes;
    if (!PyArg_ParseTuple(args, "OnO!OO", &otyp, &ntypes, &PyTuple_Type, &oslots, &ostart, &oend)) return NULL;
    Py_ssize_t ns = PyTuple_GET_SIZE(oslots);
    if (ns > MAX_SLOTS || ntypes < 0) {
        PyErr_SetString(PyExc_ValueError, "at most 5 slots, and a type count of at least 0");
        return NULL;
    }
    enum { NB = 3 + 3 * MAX_SLOTS };
    Py_buffer b[NB];
    int got[NB] = {0};
    PyObject *res = NULL;
    if (get_buf(otyp, &b[0], "typ", 2, "H", 0) < 0) goto done;
    got[0] = 1;
    if (get_buf(ostart, &b[1], "start", 8, "lq", 0) < 0) goto done;
    got[1] = 1;
    if (get_buf(oend, &b[2], "end", 8, "lq", 0) < 0) goto done;
    got[2] = 1;
    Py_ssize_t n = b[0].len / 2;
    for (Py_ssize_t k = 0; k < ns; k++) {
        PyObject *t = PyTuple_GET_ITEM(oslots, k);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
            PyErr_SetString(PyExc_ValueError, "a slot is a tuple (values, low, high)");
            goto done;
        }
        for (int j = 0; j < 3; j++) {
            if (get_buf(PyTuple_GET_ITEM(t, j), &b[3 + 3 * k + j], j ? "low/high" : "values", 8, "lq", 0) < 0)
                goto done;
            got[3 + 3 * k + j] = 1;
        }
        if (b[3 + 3 * k].len / 8 != n || b[4 + 3 * k].len / 8 < ntypes || b[5 + 3 * k].len / 8 < ntypes) {
            PyErr_SetString(PyExc_ValueError, "a slot's values differ in length from the types, or its limits "
                                              "are shorter than the type count");
            goto done;
        }
    }
    if (b[1].len / 8 != n || b[2].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "the columns differ in length");
        goto done;
    }
    const uint16_t *typ = b[0].buf;
    const int64_t *start = b[1].buf, *end = b[2].buf;
    const int64_t *val[MAX_SLOTS], *low[MAX_SLOTS], *high[MAX_SLOTS];
    Py_ssize_t first[MAX_SLOTS];
    for (Py_ssize_t k = 0; k < ns; k++) {
        val[k] = b[3 + 3 * k].buf;
        low[k] = b[4 + 3 * k].buf;
        high[k] = b[5 + 3 * k].buf;
        first[k] = -1;
    }
    int64_t lo = 0, hi = 0;
    long tmax = -1;
    Py_BEGIN_ALLOW_THREADS
    if (n > 0) {
        lo = start[0] < end[0] ? start[0] : end[0];
        hi = start[0] < end[0] ? end[0] : start[0];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t t = typ[i];
        if (t > tmax) tmax = t;
        int64_t s = start[i], e = end[i];
        if (s < lo) lo = s;
        if (s > hi) hi = s;
        if (e < lo) lo = e;
        if (e > hi) hi = e;
        if (t >= ntypes) continue;
        for (Py_ssize_t k = 0; k < ns; k++) {
            int64_t v = val[k][i];
            if ((v < low[k][t] || v >= high[k][t]) && first[k] < 0) first[k] = i;
        }
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t slot = -1, index = -1;
    for (Py_ssize_t k = 0; k < ns && tmax < ntypes; k++) {
        if (first[k] >= 0) {
            slot = k;
            index = first[k];
            break;
        }
    }
    res = Py_BuildValue("lnnLL", tmax, slot, index, (long long)lo, (long long)hi);
done:
    for (int j = 0; j < NB; j++)
        if (got[j]) PyBuffer_Release(&b[j]);
    return res;
}

static PyMethodDef methods[] = {
    {"keep", keep, METH_VARARGS, "One events file's rows a diff reads: their types, flags, indices and columns."},
    {"covered", covered, METH_VARARGS, "Per point, the time before it covered by the step categories' unions."},
    {"durations", durations, METH_VARARGS, "Per step, the durations of the step figures from the covered time."},
    {"check_events", check_events, METH_VARARGS, "A chunk of a capture's events checked in one pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sweep", "The step detector's covered time in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__sweep(void) { return PyModule_Create(&module); }

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
    const int64_t *points;
    Py_ssize_t np, ip;
    int64_t *out;
} sweep;

/* rows that hold a category set ``mask`` (non-zero): the unions from its lowest category on */
static void add(sweep *w, unsigned mask, int64_t len) {
    int low = __builtin_ctz(mask);
    for (int r = low; r < CATS; r++) w->acc[r] += len;
    if (mask & 2u) w->acc[6] += len;
    if (mask & 6u) w->acc[7] += len;
}

static void record(sweep *w) {
    while (w->ip < w->np && w->points[w->ip] <= w->cur) {
        for (int r = 0; r < ROWS; r++) w->out[(Py_ssize_t)r * w->np + w->ip] = w->acc[r];
        w->ip++;
    }
}

/* account the time from ``cur`` up to ``t`` (runs end on the way; points on the way are recorded) */
static void advance(sweep *w, int64_t t, int last) {
    for (;;) {
        int64_t nb = t;
        unsigned mask = 0;
        for (int c = 0; c < CATS; c++) {
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
            for (; w->ip < w->np; w->ip++)
                for (int r = 0; r < ROWS; r++) w->out[(Py_ssize_t)r * w->np + w->ip] = w->acc[r];
            return;
        }
    }
}

static PyObject *covered(PyObject *self, PyObject *args) {
    PyObject *opoints, *ocats;
    if (!PyArg_ParseTuple(args, "OO!", &opoints, &PyTuple_Type, &ocats)) return NULL;
    if (PyTuple_GET_SIZE(ocats) != 2 * CATS) {
        PyErr_SetString(PyExc_ValueError, "intervals: 12 arrays (the starts and ends of 6 categories)");
        return NULL;
    }
    Py_buffer pb, bufs[2 * CATS];
    int got = 0;
    PyObject *res = NULL;
    if (get_int64(opoints, &pb, "points") < 0) return NULL;
    for (; got < 2 * CATS; got++)
        if (get_int64(PyTuple_GET_ITEM(ocats, got), &bufs[got], got % 2 ? "ends" : "starts") < 0) goto done;
    const int64_t *s[CATS], *e[CATS];
    Py_ssize_t n[CATS], i[CATS];
    for (int c = 0; c < CATS; c++) {
        s[c] = bufs[2 * c].buf;
        e[c] = bufs[2 * c + 1].buf;
        n[c] = bufs[2 * c].len / 8;
        i[c] = 0;
        if (bufs[2 * c + 1].len / 8 != n[c]) {
            PyErr_SetString(PyExc_ValueError, "a category's starts and ends differ in length");
            goto done;
        }
        for (Py_ssize_t k = 1; k < n[c]; k++) {
            if (s[c][k] < s[c][k - 1]) {  /* not by start: the caller sorts it */
                res = Py_None;
                Py_INCREF(res);
                goto done;
            }
        }
    }
    Py_ssize_t np_ = pb.len / 8;
    const int64_t *points = pb.buf;
    for (Py_ssize_t k = 1; k < np_; k++) {
        if (points[k] < points[k - 1]) {
            PyErr_SetString(PyExc_ValueError, "points: not ascending");
            goto done;
        }
    }
    res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)ROWS * np_ * 8);
    if (res == NULL) goto done;
    sweep w;
    memset(&w, 0, sizeof w);
    w.cur = INT64_MIN;
    for (int c = 0; c < CATS; c++) w.re[c] = INT64_MIN;
    w.points = points;
    w.np = np_;
    w.out = (int64_t *)PyBytes_AS_STRING(res);
    Py_BEGIN_ALLOW_THREADS
    record(&w);
    while (w.ip < w.np) {
        int best = -1;
        int64_t t = INT64_MAX;
        for (int c = 0; c < CATS; c++)
            if (i[c] < n[c] && (best < 0 || s[c][i[c]] < t)) { best = c; t = s[c][i[c]]; }
        if (best < 0) {
            advance(&w, INT64_MAX, 1);
            break;
        }
        advance(&w, t, 0);
        int64_t end = e[best][i[best]];
        if (end < t) end = t;  /* (a reversed interval is empty) */
        if (end > w.re[best]) w.re[best] = end;
        i[best]++;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&pb);
    for (int k = 0; k < got; k++) PyBuffer_Release(&bufs[k]);
    return res;
}

static PyMethodDef methods[] = {
    {"covered", covered, METH_VARARGS, "Per point, the time before it covered by the step categories' unions."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sweep", "The step detector's covered time in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__sweep(void) { return PyModule_Create(&module); }

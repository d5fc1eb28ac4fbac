/* A drain's execution pairs expanded into the capture's events, as columns (included by
 * _fastpath.c; capture/store.py calls it, and its numpy path is the reference the tests hold
 * this to).
 *
 * Each EXEC_PAIR row becomes nrt_execute, [runtime_execute,] nc_exec_running, plus an
 * nrt_model_switch where the core's graph changes (judged in start order), and the result is
 * stably sorted by start: switches first, then the other rows in ring order, then each pair's
 * rows, for equal starts.  Done with numpy this took about 350 instructions per event (row
 * gathers, a sort's gather, then a transpose for the final write); here one pass writes each
 * event's nine columns in its final place.
 *
 * expand_pairs(rows, out, last_model, runtime_rows, (pair, host, share, dev, switch)) ->
 * (m, last_model): ``rows`` is n rows of WIDTH native int64 (a drained ring), ``out`` a writable
 * buffer of at least WIDTH * m int64 (m <= n + pairs * 3 with runtime rows, n + pairs * 2
 * without), filled as WIDTH columns of m events; the type ids come from contracts.events.
 * Memory is sized by the rows given, never by a value in them.  The work runs without the GIL
 * (it touches no Python object), so a large drain in the flush thread does not hold up the
 * training thread. */

typedef struct {
    long long key;
    Py_ssize_t seq;
} ExKey;

/* Defines NAME(T *a, T *tmp, n): a stable sort by BEFORE(x, y) ("x goes before y"), O(n log n) at
 * worst and about n compares on runs already in order (a drain is mostly in order): insertion-sorted
 * runs of 32, then merges, each skipped when its two halves are already in order.  Equal elements
 * keep their order (a merge takes from the left first).  tmp holds n elements. */
#define EX_DEFINE_STABLE_SORT(NAME, T, BEFORE)                                                  \
    static void NAME(T *a, T *tmp, Py_ssize_t n)                                                \
    {                                                                                           \
        const Py_ssize_t run = 32;                                                              \
        for (Py_ssize_t lo = 0; lo < n; lo += run) {                                            \
            Py_ssize_t hi = n - lo > run ? lo + run : n;                                        \
            for (Py_ssize_t i = lo + 1; i < hi; i++) {                                          \
                T x = a[i];                                                                     \
                Py_ssize_t j = i;                                                               \
                while (j > lo && BEFORE(x, a[j - 1])) {                                         \
                    a[j] = a[j - 1];                                                            \
                    j--;                                                                        \
                }                                                                               \
                a[j] = x;                                                                       \
            }                                                                                   \
        }                                                                                       \
        for (Py_ssize_t w = run; w < n; w *= 2) {                                               \
            for (Py_ssize_t lo = 0; n - lo > w; lo += 2 * w) {                                  \
                Py_ssize_t mid = lo + w, hi = n - mid > w ? mid + w : n;                        \
                if (!BEFORE(a[mid], a[mid - 1]))                                                \
                    continue;                                                                   \
                memcpy(tmp + lo, a + lo, (size_t)(hi - lo) * sizeof(T));                        \
                Py_ssize_t i = lo, j = mid, o = lo;                                             \
                while (i < mid && j < hi)                                                       \
                    a[o++] = BEFORE(tmp[j], tmp[i]) ? tmp[j++] : tmp[i++];                      \
                while (i < mid)                                                                 \
                    a[o++] = tmp[i++];                                                          \
                while (j < hi)                                                                  \
                    a[o++] = tmp[j++];                                                          \
            }                                                                                   \
        }                                                                                       \
    }

#define EX_KEY_BEFORE(a, b) ((a).key < (b).key)
EX_DEFINE_STABLE_SORT(ex_merge_sort, ExKey, EX_KEY_BEFORE)

/* The positions 0..n-1 stably sorted by key, in *order (free it), or NULL in *order when key is
 * already in order (the usual drain).  -1 when memory runs out. */
static int
ex_stable_order(const long long *key, Py_ssize_t n, Py_ssize_t **order)
{
    Py_ssize_t i;
    *order = NULL;
    for (i = 1; i < n && key[i] >= key[i - 1]; i++)
        ;
    if (i >= n)
        return 0;
    ExKey *k = PyMem_RawMalloc((size_t)n * 2 * sizeof(ExKey));
    Py_ssize_t *idx = PyMem_RawMalloc((size_t)n * sizeof(Py_ssize_t));
    if (k == NULL || idx == NULL) {
        PyMem_RawFree(k);
        PyMem_RawFree(idx);
        return -1;
    }
    for (i = 0; i < n; i++) {
        k[i].key = key[i];
        k[i].seq = i;
    }
    ex_merge_sort(k, k + n, n);
    for (i = 0; i < n; i++)
        idx[i] = k[i].seq;
    PyMem_RawFree(k);
    *order = idx;
    return 0;
}

/* An event's kind; its group (switch 0, other row 1, a pair's event 2) orders equal starts. */
enum { EX_SWITCH, EX_REST, EX_HOST, EX_SHARE, EX_DEV };
#define EX_GROUP(kind) ((kind) < EX_HOST ? (kind) : EX_HOST)

/* One event to write: its start, source row, kind, and a switch's previous graph. */
typedef struct {
    long long key, prev;
    Py_ssize_t src;
    int kind;
} ExEvent;

/* a goes before b: an earlier start, or the same start and an earlier group */
#define EX_BEFORE(a, b) ((a).key < (b).key || ((a).key == (b).key && EX_GROUP((a).kind) < EX_GROUP((b).kind)))

/* events by (start, group) */
EX_DEFINE_STABLE_SORT(ex_event_sort, ExEvent, EX_BEFORE)

static inline void
ex_add(ExEvent *e, long long key, long long prev, Py_ssize_t src, int kind)
{
    e->key = key;
    e->prev = prev;
    e->src = src;
    e->kind = kind;
}

/* Event x's nine values into column slot p of o (nine columns of m); t the type ids. */
static inline void
ex_write(long long *o, Py_ssize_t m, Py_ssize_t p, const ExEvent *x, const long long *r, const long long t[5])
{
    const long long *s = r + x->src * WIDTH;
    long long *q = o + p;
    q[3 * m] = s[3];
    q[4 * m] = s[4];
    q[5 * m] = s[5];
    switch (x->kind) {
    case EX_SWITCH:
        q[0] = t[4];
        q[m] = s[1];
        q[2 * m] = s[1];
        q[6 * m] = x->prev;
        q[7 * m] = 0;
        q[8 * m] = 0;
        break;
    case EX_HOST:
        q[0] = t[1];
        q[m] = s[1];
        q[2 * m] = s[2];
        q[6 * m] = s[6];
        q[7 * m] = 0;
        q[8 * m] = 0;
        break;
    case EX_SHARE:
        q[0] = t[2];
        q[m] = s[1];
        /* handed to a core measured apart: the share ends where it starts */
        q[2 * m] = s[8] > 0 && s[7] > s[1] && s[7] < s[2] ? s[7] : s[2];
        q[6 * m] = 0;
        q[7 * m] = 0;
        q[8 * m] = 0;
        break;
    case EX_DEV:
        q[0] = t[3];
        q[m] = s[8] > 0 ? s[7] : s[1];
        q[2 * m] = s[8] > 0 ? s[8] : s[2];
        q[6 * m] = s[6];
        q[7 * m] = 0;
        q[8 * m] = 0;
        break;
    default:  /* another event: as it was */
        q[0] = s[0];
        q[m] = s[1];
        q[2 * m] = s[2];
        q[6 * m] = s[6];
        q[7 * m] = s[7];
        q[8 * m] = s[8];
        break;
    }
}

/* The expansion itself, on plain memory: r holds n rows, o room for cap events' columns; t the
 * type ids (pair, host, share, dev, switch); *last_model is updated.  Returns the number of events
 * written, -1 when memory runs out, -2 when o is too small.
 *
 * The events are listed in ring order (a pair's switch, then its events), then stably sorted by
 * (start, group) unless already so (the usual drain), which gives the order of merging the three
 * groups each sorted by start: a switch, then the other rows in ring order, then each pair's
 * events, for equal starts.  Whether a pair's graph changed is judged in start order. */
static Py_ssize_t
ex_expand(const long long *r, Py_ssize_t n, long long *o, Py_ssize_t cap, long long *last_model, int runtime_rows,
          const long long t[5])
{
    const long long t_pair = t[0];
    Py_ssize_t np_ = 0, i, j, m = -1;
    long long last_start = LLONG_MIN;
    int pairs_in_order = 1;
    for (i = 0; i < n; i++) {
        const long long *s = r + i * WIDTH;
        if (s[0] == t_pair) {
            np_++;
            pairs_in_order &= s[1] >= last_start;
            last_start = s[1];
        }
    }
    ExEvent *ev = PyMem_RawMalloc((size_t)(n + np_ * (runtime_rows ? 3 : 2) + 2) * sizeof(ExEvent));
    long long *sw = NULL;  /* pairs out of start order: each pair's switch (its previous graph), or -1 */
    Py_ssize_t *pidx = NULL, *porder = NULL;
    long long *pkey = NULL;
    if (ev == NULL)
        goto done;
    long long prev = *last_model;
    if (!pairs_in_order) {
        /* a switch where the graph changes, judged in start order */
        sw = PyMem_RawMalloc((size_t)(np_ + 1) * sizeof(long long));
        pidx = PyMem_RawMalloc((size_t)(np_ + 1) * sizeof(Py_ssize_t));
        pkey = PyMem_RawMalloc((size_t)(np_ + 1) * sizeof(long long));
        if (sw == NULL || pidx == NULL || pkey == NULL)
            goto done;
        for (i = 0, j = 0; i < n; i++) {
            if (r[i * WIDTH] == t_pair) {
                pkey[j] = r[i * WIDTH + 1];
                pidx[j++] = i;
            }
        }
        if (ex_stable_order(pkey, np_, &porder) < 0)
            goto done;
        for (j = 0; j < np_; j++) {
            const Py_ssize_t q = porder != NULL ? porder[j] : j;
            const long long model = r[pidx[q] * WIDTH + 4];
            sw[q] = model != prev && prev >= 0 ? prev : -1;
            prev = model;
        }
    }
    /* the pairs' events (their switches, group 0, and their own, group 2) and the other rows
     * (group 1), each in ring order, each then sorted by (start, group) unless already so */
    ExEvent *pe = ev, *re = ev + np_ * (runtime_rows ? 4 : 3) + 1;  /* (a pair: a switch and 3 or 2 events) */
    Py_ssize_t ne = 0, nr = 0;
    int pe_in_order = 1, re_in_order = 1;
    long long pe_last = LLONG_MIN, re_last = LLONG_MIN;
    for (i = 0, j = 0; i < n; i++) {
        const long long *s = r + i * WIDTH;
        if (s[0] == t_pair) {
            long long was;
            if (sw != NULL)
                was = sw[j++];
            else {
                was = s[4] != prev && prev >= 0 ? prev : -1;
                prev = s[4];
            }
            const long long dev = s[8] > 0 ? s[7] : s[1];  /* a core span measured apart */
            /* (a switch's group is 0: after the last pair's device event at the same start) */
            pe_in_order &= s[1] > pe_last || (s[1] == pe_last && was < 0);
            if (was >= 0)
                ex_add(&pe[ne++], s[1], was, i, EX_SWITCH);
            ex_add(&pe[ne++], s[1], 0, i, EX_HOST);
            if (runtime_rows)
                ex_add(&pe[ne++], s[1], 0, i, EX_SHARE);
            ex_add(&pe[ne++], dev, 0, i, EX_DEV);
            pe_in_order &= dev >= s[1];
            pe_last = dev;
        } else {
            re_in_order &= s[1] >= re_last;
            ex_add(&re[nr++], s[1], 0, i, EX_REST);
            re_last = s[1];
        }
    }
    const Py_ssize_t e = ne + nr;
    if (e > cap) {
        m = -2;
        goto done;
    }
    if (!pe_in_order || !re_in_order) {
        ExEvent *tmp = PyMem_RawMalloc((size_t)((pe_in_order ? 0 : ne) + (re_in_order ? 0 : nr) + 1) * sizeof(ExEvent));
        if (tmp == NULL)
            goto done;
        if (!pe_in_order)
            ex_event_sort(pe, tmp, ne);
        if (!re_in_order)
            ex_event_sort(re, tmp, nr);
        PyMem_RawFree(tmp);
    }
    *last_model = prev;
    m = e;
    /* each event's nine columns, written in place: the earlier of the two lists' next events,
     * on equal starts group 0, then 1, then 2 (after the pairs' last event, a stop that every
     * other row goes before) */
    ex_add(&pe[ne], LLONG_MAX, 0, 0, EX_DEV);
    const ExEvent *pa = pe, *ra = re, *const rend = re + nr;
    Py_ssize_t p = 0;
    for (; ra < rend; p++) {
        if (ra->key < pa->key || (ra->key == pa->key && pa->kind != EX_SWITCH))
            ex_write(o, m, p, ra++, r, t);
        else
            ex_write(o, m, p, pa++, r, t);
    }
    for (; p < m; p++)
        ex_write(o, m, p, pa++, r, t);
done:
    PyMem_RawFree(ev);
    PyMem_RawFree(sw);
    PyMem_RawFree(pidx);
    PyMem_RawFree(porder);
    PyMem_RawFree(pkey);
    return m;
}

/* Drains this large or larger are expanded without the GIL (below, releasing it costs more than
 * the work). */
#define EX_NOGIL_ROWS 4096

static PyObject *
fp_expand_pairs(PyObject *Py_UNUSED(mod), PyObject *args)
{
    Py_buffer in, out;
    long long last_model, t[5];
    int runtime_rows;
    if (!PyArg_ParseTuple(args, "y*w*Lp(LLLLL):expand_pairs", &in, &out, &last_model, &runtime_rows, &t[0], &t[1],
                          &t[2], &t[3], &t[4]))
        return NULL;
    const Py_ssize_t rowb = WIDTH * (Py_ssize_t)sizeof(long long);
    PyObject *result = NULL;
    if (in.len % rowb != 0) {
        PyErr_SetString(PyExc_ValueError, "expand_pairs: rows must be a whole number of records");
    } else {
        const Py_ssize_t n = in.len / rowb;
        Py_ssize_t m;
        if (n >= EX_NOGIL_ROWS) {
            Py_BEGIN_ALLOW_THREADS
            m = ex_expand(in.buf, n, out.buf, out.len / rowb, &last_model, runtime_rows, t);
            Py_END_ALLOW_THREADS
        } else {
            m = ex_expand(in.buf, n, out.buf, out.len / rowb, &last_model, runtime_rows, t);
        }
        if (m == -1)
            PyErr_NoMemory();
        else if (m == -2)
            PyErr_SetString(PyExc_ValueError, "expand_pairs: the output buffer is too small");
        else
            result = Py_BuildValue("nL", m, last_model);
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

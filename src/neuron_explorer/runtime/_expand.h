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

/* Stable sort by key, O(n log n) at worst and about n compares on runs already in order (a drain
 * is mostly in order): insertion-sorted runs of 32, then merges, each skipped when its two halves
 * are already in order.  Equal keys keep their order (a merge takes from the left first). */
static void
ex_merge_sort(ExKey *a, ExKey *tmp, Py_ssize_t n)
{
    const Py_ssize_t run = 32;
    for (Py_ssize_t lo = 0; lo < n; lo += run) {
        Py_ssize_t hi = n - lo > run ? lo + run : n;
        for (Py_ssize_t i = lo + 1; i < hi; i++) {
            ExKey x = a[i];
            Py_ssize_t j = i;
            while (j > lo && a[j - 1].key > x.key) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
    }
    for (Py_ssize_t w = run; w < n; w *= 2) {
        for (Py_ssize_t lo = 0; n - lo > w; lo += 2 * w) {
            Py_ssize_t mid = lo + w, hi = n - mid > w ? mid + w : n;
            if (a[mid - 1].key <= a[mid].key)
                continue;
            memcpy(tmp + lo, a + lo, (size_t)(hi - lo) * sizeof(ExKey));
            Py_ssize_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                a[o++] = tmp[j].key < tmp[i].key ? tmp[j++] : tmp[i++];
            while (i < mid)
                a[o++] = tmp[i++];
            while (j < hi)
                a[o++] = tmp[j++];
        }
    }
}

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

enum { EX_REST, EX_SWITCH, EX_HOST, EX_SHARE, EX_DEV };

/* One group of events: source rows, kinds, starts, and a switch's previous graph. */
typedef struct {
    Py_ssize_t n, *src;
    unsigned char *kind;
    long long *key, *prev;
} ExGroup;

static void
ex_group_free(ExGroup *g)
{
    PyMem_RawFree(g->src);
    PyMem_RawFree(g->kind);
    PyMem_RawFree(g->key);
    PyMem_RawFree(g->prev);
    g->src = NULL;
    g->kind = NULL;
    g->key = g->prev = NULL;
}

static int
ex_group_alloc(ExGroup *g, Py_ssize_t cap)
{
    g->n = 0;
    g->src = PyMem_RawMalloc((size_t)(cap + 1) * sizeof(Py_ssize_t));
    g->kind = PyMem_RawMalloc((size_t)(cap + 1));
    g->key = PyMem_RawMalloc((size_t)(cap + 1) * sizeof(long long));
    g->prev = PyMem_RawMalloc((size_t)(cap + 1) * sizeof(long long));
    if (g->src == NULL || g->kind == NULL || g->key == NULL || g->prev == NULL) {
        ex_group_free(g);
        return -1;
    }
    return 0;
}

static inline void
ex_group_add(ExGroup *g, Py_ssize_t src, unsigned char kind, long long key, long long prev)
{
    g->src[g->n] = src;
    g->kind[g->n] = kind;
    g->key[g->n] = key;
    g->prev[g->n++] = prev;
}

/* Puts group g's events in their sorted order (once, when its starts were not in order). */
static int
ex_group_sort(ExGroup *g)
{
    Py_ssize_t *order;
    if (ex_stable_order(g->key, g->n, &order) < 0)
        return -1;
    if (order == NULL)
        return 0;
    ExGroup t;
    if (ex_group_alloc(&t, g->n) < 0) {
        PyMem_RawFree(order);
        return -1;
    }
    for (Py_ssize_t i = 0; i < g->n; i++) {
        Py_ssize_t d = order[i];
        ex_group_add(&t, g->src[d], g->kind[d], g->key[d], g->prev[d]);
    }
    PyMem_RawFree(order);
    ex_group_free(g);
    *g = t;
    return 0;
}

/* The expansion itself, on plain memory: r holds n rows, o room for cap events' columns; t the
 * type ids (pair, host, share, dev, switch); *last_model is updated.  Returns the number of events
 * written, -1 when memory runs out, -2 when o is too small. */
static Py_ssize_t
ex_expand(const long long *r, Py_ssize_t n, long long *o, Py_ssize_t cap, long long *last_model, int runtime_rows,
          const long long t[5])
{
    const long long t_pair = t[0], t_host = t[1], t_share = t[2], t_dev = t[3], t_switch = t[4];
    const Py_ssize_t k = runtime_rows ? 3 : 2;
    ExGroup g[3] = {{0}};  /* switches, the other rows, the pairs' events: their order on equal starts */
    Py_ssize_t *pidx = NULL, *porder = NULL, np_ = 0, i, j, m = -1;
    long long *pkey = NULL;
    for (i = 0; i < n; i++)
        np_ += r[i * WIDTH] == t_pair;
    pidx = PyMem_RawMalloc((size_t)(np_ + 1) * sizeof(Py_ssize_t));
    pkey = PyMem_RawMalloc((size_t)(np_ + 1) * sizeof(long long));
    if (pidx == NULL || pkey == NULL || ex_group_alloc(&g[0], np_) < 0 || ex_group_alloc(&g[1], n - np_) < 0 ||
            ex_group_alloc(&g[2], np_ * k) < 0)
        goto done;
    for (i = 0, j = 0; i < n; i++) {
        const long long *s = r + i * WIDTH;
        if (s[0] == t_pair) {
            pkey[j] = s[1];
            pidx[j++] = i;
            ex_group_add(&g[2], i, EX_HOST, s[1], 0);
            if (runtime_rows)
                ex_group_add(&g[2], i, EX_SHARE, s[1], 0);
            ex_group_add(&g[2], i, EX_DEV, s[8] > 0 ? s[7] : s[1], 0);  /* a core span measured apart */
        } else {
            ex_group_add(&g[1], i, EX_REST, s[1], 0);
        }
    }
    /* a switch where the graph changes, judged in start order */
    if (ex_stable_order(pkey, np_, &porder) < 0)
        goto done;
    long long prev = *last_model;
    for (j = 0; j < np_; j++) {
        const Py_ssize_t src = pidx[porder != NULL ? porder[j] : j];
        const long long *s = r + src * WIDTH;
        if (s[4] != prev && prev >= 0)
            ex_group_add(&g[0], src, EX_SWITCH, s[1], prev);
        prev = s[4];
    }
    if (ex_group_sort(&g[1]) < 0 || ex_group_sort(&g[2]) < 0)
        goto done;
    const Py_ssize_t total = g[0].n + g[1].n + g[2].n;
    if (total > cap) {
        m = -2;
        goto done;
    }
    *last_model = prev;
    m = total;
    /* merge the three sorted groups, writing each event into its place in the nine columns */
    long long *const o0 = o, *const o1 = o0 + m, *const o2 = o1 + m, *const o3 = o2 + m, *const o4 = o3 + m,
              *const o5 = o4 + m, *const o6 = o5 + m, *const o7 = o6 + m, *const o8 = o7 + m;
    const Py_ssize_t n0 = g[0].n, n1 = g[1].n, n2 = g[2].n;
    const long long *const k0 = g[0].key, *const k1 = g[1].key, *const k2 = g[2].key;
    Py_ssize_t a0 = 0, a1 = 0, a2 = 0;
    for (Py_ssize_t p = 0; p < m; p++) {
        /* the group with the lowest next start; on equal starts the earlier group */
        int q = a2 < n2 ? 2 : -1;
        long long best = q < 0 ? 0 : k2[a2];
        if (a1 < n1 && (q < 0 || k1[a1] <= best)) {
            q = 1;
            best = k1[a1];
        }
        if (a0 < n0 && (q < 0 || k0[a0] <= best))
            q = 0;
        const Py_ssize_t d = q == 0 ? a0++ : q == 1 ? a1++ : a2++;
        const long long *s = r + g[q].src[d] * WIDTH;
        long long v0 = s[0], v1 = s[1], v2 = s[2], v6 = s[6], v7 = s[7], v8 = s[8];
        switch (g[q].kind[d]) {
        case EX_SWITCH:
            v0 = t_switch;
            v2 = v1;
            v6 = g[q].prev[d];
            v7 = v8 = 0;
            break;
        case EX_HOST:
            v0 = t_host;
            v7 = v8 = 0;
            break;
        case EX_SHARE:
            v0 = t_share;
            if (s[8] > 0 && s[7] > s[1] && s[7] < s[2])
                v2 = s[7];  /* handed to a core measured apart: the share ends where it starts */
            v6 = v7 = v8 = 0;
            break;
        case EX_DEV:
            v0 = t_dev;
            if (s[8] > 0) {
                v1 = s[7];
                v2 = s[8];
            }
            v7 = v8 = 0;
            break;
        default:  /* another event: as it was */
            break;
        }
        o0[p] = v0;
        o1[p] = v1;
        o2[p] = v2;
        o3[p] = s[3];
        o4[p] = s[4];
        o5[p] = s[5];
        o6[p] = v6;
        o7[p] = v7;
        o8[p] = v8;
    }
done:
    PyMem_RawFree(pidx);
    PyMem_RawFree(porder);
    PyMem_RawFree(pkey);
    for (int q = 0; q < 3; q++)
        ex_group_free(&g[q]);
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

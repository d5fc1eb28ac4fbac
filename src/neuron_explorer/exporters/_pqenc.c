/* The exporters' per-value encoders: Parquet values for `view`'s own Parquet writer
 * (exporters/parquet_file.py), and `view`'s Chrome trace-event JSON events (exporters/chrome_json.py,
 * ``chrome_events``: described above its code, at the end of this file).
 *
 * Arrow's Parquet encoder was the ceiling of `view` Parquet (docs/decisions/0040): ~12 ns per value
 * for the events schema.  These three encoders do the per-value work in one pass each; everything
 * per page or per file (Thrift headers, compression, layout) stays in Python.
 *
 *   delta_binary_packed(int64/int32 buffer, uint8 valid or None, prefix) -> bytes   DELTA_BINARY_PACKED,
 *       blocks of 128, 4 miniblocks, after ``prefix``
 *   rle_hybrid(uint8 or int32 buffer, bit_width[, prefix]) -> bytes   RLE / bit-packed hybrid (levels,
 *       dictionary indices)
 *   plain_byte_array(int32 offsets, data, uint8 valid or None[, prefix]) -> bytes   PLAIN BYTE_ARRAY of the
 *       valid values
 *   delta_nonneg(int64/int32 buffer) -> (bytes, nulls)   an optional integer column's data page body
 *       (levels and DELTA_BINARY_PACKED values) where the negative values are the nulls
 *   present(int64 ids, k) -> bytes or None   which of the values 0..k-1 occur (a presence count)
 *   list_page(int64 first, int64 second or None) -> (bytes, level count)   ``flow_id``'s data page body
 *       (repetition and definition levels, values) from its one or two flows a row (0 = none)
 *   dict_page(int32/int64 ids, int32 lut, offset, null_pos, nvalues, bit_width) -> (bytes, nulls, used)   a dictionary
 *       column's data page body (levels and positions) straight from per-row ids
 * Each writes ``prefix`` (the page's levels) first, which saves a copy of the page.
 *
 * Output sizes are bounded from the input lengths only (never from a value read from the input);
 * bad arguments raise ValueError/TypeError.  All arithmetic on deltas wraps modulo 2^64, as the
 * format's readers decode it.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* the per-value loops vectorize at O3 (the build may use O2: CFLAGS are the user's) */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 128
#define MINIBLOCKS 4
#define MINI (BLOCK / MINIBLOCKS)

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static int bits_of(uint64_t v) {
    return v ? 64 - __builtin_clzll(v) : 0;
}

/* Pack n values (n a multiple of 8) of w bits, least significant bit first. */
static uint8_t *pack(const uint64_t *v, int n, int w, uint8_t *p) {
    if (w == 0) return p;
    uint64_t mask = w == 64 ? ~(uint64_t)0 : (((uint64_t)1 << w) - 1);
    uint64_t acc = 0;
    int nb = 0;
    for (int i = 0; i < n; i++) {
        uint64_t x = v[i] & mask;
        acc |= x << nb;
        if (nb + w >= 64) {
            memcpy(p, &acc, 8);
            p += 8;
            acc = nb ? x >> (64 - nb) : 0;
            nb = nb + w - 64;
        } else {
            nb += w;
        }
    }
    int bytes = (nb + 7) / 8;
    memcpy(p, &acc, bytes);
    return p + bytes;
}

/* Pack 32 values of a constant width W (one miniblock): the compiler unrolls it per width. */
#define PACK32(W)                                                              \
    static uint8_t *pack32_##W(const uint64_t *v, uint8_t *p) {                \
        uint64_t acc = 0;                                                      \
        int nb = 0;                                                            \
        _Pragma("GCC unroll 32") for (int i = 0; i < 32; i++) {                \
            uint64_t x = W == 64 ? v[i] : v[i] & ((((uint64_t)1) << (W & 63)) - 1); \
            acc |= x << nb;                                                    \
            if (nb + W >= 64) {                                                \
                memcpy(p, &acc, 8);                                            \
                p += 8;                                                        \
                acc = nb ? x >> ((64 - nb) & 63) : 0;                          \
                nb = nb + W - 64;                                              \
            } else {                                                           \
                nb += W;                                                       \
            }                                                                  \
        }                                                                      \
        if (nb) { /* 32 * W bits: whole words, or 32 bits left for odd W */   \
            memcpy(p, &acc, 4);                                                \
            p += 4;                                                            \
        }                                                                      \
        return p;                                                              \
    }
#define P4(a, b, c, d) PACK32(a) PACK32(b) PACK32(c) PACK32(d)
P4(1, 2, 3, 4) P4(5, 6, 7, 8) P4(9, 10, 11, 12) P4(13, 14, 15, 16) P4(17, 18, 19, 20) P4(21, 22, 23, 24)
P4(25, 26, 27, 28) P4(29, 30, 31, 32) P4(33, 34, 35, 36) P4(37, 38, 39, 40) P4(41, 42, 43, 44) P4(45, 46, 47, 48)
P4(49, 50, 51, 52) P4(53, 54, 55, 56) P4(57, 58, 59, 60) P4(61, 62, 63, 64)
#define F4(a, b, c, d) pack32_##a, pack32_##b, pack32_##c, pack32_##d,
typedef uint8_t *(*pack32_fn)(const uint64_t *, uint8_t *);
static const pack32_fn PACKERS[65] = {NULL, F4(1, 2, 3, 4) F4(5, 6, 7, 8) F4(9, 10, 11, 12) F4(13, 14, 15, 16)
    F4(17, 18, 19, 20) F4(21, 22, 23, 24) F4(25, 26, 27, 28) F4(29, 30, 31, 32) F4(33, 34, 35, 36) F4(37, 38, 39, 40)
    F4(41, 42, 43, 44) F4(45, 46, 47, 48) F4(49, 50, 51, 52) F4(53, 54, 55, 56) F4(57, 58, 59, 60) F4(61, 62, 63, 64)};

static int get_buffer(PyObject *o, Py_buffer *b) {
    return PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
}

static PyObject *finish(PyObject *out, uint8_t *start, uint8_t *end) {
    if (_PyBytes_Resize(&out, end - start) < 0) return NULL;
    return out;
}

/* One block of k (1..BLOCK) deltas: min delta, the miniblocks' bit widths, the packed miniblocks.
 * Separate simple loops (min, subtract, or) so that the compiler vectorizes each. */
static uint8_t *delta_block(uint64_t *d, int k, uint8_t *p) {
    int64_t mn = INT64_MAX;
    for (int j = 0; j < k; j++) mn = (int64_t)d[j] < mn ? (int64_t)d[j] : mn;
    for (int j = 0; j < k; j++) d[j] -= (uint64_t)mn;
    for (int j = k; j < BLOCK; j++) d[j] = 0;
    p = put_varint(p, zigzag(mn));
    uint8_t *widths = p;
    p += MINIBLOCKS;
    for (int m = 0; m < MINIBLOCKS; m++) {
        if (m * MINI >= k) {
            widths[m] = 0;
            continue;
        }
        uint64_t all = 0;
        for (int j = m * MINI; j < (m + 1) * MINI; j++) all |= d[j];
        int w = bits_of(all);
        widths[m] = (uint8_t)w;
        if (w) p = PACKERS[w](d + m * MINI, p);
    }
    return p;
}

/* The blocks of n (> 0) contiguous values (after the header's first value). */
static uint8_t *delta_blocks64(const int64_t *v, Py_ssize_t n, uint8_t *p) {
    uint64_t d[BLOCK];
    for (Py_ssize_t i = 1; i < n; i += BLOCK) {
        int k = (int)(n - i < BLOCK ? n - i : BLOCK);
        for (int j = 0; j < k; j++) d[j] = (uint64_t)v[i + j] - (uint64_t)v[i + j - 1];
        p = delta_block(d, k, p);
    }
    return p;
}

static uint8_t *delta_blocks32(const int32_t *v, Py_ssize_t n, uint8_t *p) {
    uint64_t d[BLOCK];
    for (Py_ssize_t i = 1; i < n; i += BLOCK) {
        int k = (int)(n - i < BLOCK ? n - i : BLOCK);
        /* 32-bit wrapping deltas, sign-extended: readers decode INT32 columns in 32 bits and refuse
         * bit widths over 32, so a delta such as INT32_MAX - INT32_MIN must wrap here too */
        for (int j = 0; j < k; j++)
            d[j] = (uint64_t)(int64_t)(int32_t)((uint32_t)v[i + j] - (uint32_t)v[i + j - 1]);
        p = delta_block(d, k, p);
    }
    return p;
}

static Py_ssize_t delta_bound(Py_ssize_t n) {
    Py_ssize_t blocks = n > 1 ? (n - 1 + BLOCK - 1) / BLOCK : 0;
    return 40 + blocks * (10 + MINIBLOCKS + BLOCK * 8);
}

/* The header and blocks of n contiguous 8- or 4-byte values at p (room: delta_bound(n)). */
static uint8_t *delta_encode(const void *vals, Py_ssize_t n, int itemsize, uint8_t *p) {
    int64_t first = n == 0 ? 0 : itemsize == 8 ? ((const int64_t *)vals)[0] : ((const int32_t *)vals)[0];
    p = put_varint(p, BLOCK);
    p = put_varint(p, MINIBLOCKS);
    p = put_varint(p, (uint64_t)n);
    p = put_varint(p, zigzag(first));
    if (n > 1) p = itemsize == 8 ? delta_blocks64((const int64_t *)vals, n, p) : delta_blocks32((const int32_t *)vals, n, p);
    return p;
}

/* delta_binary_packed(values, valid, prefix): ``prefix`` (bytes: the page's levels) then the
 * encoding of the values whose ``valid`` byte is non-zero (all of them when valid is None). */
static PyObject *delta_binary_packed(PyObject *self, PyObject *args) {
    PyObject *ovals, *ovalid;
    const char *prefix;
    Py_ssize_t plen;
    if (!PyArg_ParseTuple(args, "OOy#", &ovals, &ovalid, &prefix, &plen)) return NULL;
    Py_buffer b, valid = {0};
    if (get_buffer(ovals, &b) < 0) return NULL;
    int has_valid = ovalid != Py_None;
    if (has_valid && PyObject_GetBuffer(ovalid, &valid, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    PyObject *out = NULL;
    void *packed = NULL; /* the valid values, when some are not */
    Py_ssize_t n = b.len / (b.itemsize ? b.itemsize : 1);
    if ((b.itemsize != 8 && b.itemsize != 4) || (has_valid && valid.len != n)) {
        PyErr_SetString(PyExc_ValueError, "delta_binary_packed takes 4- or 8-byte integers (and one valid byte each)");
        goto done;
    }
    const void *vals = b.buf;
    if (has_valid) {
        const uint8_t *ok = (const uint8_t *)valid.buf;
        packed = PyMem_Malloc(n ? n * b.itemsize : 1);
        if (packed == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t nv = 0;
        if (b.itemsize == 8) {
            for (Py_ssize_t i = 0; i < n; i++)
                if (ok[i]) ((int64_t *)packed)[nv++] = ((const int64_t *)b.buf)[i];
        } else {
            for (Py_ssize_t i = 0; i < n; i++)
                if (ok[i]) ((int32_t *)packed)[nv++] = ((const int32_t *)b.buf)[i];
        }
        vals = packed;
        n = nv;
    }
    out = PyBytes_FromStringAndSize(NULL, plen + delta_bound(n));
    if (out == NULL) goto done;
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(out), *p = start;
    memcpy(p, prefix, plen);
    p = delta_encode(vals, n, (int)b.itemsize, p + plen);
    out = finish(out, start, p);
done:
    PyMem_Free(packed);
    PyBuffer_Release(&b);
    if (has_valid) PyBuffer_Release(&valid);
    return out;
}

/* Values [lo, hi) of the input as uint32 into tmp (zeros past hi: the padding of the last group). */
static void load8(const Py_buffer *b, Py_ssize_t i, Py_ssize_t hi, uint64_t *tmp) {
    for (int j = 0; j < 8; j++, i++)
        tmp[j] = i < hi ? (b->itemsize == 1 ? ((const uint8_t *)b->buf)[i] : (uint32_t)((const int32_t *)b->buf)[i]) : 0;
}

/* One literal (bit-packed) run of the values [lo, hi), padded with zeros to a multiple of 8. */
static uint8_t *literal_run(const Py_buffer *b, Py_ssize_t lo, Py_ssize_t hi, int w, uint8_t *p) {
    Py_ssize_t groups = (hi - lo + 7) / 8;
    p = put_varint(p, ((uint64_t)groups << 1) | 1);
    uint64_t tmp[8];
    Py_ssize_t g = 0;
    if (w <= 8) { /* 8 values fit one 64-bit word: w bytes a group */
        uint64_t mask = ((uint64_t)1 << w) - 1;
        for (; lo + g * 8 + 8 <= hi; g++) {
            Py_ssize_t i = lo + g * 8;
            uint64_t acc = 0;
            if (b->itemsize == 1) {
                const uint8_t *v = (const uint8_t *)b->buf + i;
                for (int j = 0; j < 8; j++) acc |= (uint64_t)(v[j] & mask) << (j * w);
            } else {
                const int32_t *v = (const int32_t *)b->buf + i;
                for (int j = 0; j < 8; j++) acc |= ((uint64_t)(uint32_t)v[j] & mask) << (j * w);
            }
            memcpy(p, &acc, 8); /* (the buffer has slack past the end) */
            p += w;
        }
    }
    for (; g < groups; g++) {
        load8(b, lo + g * 8, hi, tmp);
        p = pack(tmp, 8, w, p);
    }
    return p;
}

/* Whether the 8 values from i are equal. */
static int same8(const Py_buffer *b, Py_ssize_t i) {
    if (b->itemsize == 1) {
        uint64_t x;
        memcpy(&x, (const uint8_t *)b->buf + i, 8);
        return x == ((x & 0xff) * 0x0101010101010101ULL);
    }
    const int32_t *v = (const int32_t *)b->buf + i;
    return v[0] == v[1] && v[0] == v[2] && v[0] == v[3] && v[0] == v[4] && v[0] == v[5] && v[0] == v[6] && v[0] == v[7];
}

/* Runs are looked for at multiples of 8 values from the last run: a run shorter than 16 values
 * may be bit-packed instead, which costs a little space and keeps the scan to one test a group.
 * Writes the encoding of b's values at p, which has room for rle_bound(n, w) bytes. */
static Py_ssize_t rle_bound(Py_ssize_t n, int w) { return (n / 8 + 2) * (w + 20) + 32; }

static uint8_t *rle_encode(const Py_buffer *bp, int w, uint8_t *p) {
    const Py_buffer b = *bp;
    Py_ssize_t n = b.len / b.itemsize;
    int vbytes = (w + 7) / 8;
    const uint8_t *u8 = (const uint8_t *)b.buf;
    const int32_t *i32 = (const int32_t *)b.buf;
#define AT(i) (b.itemsize == 1 ? (uint32_t)u8[i] : (uint32_t)i32[i])
    Py_ssize_t lit = 0, i = 0;
    while (i + 8 <= n) {
        if (!same8(&b, i)) {
            i += 8;
            continue;
        }
        uint32_t v = AT(i);
        Py_ssize_t j = i + 8;
        while (j < n && AT(j) == v) j++;
        if (i > lit) p = literal_run(&b, lit, i, w, p);
        p = put_varint(p, (uint64_t)(j - i) << 1);
        for (int k = 0; k < vbytes; k++) *p++ = (uint8_t)(v >> (8 * k));
        i = lit = j;
    }
    if (lit < n) p = literal_run(&b, lit, n, w, p);
#undef AT
    return p;
}

static PyObject *rle_hybrid(PyObject *self, PyObject *args) {
    PyObject *arr;
    int w;
    const char *prefix = "";
    Py_ssize_t plen = 0;
    if (!PyArg_ParseTuple(args, "Oi|y#", &arr, &w, &prefix, &plen)) return NULL;
    if (w < 0 || w > 32) {
        PyErr_SetString(PyExc_ValueError, "rle_hybrid bit width must be 0..32");
        return NULL;
    }
    Py_buffer b;
    if (get_buffer(arr, &b) < 0) return NULL;
    if (b.itemsize != 1 && b.itemsize != 4) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "rle_hybrid takes 1- or 4-byte integers");
        return NULL;
    }
    /* worst case: every 8 values cost an RLE run (10 + vbytes) or a literal group (w) plus a header */
    PyObject *out = PyBytes_FromStringAndSize(NULL, plen + rle_bound(b.len / b.itemsize, w));
    if (out == NULL) {
        PyBuffer_Release(&b);
        return NULL;
    }
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(out), *p = start;
    memcpy(p, prefix, plen);
    p = rle_encode(&b, w, p + plen);
    PyBuffer_Release(&b);
    return finish(out, start, p);
}

/* A level section of a v1 data page at p: its 4-byte length, then the n levels (bytes) RLE
 * hybrid at width w (1 or 2), or one run of ``value`` when ``uniform`` (every level is it). */
static uint8_t *level_section(const uint8_t *levels, Py_ssize_t n, int w, int uniform, uint8_t value, uint8_t *p) {
    uint8_t *start = p;
    p += 4;
    if (uniform) {
        p = put_varint(p, (uint64_t)n << 1);
        *p++ = value;
    } else {
        Py_buffer d = {0};
        d.buf = (void *)levels, d.len = n, d.itemsize = 1;
        p = rle_encode(&d, w, p);
    }
    uint32_t len = (uint32_t)(p - start - 4);
    memcpy(start, &len, 4);
    return p;
}

/* The rows of dict_page: positions through ``map`` (every entry checked: a position, nvalues for a
 * null, nvalues + 1 for an entry no row may hold; map[nl] = nvalues), ids outside it to map[nl]
 * (null) when ``nullable``, else an error; returns the non-null count, or -1 - i for the first bad
 * row i.  Branch-free in the nullable loop (a conditional move for the bounds); a bad entry is
 * looked for again only when one was met. */
#define DICT_ROWS(T)                                                                                  \
    static Py_ssize_t dict_rows_##T(const T *ids, Py_ssize_t n, int64_t offset, const int32_t *map,  \
                                    Py_ssize_t nl, int32_t nvalues, int nullable, uint8_t *defs,      \
                                    int32_t *pos) {                                                  \
        Py_ssize_t nv = 0;                                                                            \
        int32_t bad = 0;                                                                              \
        const uint64_t lim = (uint64_t)nl, off = (uint64_t)offset;                                   \
        if (!nullable) { /* no nulls (a map without null entries): a bounds check and a gather */     \
            for (Py_ssize_t i = 0; i < n; i++) {                                                      \
                uint64_t k = (uint64_t)(int64_t)ids[i] + off;                                        \
                if (__builtin_expect(k >= lim, 0)) return -1 - i;                                     \
                int32_t v = map[k];                                                                   \
                pos[i] = v;                                                                           \
                bad |= v >= nvalues;                                                                  \
            }                                                                                         \
            nv = n;                                                                                   \
        } else { /* ids outside the table: map[nl], a null */                                         \
            for (Py_ssize_t i = 0; i < n; i++) {                                                      \
                uint64_t k = (uint64_t)(int64_t)ids[i] + off; /* (wraps: outside the table) */        \
                int32_t v = map[k < lim ? k : lim];                                                   \
                int ok = v != nvalues;                                                                \
                defs[i] = (uint8_t)ok;                                                                \
                pos[nv] = v;                                                                          \
                nv += ok;                                                                             \
                bad |= v > nvalues;                                                                   \
            }                                                                                         \
        }                                                                                             \
        if (bad)                                                                                      \
            for (Py_ssize_t i = 0; i < n; i++) {                                                      \
                uint64_t k = (uint64_t)(int64_t)ids[i] + off;                                        \
                if (k < lim && map[k] > nvalues - !nullable) return -1 - i;                           \
            }                                                                                         \
        return nv;                                                                                    \
    }
DICT_ROWS(int64_t)
DICT_ROWS(int32_t)

/* dict_page(ids, lut, offset, null_pos, nvalues, bit_width[, want_used]) -> (body, nulls, used)
 *
 * A dictionary-encoded data page body of an optional flat column, from per-row ids (int32/int64)
 * and ``lut`` (int32: the dictionary position of id + offset; ids outside it are null when
 * null_pos >= 0, else an error).  A row whose position is ``null_pos`` is null (it may lie past the
 * dictionary: a sentinel).  ``body``: the definition levels (4-byte length, RLE hybrid at width 1),
 * the bit width byte, the positions of the non-null rows (RLE hybrid).  ``used``: one byte per
 * dictionary value (``nvalues``), 1 when a non-null row has it (min/max statistics; all 0 unless
 * ``want_used``).  One pass gathers; two encode.  Replaces a gather, a null mask, a compaction and
 * two level passes in numpy (docs/decisions/0051). */
static PyObject *dict_page(PyObject *self, PyObject *args) {
    PyObject *oids, *olut;
    long long offset;
    int null_pos, w;
    Py_ssize_t nvalues;
    int want_used = 1;
    if (!PyArg_ParseTuple(args, "OOLini|p", &oids, &olut, &offset, &null_pos, &nvalues, &w, &want_used)) return NULL;
    if (w < 0 || w > 32 || nvalues < 0 || nvalues >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "dict_page bit width must be 0..32 (and the value count >= 0)");
        return NULL;
    }
    Py_buffer ids, lut;
    if (get_buffer(oids, &ids) < 0) return NULL;
    if (get_buffer(olut, &lut) < 0) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    PyObject *out = NULL, *used = NULL, *body = NULL;
    int32_t *pos = NULL, *map = NULL;
    uint8_t *defs = NULL, *u = NULL;
    if ((ids.itemsize != 4 && ids.itemsize != 8) || lut.itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "dict_page takes int32/int64 ids and an int32 lut");
        goto done;
    }
    Py_ssize_t n = ids.len / ids.itemsize, nl = lut.len / 4, nv;
    const int32_t *L = (const int32_t *)lut.buf;
    pos = PyMem_Malloc(n ? n * 4 : 1);
    defs = PyMem_Malloc(n ? n : 1);
    map = PyMem_Malloc((nl + 1) * 4); /* (map[nl]: where ids outside the table go, a null) */
    u = PyMem_Calloc(nvalues + 1, 1);
    if (pos == NULL || defs == NULL || map == NULL || u == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    map[nl] = (int32_t)nvalues;
    for (Py_ssize_t k = 0; k < nl; k++) { /* a position within the dictionary and the width, a null or bad */
        int32_t v = L[k];
        if (null_pos >= 0 && v == null_pos) {
            map[k] = (int32_t)nvalues;
        } else if (v < 0 || v >= nvalues || (w < 32 && (uint32_t)v >> w)) {
            map[k] = (int32_t)nvalues + 1; /* an error if a row holds it */
        } else {
            map[k] = v;
        }
    }
    nv = ids.itemsize == 8
             ? dict_rows_int64_t((const int64_t *)ids.buf, n, offset, map, nl, (int32_t)nvalues, null_pos >= 0, defs, pos)
             : dict_rows_int32_t((const int32_t *)ids.buf, n, offset, map, nl, (int32_t)nvalues, null_pos >= 0, defs, pos);
    if (nv < 0) {
        Py_ssize_t i = -1 - nv;
        long long id = ids.itemsize == 8 ? (long long)((const int64_t *)ids.buf)[i] : (long long)((const int32_t *)ids.buf)[i];
        PyErr_Format(PyExc_ValueError, "dict_page: id %lld is outside the table of %zd or its position outside "
                     "the dictionary or the bit width", id, nl);
        goto done;
    }
    if (want_used)
        for (Py_ssize_t j = 0; j < nv; j++) u[pos[j]] = 1; /* (positions checked: < nvalues) */
    used = PyBytes_FromStringAndSize((const char *)u, nvalues);
    Py_ssize_t nulls = n - nv;
    body = PyBytes_FromStringAndSize(NULL, 4 + 16 + rle_bound(n, 1) + 1 + rle_bound(nv, w));
    if (body == NULL || used == NULL) goto done;
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(body);
    uint8_t *p = level_section(defs, n, 1, nulls == 0, 1, start);
    *p++ = (uint8_t)w;
    Py_buffer q = {0};
    q.buf = pos, q.len = nv * 4, q.itemsize = 4;
    p = rle_encode(&q, w, p);
    body = finish(body, start, p);
    if (body != NULL) out = Py_BuildValue("(OnO)", body, nulls, used);
done:
    Py_XDECREF(body);
    Py_XDECREF(used);
    PyMem_Free(pos);
    PyMem_Free(defs);
    PyMem_Free(map);
    PyMem_Free(u);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&lut);
    return out;
}

/* delta_nonneg(values[, as32]) -> (body, nulls): the data page body of an optional int64/int32 column
 * whose negative values are nulls (``view``'s "none" for ids, sizes, return codes): the definition
 * levels (4-byte length, RLE hybrid at width 1) then DELTA_BINARY_PACKED of the other values.
 * ``as32``: int64 input written as an INT32 column (each value truncated to 32 bits, as numpy's
 * cast does; the nulls are the negative int64 values).
 * One pass finds the nulls and gathers the values; replaces a mask, its count, its negation and
 * the level pass in numpy (docs/decisions/0051). */
static PyObject *delta_nonneg(PyObject *self, PyObject *args) {
    PyObject *ovals;
    int as32 = 0;
    if (!PyArg_ParseTuple(args, "O|p", &ovals, &as32)) return NULL;
    Py_buffer b;
    if (get_buffer(ovals, &b) < 0) return NULL;
    PyObject *out = NULL, *body = NULL;
    void *packed = NULL;
    uint8_t *defs = NULL;
    int outsize = as32 ? 4 : (int)b.itemsize;
    if (b.itemsize != 8 && b.itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "delta_nonneg takes 4- or 8-byte integers");
        goto done;
    }
    Py_ssize_t n = b.len / b.itemsize, nv = 0;
    packed = PyMem_Malloc(n ? n * b.itemsize : 1);
    defs = PyMem_Malloc(n ? n : 1);
    if (packed == NULL || defs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (b.itemsize == 8 && outsize == 4) {
        const int64_t *v = (const int64_t *)b.buf;
        int32_t *q = (int32_t *)packed;
        for (Py_ssize_t i = 0; i < n; i++) {
            int ok = v[i] >= 0;
            defs[i] = (uint8_t)ok;
            q[nv] = (int32_t)(uint32_t)(uint64_t)v[i];
            nv += ok;
        }
    } else if (b.itemsize == 8) {
        const int64_t *v = (const int64_t *)b.buf;
        int64_t *q = (int64_t *)packed;
        for (Py_ssize_t i = 0; i < n; i++) {
            int ok = v[i] >= 0;
            defs[i] = (uint8_t)ok;
            q[nv] = v[i];
            nv += ok;
        }
    } else {
        const int32_t *v = (const int32_t *)b.buf;
        int32_t *q = (int32_t *)packed;
        for (Py_ssize_t i = 0; i < n; i++) {
            int ok = v[i] >= 0;
            defs[i] = (uint8_t)ok;
            q[nv] = v[i];
            nv += ok;
        }
    }
    body = PyBytes_FromStringAndSize(NULL, 4 + 16 + rle_bound(n, 1) + delta_bound(nv));
    if (body == NULL) goto done;
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(body);
    uint8_t *p = level_section(defs, n, 1, nv == n, 1, start);
    p = delta_encode(packed, nv, outsize, p);
    body = finish(body, start, p);
    if (body != NULL) out = Py_BuildValue("(On)", body, n - nv);
done:
    Py_XDECREF(body);
    PyMem_Free(packed);
    PyMem_Free(defs);
    PyBuffer_Release(&b);
    return out;
}

/* present(ids, k) -> bytes or None: one byte per value 0..k-1, 1 where some id equals it (int64
 * ids); None when an id lies outside [0, k).  A presence pass at ~3 instructions an id where
 * numpy's bincount costs ~13 (docs/decisions/0051). */
static PyObject *present(PyObject *self, PyObject *args) {
    PyObject *oids;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "On", &oids, &k)) return NULL;
    Py_buffer b;
    if (get_buffer(oids, &b) < 0) return NULL;
    if (b.itemsize != 8 || k < 0) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "present takes int64 ids and a count >= 0");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, k + 1);
    if (out == NULL) {
        PyBuffer_Release(&b);
        return NULL;
    }
    uint8_t *u = (uint8_t *)PyBytes_AS_STRING(out);
    memset(u, 0, k + 1);
    const int64_t *v = (const int64_t *)b.buf;
    Py_ssize_t n = b.len / 8;
    const uint64_t lim = (uint64_t)k;
    for (Py_ssize_t i = 0; i < n; i++) { /* outside: entry k */
        uint64_t x = (uint64_t)v[i];
        u[x < lim ? x : lim] = 1;
    }
    PyBuffer_Release(&b);
    if (u[k]) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (_PyBytes_Resize(&out, k) < 0) return NULL;
    return out;
}

/* list_page(first, second or None) -> (body, level_count): the data page body of ``flow_id``
 * (an optional list of optional int64, written as never-null lists of never-null values): row i is
 * the list of first[i] and second[i] without the zeros (0 = none), in that order.  Repetition
 * levels (4-byte length, width 1; one run when no row has two values), definition levels (width
 * 2: 1 an empty list, 3 a value), DELTA_BINARY_PACKED values.  One pass builds levels and values;
 * replaces the offsets, counts, masks and level arrays made in numpy (docs/decisions/0051). */
static PyObject *list_page(PyObject *self, PyObject *args) {
    PyObject *oa, *ob;
    if (!PyArg_ParseTuple(args, "OO", &oa, &ob)) return NULL;
    Py_buffer a, b = {0};
    if (get_buffer(oa, &a) < 0) return NULL;
    int has_b = ob != Py_None;
    if (has_b && get_buffer(ob, &b) < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *out = NULL, *body = NULL;
    int64_t *vals = NULL;
    uint8_t *reps = NULL, *defs = NULL;
    Py_ssize_t n = a.len / (a.itemsize ? a.itemsize : 1);
    if (a.itemsize != 8 || (has_b && (b.itemsize != 8 || b.len != a.len))) {
        PyErr_SetString(PyExc_ValueError, "list_page takes one or two int64 buffers of the same length");
        goto done;
    }
    Py_ssize_t cap = has_b ? 2 * n : n, nv = 0, t = 0;
    vals = PyMem_Malloc(cap ? cap * 8 : 8);
    reps = PyMem_Malloc(cap ? cap : 1);
    defs = PyMem_Malloc(cap ? cap : 1);
    if (vals == NULL || reps == NULL || defs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *A = (const int64_t *)a.buf, *B = (const int64_t *)b.buf;
    int two = 0;
    if (!has_b) {
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t x = A[i];
            vals[nv] = x;
            nv += x != 0;
            defs[i] = (uint8_t)(1 + 2 * (x != 0));
        }
        t = n;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t x = A[i], y = B[i];
            int k = (x != 0) + (y != 0);
            reps[t] = 0;
            defs[t++] = (uint8_t)(k ? 3 : 1);
            if (k == 2) {
                reps[t] = 1;
                defs[t++] = 3;
                two = 1;
            }
            if (x) vals[nv++] = x;
            if (y) vals[nv++] = y;
        }
    }
    body = PyBytes_FromStringAndSize(NULL, 8 + 16 + rle_bound(t, 1) + rle_bound(t, 2) + delta_bound(nv));
    if (body == NULL) goto done;
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(body);
    uint8_t *p = level_section(reps, t, 1, !two, 0, start); /* (no row of two: one run of 0s) */
    p = level_section(defs, t, 2, 0, 0, p);
    p = delta_encode(vals, nv, 8, p);
    body = finish(body, start, p);
    if (body != NULL) out = Py_BuildValue("(On)", body, t);
done:
    Py_XDECREF(body);
    PyMem_Free(vals);
    PyMem_Free(reps);
    PyMem_Free(defs);
    PyBuffer_Release(&a);
    if (has_b) PyBuffer_Release(&b);
    return out;
}

static PyObject *plain_byte_array(PyObject *self, PyObject *args) {
    PyObject *ooff, *odata, *ovalid;
    const char *prefix = "";
    Py_ssize_t plen = 0;
    if (!PyArg_ParseTuple(args, "OOO|y#", &ooff, &odata, &ovalid, &prefix, &plen)) return NULL;
    Py_buffer off, data, valid = {0};
    if (get_buffer(ooff, &off) < 0) return NULL;
    if (PyObject_GetBuffer(odata, &data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&off);
        return NULL;
    }
    int has_valid = ovalid != Py_None;
    if (has_valid && PyObject_GetBuffer(ovalid, &valid, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&off);
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t n = off.len / 4 - 1;
    const int32_t *o = (const int32_t *)off.buf;
    if (off.itemsize != 4 || n < 0 || (has_valid && valid.len < n)) {
        PyErr_SetString(PyExc_ValueError, "plain_byte_array: bad offsets or validity");
        goto done;
    }
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o[i + 1] < o[i] || o[i] < 0 || o[i + 1] > data.len) {
            PyErr_SetString(PyExc_ValueError, "plain_byte_array: offsets out of range");
            goto done;
        }
        if (!has_valid || ((const uint8_t *)valid.buf)[i]) total += 4 + (o[i + 1] - o[i]);
    }
    out = PyBytes_FromStringAndSize(NULL, plen + total);
    if (out == NULL) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(p, prefix, plen);
    p += plen;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (has_valid && !((const uint8_t *)valid.buf)[i]) continue;
        uint32_t len = (uint32_t)(o[i + 1] - o[i]);
        memcpy(p, &len, 4);
        memcpy(p + 4, (const uint8_t *)data.buf + o[i], len);
        p += 4 + len;
    }
done:
    PyBuffer_Release(&off);
    PyBuffer_Release(&data);
    if (has_valid) PyBuffer_Release(&valid);
    return out;
}

/* ---- Chrome trace-event JSON: `view --output-format json`'s events (exporters/chrome_json.py) ----
 *
 * chrome_events(n, cols, tables, origin, pid, extra offsets, data, valid, ascii, sep) -> [bytes] or None
 *
 * Renders one chunk of a process's events, ``sep``-joined (in parts of ~4 MiB, to be written one
 * after the other), exactly as ``dumps_bytes`` of the dicts the
 * Python path (``chrome_json._events_py``) builds: the same keys in the same order, the same
 * numbers, the same escaping (``ascii``: the standard library's ensure_ascii escaping and float repr;
 * else orjson's: UTF-8 as is, shortest floats laid out as orjson does).  Every string the Python
 * side can encode once (type names, categories, model names, string arguments, device profiles)
 * comes pre-encoded in a table; an event's columns hold indices into them (-1: absent).  Only the
 * ``extra_json`` objects are parsed here, per event: keys and values are decoded and re-encoded,
 * then merged into the args as ``dict.update`` would (a known key keeps its place, a new one goes
 * last, a repeated key keeps its first place and last value).
 *
 * Returns None when an event holds something this encoder does not reproduce exactly (an extra
 * value that is not a string, an integer of up to 18 digits, true, false or null; a lone
 * surrogate; a table index out of range): the caller then renders the chunk with the Python path,
 * which gives the same bytes or raises the same error.  Output size is bounded per event from the
 * input lengths only.
 */

#define PUT_LIT(q, s) (memcpy((q), (s), sizeof(s) - 1), (q) += sizeof(s) - 1)

static const char DIGITS2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static char *put_u64(char *q, uint64_t v) {
    char tmp[24];
    char *t = tmp + sizeof(tmp);
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        t -= 2;
        memcpy(t, DIGITS2 + 2 * r, 2);
    }
    if (v >= 10) {
        t -= 2;
        memcpy(t, DIGITS2 + 2 * v, 2);
    } else {
        *--t = (char)('0' + v);
    }
    Py_ssize_t k = tmp + sizeof(tmp) - t;
    memcpy(q, t, k);
    return q + k;
}

static char *put_i64(char *q, int64_t v) {
    if (v < 0) {
        *q++ = '-';
        return put_u64(q, (uint64_t)0 - (uint64_t)v);
    }
    return put_u64(q, (uint64_t)v);
}

/* A finite double as Python's repr (ascii) or orjson (ryu's layout of the same shortest digits). */
static char *put_double(char *q, double d, int ascii) {
    char *r = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (r == NULL) return NULL;
    if (ascii) {
        size_t k = strlen(r);
        memcpy(q, r, k);
        PyMem_Free(r);
        return q + k;
    }
    /* repr: [-]digits[.digits][e(+|-)exp]: collect the significant digits and the decimal exponent */
    const char *s = r;
    if (*s == '-') *q++ = *s++;
    char dig[32];
    int nd = 0, point = -1, seen = 0, lead = 0;
    for (; *s && *s != 'e'; s++) {
        if (*s == '.') {
            point = nd + lead;
            continue;
        }
        if (*s == '0' && !seen) {
            lead++;
            continue;
        }
        seen = 1;
        if (nd < 31) dig[nd++] = *s;
    }
    if (point < 0) point = nd + lead;
    int exp10 = *s == 'e' ? atoi(s + 1) : 0;
    PyMem_Free(r);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    if (nd == 0) {  /* zero */
        PUT_LIT(q, "0.0");
        return q;
    }
    int kk = point - lead + exp10; /* 10^(kk-1) <= |d| < 10^kk */
    int k = kk - nd;
    if (k >= 0 && kk <= 16) {
        memcpy(q, dig, nd);
        q += nd;
        memset(q, '0', k);
        q += k;
        PUT_LIT(q, ".0");
    } else if (kk > 0 && kk <= 16) {
        memcpy(q, dig, kk);
        q += kk;
        *q++ = '.';
        memcpy(q, dig + kk, nd - kk);
        q += nd - kk;
    } else if (kk > -5 && kk <= 0) {
        PUT_LIT(q, "0.");
        memset(q, '0', -kk);
        q += -kk;
        memcpy(q, dig, nd);
        q += nd;
    } else {
        *q++ = dig[0];
        if (nd > 1) {
            *q++ = '.';
            memcpy(q, dig + 1, nd - 1);
            q += nd - 1;
        }
        *q++ = 'e';
        q = put_i64(q, kk - 1);
    }
    return q;
}

/* x / 1000.0 (x: nanoseconds) as the Python path prints the float: below 2^42 microseconds the
 * exact decimal is the shortest repr (a double there is finer than 0.001 / 2), so it is written
 * from the integer; beyond, through the double. */
#define EXACT_NS ((int64_t)4398046511104 * 1000)

static char *put_us(char *q, int64_t x, int ascii) {
    if (x > -EXACT_NS && x < EXACT_NS) {
        uint64_t a = x < 0 ? (uint64_t)(-x) : (uint64_t)x;
        if (x < 0) *q++ = '-';
        q = put_u64(q, a / 1000);
        *q++ = '.';
        unsigned f = (unsigned)(a % 1000);
        if (f == 0) {
            *q++ = '0';
        } else {
            q[0] = (char)('0' + f / 100);
            q[1] = (char)('0' + f / 10 % 10);
            q[2] = (char)('0' + f % 10);
            q += f % 100 == 0 ? 1 : f % 10 == 0 ? 2 : 3;
        }
        return q;
    }
    return put_double(q, (double)x / 1000.0, ascii);
}

static const char HEX[] = "0123456789abcdef";

/* Encode code point c into a JSON string body the way the backend does. */
static char *put_cp(char *q, uint32_t c, int ascii) {
    switch (c) {
    case '"': PUT_LIT(q, "\\\""); return q;
    case '\\': PUT_LIT(q, "\\\\"); return q;
    case '\b': PUT_LIT(q, "\\b"); return q;
    case '\f': PUT_LIT(q, "\\f"); return q;
    case '\n': PUT_LIT(q, "\\n"); return q;
    case '\r': PUT_LIT(q, "\\r"); return q;
    case '\t': PUT_LIT(q, "\\t"); return q;
    }
    if (c < 0x20 || (ascii && c >= 0x7f)) {
        if (c >= 0x10000) {
            uint32_t v = c - 0x10000, hi = 0xD800 | (v >> 10), lo = 0xDC00 | (v & 0x3FF);
            q = put_cp(q, hi, ascii);
            return put_cp(q, lo, ascii);
        }
        *q++ = '\\';
        *q++ = 'u';
        *q++ = HEX[(c >> 12) & 15];
        *q++ = HEX[(c >> 8) & 15];
        *q++ = HEX[(c >> 4) & 15];
        *q++ = HEX[c & 15];
        return q;
    }
    if (c < 0x80) {
        *q++ = (char)c;
    } else if (c < 0x800) {
        *q++ = (char)(0xC0 | (c >> 6));
        *q++ = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *q++ = (char)(0xE0 | (c >> 12));
        *q++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (char)(0x80 | (c & 0x3F));
    } else {
        *q++ = (char)(0xF0 | (c >> 18));
        *q++ = (char)(0x80 | ((c >> 12) & 0x3F));
        *q++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (char)(0x80 | (c & 0x3F));
    }
    return q;
}

static int hex4(const char *s, const char *end, uint32_t *out) {
    if (end - s < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* One UTF-8 code point (valid, shortest form, no surrogates), or -1. */
static int utf8_cp(const char **sp, const char *end, uint32_t *out) {
    const unsigned char *s = (const unsigned char *)*sp;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || end - *sp < n) return -1;
    if (n > 1) c &= 0x3F >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        c = c << 6 | (s[i] & 0x3F);
    }
    static const uint32_t MIN[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < MIN[n] || c > 0x10FFFF || (c >= 0xD800 && c < 0xE000)) return -1;
    *sp += n;
    *out = c;
    return 0;
}

/* Parse a JSON string at *sp (at its opening quote) as json.loads (strict) does and re-encode it,
 * quotes included; -1: not reproduced (invalid, a lone surrogate). */
static char *reencode_string(const char **sp, const char *end, char *q, int ascii) {
    const char *s = *sp + 1;
    *q++ = '"';
    for (;;) {
        if (s >= end) return NULL;
        unsigned char ch = (unsigned char)*s;
        uint32_t c;
        if (ch == '"') {
            s++;
            break;
        }
        if (ch < 0x20) return NULL; /* (json.loads strict: an error) */
        if (ch == '\\') {
            if (end - s < 2) return NULL;
            char e = s[1];
            s += 2;
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u':
                if (hex4(s, end, &c)) return NULL;
                s += 4;
                if (c >= 0xD800 && c < 0xDC00) {
                    uint32_t lo;
                    if (end - s < 6 || s[0] != '\\' || s[1] != 'u' || hex4(s + 2, end, &lo) || lo < 0xDC00 ||
                        lo >= 0xE000)
                        return NULL;
                    s += 6;
                    c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                } else if (c >= 0xDC00 && c < 0xE000) {
                    return NULL;
                }
                break;
            default: return NULL;
            }
        } else if (ch < 0x80) {
            c = ch;
            s++;
        } else if (utf8_cp(&s, end, &c)) {
            return NULL;
        }
        q = put_cp(q, c, ascii);
    }
    *q++ = '"';
    *sp = s;
    return q;
}

static const char *skip_ws(const char *s, const char *end) {
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++;
    return s;
}

/* A value of an extra object re-encoded (string, integer of 1-18 digits, true, false, null). */
static char *reencode_value(const char **sp, const char *end, char *q, int ascii) {
    const char *s = *sp;
    if (s >= end) return NULL;
    if (*s == '"') return reencode_string(sp, end, q, ascii);
    if (*s == '-' || (*s >= '0' && *s <= '9')) {
        const char *d = s + (*s == '-');
        const char *e = d;
        while (e < end && *e >= '0' && *e <= '9') e++;
        if (e == d || e - d > 18 || (*d == '0' && e - d > 1)) return NULL;
        if (e < end && (*e == '.' || *e == 'e' || *e == 'E')) return NULL;
        if (*s == '-' && e - d == 1 && *d == '0') return NULL; /* -0: the int 0 */
        memcpy(q, s, e - s);
        *sp = e;
        return q + (e - s);
    }
    static const char *const WORDS[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(WORDS[i]);
        if ((size_t)(end - s) >= k && memcmp(s, WORDS[i], k) == 0) {
            memcpy(q, s, k);
            *sp = s + k;
            return q + k;
        }
    }
    return NULL;
}

typedef struct {
    const char *k, *v;
    int kl, vl;
} entry;

#define MAX_ENTRIES 64

static int find_key(const entry *es, int n, const char *k, int kl) {
    for (int i = 0; i < n; i++)
        if (es[i].kl == kl && memcmp(es[i].k, k, kl) == 0) return i;
    return -1;
}

/* Merge the extra object [s, end) into es (dict.update); encoded text goes to *scratch.  0, or -1:
 * not reproduced. */
static int merge_extra(const char *s, const char *end, entry *es, int *n, char **scratch, int ascii) {
    s = skip_ws(s, end);
    if (s >= end || *s != '{') return -1;
    s = skip_ws(s + 1, end);
    if (s < end && *s == '}') return skip_ws(s + 1, end) == end ? 0 : -1;
    for (;;) {
        if (s >= end || *s != '"') return -1;
        char *k = *scratch;
        char *ke = reencode_string(&s, end, k, ascii);
        if (ke == NULL) return -1;
        s = skip_ws(s, end);
        if (s >= end || *s != ':') return -1;
        s = skip_ws(s + 1, end);
        char *v = ke;
        char *ve = reencode_value(&s, end, v, ascii);
        if (ve == NULL) return -1;
        *scratch = ve;
        int i = find_key(es, *n, k, (int)(ke - k));
        if (i < 0) {
            if (*n >= MAX_ENTRIES) return -1;
            i = (*n)++;
            es[i].k = k;
            es[i].kl = (int)(ke - k);
        }
        es[i].v = v;
        es[i].vl = (int)(ve - v);
        s = skip_ws(s, end);
        if (s < end && *s == ',') {
            s = skip_ws(s + 1, end);
            continue;
        }
        if (s < end && *s == '}') return skip_ws(s + 1, end) == end ? 0 : -1;
        return -1;
    }
}

typedef struct {
    Py_buffer b;
    const int64_t *v;
    int have;
} icol;

static int get_icol(PyObject *o, icol *c, Py_ssize_t n, const char *what) {
    c->have = 0;
    c->v = NULL;
    if (o == Py_None) return 0;
    if (PyObject_GetBuffer(o, &c->b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    c->have = 1;
    const char *f = c->b.format;
    if (f != NULL && (*f == '<' || *f == '=')) f++;
    if (c->b.itemsize != 8 || c->b.len != n * 8 || f == NULL || (strcmp(f, "l") != 0 && strcmp(f, "q") != 0)) {
        PyErr_Format(PyExc_ValueError, "chrome_events: %s must be %zd int64 values", what, n);
        return -1;
    }
    c->v = (const int64_t *)c->b.buf;
    return 0;
}

static void release_icol(icol *c) {
    if (c->have) PyBuffer_Release(&c->b);
    c->have = 0;
}

/* A list of bytes, copied into one arena padded for copy_small (pointers into it, lengths). */
typedef struct {
    Py_ssize_t n, maxlen, total;
    PyObject *list;
    const char **p;
    Py_ssize_t *l;
} table;

/* Copy len bytes 16 at a time: reads and writes up to 15 bytes past both ends, so ``src`` must be
 * padded (the arena, KEYS, the numbers' and the extras' buffers) and ``q`` have room (each slice's
 * allocation has PAD bytes beyond its bound). */
#define PAD 32
static inline char *copy_small(char *q, const char *src, Py_ssize_t len) {
    for (Py_ssize_t k = 0; k < len; k += 16) memcpy(q + k, src + k, 16);
    return q + len;
}

static const char KEYS[][32] = {"\"model_name\"", "\"exec_id\"", "\"seq\"", "\"bytes\"", "\"ret\"", "\"op\"",
                                "\"group\"", "\"dtype\"", "\"flow_id\"", "\"framework_stream_id\"",
                                "\"device_profile\""};
static const int KEYLEN[] = {12, 9, 5, 7, 5, 4, 7, 7, 9, 21, 16};
enum { K_MODEL, K_EXEC, K_SEQ, K_BYTES, K_RET, K_OP, K_GROUP, K_DTYPE, K_FLOW, K_FSID, K_DEVP };

static int get_table(PyObject *o, table *t, const char *what) {
    if (!PyList_Check(o)) {
        PyErr_Format(PyExc_TypeError, "chrome_events: %s must be a list of bytes", what);
        return -1;
    }
    t->list = o;
    t->n = PyList_GET_SIZE(o);
    t->maxlen = t->total = 0;
    t->p = NULL;
    t->l = NULL;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *b = PyList_GET_ITEM(o, i);
        if (!PyBytes_Check(b)) {
            PyErr_Format(PyExc_TypeError, "chrome_events: %s must be a list of bytes", what);
            return -1;
        }
        if (PyBytes_GET_SIZE(b) > t->maxlen) t->maxlen = PyBytes_GET_SIZE(b);
        t->total += PyBytes_GET_SIZE(b);
    }
    return 0;
}

/* Copy each table's strings into ``arena`` (room for all of them + PAD) and point at them. */
static int place_table(table *t, char **arena) {
    t->p = PyMem_Malloc(sizeof(char *) * (t->n + 1));
    t->l = PyMem_Malloc(sizeof(Py_ssize_t) * (t->n + 1));
    if (t->p == NULL || t->l == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *b = PyList_GET_ITEM(t->list, i);
        t->p[i] = *arena;
        t->l[i] = PyBytes_GET_SIZE(b);
        memcpy(*arena, PyBytes_AS_STRING(b), t->l[i]);
        *arena += t->l[i];
    }
    return 0;
}

#define TAB_PTR(t, i) ((t).p[i])
#define TAB_LEN(t, i) ((t).l[i])

#define SLICE (4 << 20)

/* Shrink the slice ``*bytes`` to what was written (up to ``q``) and append it to ``parts``. */
static int end_slice(PyObject *parts, PyObject **bytes, char *q) {
    if (_PyBytes_Resize(bytes, q - PyBytes_AS_STRING(*bytes)) < 0) return -1;
    int r = PyList_Append(parts, *bytes);
    Py_CLEAR(*bytes);
    return r;
}

enum { C_ORDER, C_START, C_END, C_TYPE, C_TID, C_MODEL, C_EXEC, C_SEQ, C_BYTES, C_RET, C_OP, C_GROUP, C_DTYPE,
       C_FLOW, C_FSID, C_DEVP, C_ROLE, NCOLS };
static const char *const COL_NAMES[NCOLS] = {"order", "start", "end", "type", "tid", "model", "exec_id", "seq",
                                             "bytes", "ret", "op", "group", "dtype", "flow_id",
                                             "framework_stream_id", "device_profile", "role"};
enum { T_NAME, T_CAT, T_MODEL, T_STR, T_DEVP, NTABS };
static const char *const TAB_NAMES[NTABS] = {"names", "cats", "models", "strings", "device_profiles"};


/* v in lower-case hex digits (a minus sign first when negative), as Python's hex() writes them
   after its "0x" (which the caller writes); returns the end of what was written. */
static inline char *put_signed_hex(char *q, int64_t v) {
    uint64_t a = (uint64_t)v;
    if (v < 0) {
        *q++ = '-';
        a = (uint64_t)0 - a;
    }
    char hx[16];
    int h = 0;
    do {
        hx[h++] = HEX[a & 15];
        a >>= 4;
    } while (a);
    while (h) *q++ = hx[--h];
    return q;
}

static PyObject *chrome_events(PyObject *self, PyObject *args) {
    PyObject *cols_o, *tabs_o, *pid_o, *eoff_o, *edata_o, *evalid_o;
    long long origin;
    int ascii;
    Py_buffer sep;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "nO!O!LSOOOpy*", &n, &PyTuple_Type, &cols_o, &PyTuple_Type, &tabs_o, &origin,
                          &pid_o, &eoff_o, &edata_o, &evalid_o, &ascii, &sep))
        return NULL;
    PyObject *result = NULL;
    icol cols[NCOLS];
    table tabs[NTABS];
    Py_buffer eoff = {0}, edata = {0}, evalid = {0};
    int have_extra = 0;
    PyObject *bytes = NULL, *parts = NULL;
    char *scratch = NULL, *arena = NULL;
    memset(cols, 0, sizeof(cols));
    memset(tabs, 0, sizeof(tabs));
    if (PyTuple_GET_SIZE(cols_o) != NCOLS || PyTuple_GET_SIZE(tabs_o) != NTABS || n < 0) {
        PyErr_SetString(PyExc_ValueError, "chrome_events: wrong number of columns or tables");
        goto done;
    }
    for (int i = 0; i < NCOLS; i++)
        if (get_icol(PyTuple_GET_ITEM(cols_o, i), &cols[i], n, COL_NAMES[i]) < 0) goto done;
    for (int i = 0; i < NCOLS; i++)
        if (!cols[i].have && i != C_FSID) {
            PyErr_Format(PyExc_ValueError, "chrome_events: %s is required", COL_NAMES[i]);
            goto done;
        }
    for (int i = 0; i < NTABS; i++)
        if (get_table(PyTuple_GET_ITEM(tabs_o, i), &tabs[i], TAB_NAMES[i]) < 0) goto done;
    if (tabs[T_NAME].n != tabs[T_CAT].n) {
        PyErr_SetString(PyExc_ValueError, "chrome_events: names and cats differ in length");
        goto done;
    }
    Py_ssize_t pidl = PyBytes_GET_SIZE(pid_o), total = pidl + (Py_ssize_t)sep.len + PAD;
    for (int i = 0; i < NTABS; i++) total += tabs[i].total;
    if ((arena = PyMem_Malloc(total)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    char *at = arena;
    for (int i = 0; i < NTABS; i++)
        if (place_table(&tabs[i], &at) < 0) goto done;
    const char *pid = at, *sepp = at + pidl;
    memcpy(at, PyBytes_AS_STRING(pid_o), pidl);
    memcpy(at + pidl, sep.buf, sep.len);
    const int32_t *offs = NULL;
    const char *data = NULL;
    const uint8_t *valid = NULL;
    if (eoff_o != Py_None) {
        if (PyObject_GetBuffer(eoff_o, &eoff, PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_extra |= 1;
        if (PyObject_GetBuffer(edata_o, &edata, PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_extra |= 2;
        if (PyObject_GetBuffer(evalid_o, &evalid, PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_extra |= 4;
        if (eoff.len != (n + 1) * 4 || evalid.len != n) {
            PyErr_SetString(PyExc_ValueError, "chrome_events: extra offsets must be n + 1 int32, valid n bytes");
            goto done;
        }
        offs = eoff.buf;
        data = edata.buf;
        valid = evalid.buf;
        for (Py_ssize_t i = 0; i <= n; i++)
            if (offs[i] < 0 || offs[i] > edata.len || (i && offs[i] < offs[i - 1])) {
                PyErr_SetString(PyExc_ValueError, "chrome_events: extra offsets out of range");
                goto done;
            }
    }
    Py_ssize_t tabmax = 0;
    for (int i = 0; i < NTABS; i++) tabmax += tabs[i].maxlen;
    Py_ssize_t fixed = 640 + 2 * MAX_ENTRIES + pidl + 3 * tabmax + (Py_ssize_t)sep.len;
    /* written in slices of ~SLICE bytes, each a bytes object bounded for its events and shrunk
     * when full: blocks the allocator reuses from one slice to the next (a block for the whole
     * chunk would be fresh pages every chunk, ~70 ns an event of page faults) */
    if ((parts = PyList_New(0)) == NULL) goto done;
    char *q = NULL, *qend = NULL;
    const int64_t *ord = cols[C_ORDER].v;
    int64_t const *fsid = cols[C_FSID].have ? cols[C_FSID].v : NULL;
    Py_ssize_t scap = 0;
    entry es[MAX_ENTRIES];
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t i = ord[j];
        if (i < 0 || i >= n) goto unsupported;
        Py_ssize_t elen = 0;
        if (valid != NULL && valid[i]) elen = offs[i + 1] - offs[i];
        if (qend - q < fixed + 6 * elen + PAD) {
            if (bytes != NULL && end_slice(parts, &bytes, q) < 0) goto done;
            Py_ssize_t size = fixed + 6 * elen + PAD > SLICE ? fixed + 6 * elen + PAD : SLICE;
            if ((bytes = PyBytes_FromStringAndSize(NULL, size)) == NULL) goto done;
            q = PyBytes_AS_STRING(bytes);
            qend = q + size;
        }
        if (j) q = copy_small(q, sepp, sep.len);
        int64_t ty = cols[C_TYPE].v[i];
        if (ty < 0 || ty >= tabs[T_NAME].n) goto unsupported;
        int64_t s0 = cols[C_START].v[i];
        int64_t dur = (int64_t)((uint64_t)cols[C_END].v[i] - (uint64_t)s0);
        int64_t ts = (int64_t)((uint64_t)s0 - (uint64_t)origin);
        PUT_LIT(q, "{\"name\":");
        q = copy_small(q, TAB_PTR(tabs[T_NAME], ty), TAB_LEN(tabs[T_NAME], ty));
        PUT_LIT(q, ",\"cat\":");
        q = copy_small(q, TAB_PTR(tabs[T_CAT], ty), TAB_LEN(tabs[T_CAT], ty));
        if (dur > 0)
            PUT_LIT(q, ",\"ph\":\"X\",\"pid\":");
        else
            PUT_LIT(q, ",\"ph\":\"i\",\"pid\":");
        q = copy_small(q, pid, pidl);
        PUT_LIT(q, ",\"tid\":");
        q = put_i64(q, cols[C_TID].v[i]);
        PUT_LIT(q, ",\"ts\":");
        if ((q = put_us(q, ts, ascii)) == NULL) goto done;
        PUT_LIT(q, ",\"args\":{");
        /* the argument columns, in _args's order */
        int ne = 0;
        char *sc = NULL;
        char nums[6][32];
        int64_t v;
#define TAB_ENTRY(key, col, t)                                                           \
    v = cols[col].v[i];                                                                  \
    if (v >= 0) {                                                                        \
        if (v >= tabs[t].n) goto unsupported;                                            \
        es[ne].k = KEYS[key];                                                            \
        es[ne].kl = KEYLEN[key];                                                         \
        es[ne].v = TAB_PTR(tabs[t], v);                                                  \
        es[ne++].vl = (int)TAB_LEN(tabs[t], v);                                          \
    }
#define INT_ENTRY(key, val, slot)                                                        \
    {                                                                                    \
        es[ne].k = KEYS[key];                                                            \
        es[ne].kl = KEYLEN[key];                                                         \
        es[ne].v = nums[slot];                                                           \
        es[ne++].vl = (int)(put_i64(nums[slot], val) - nums[slot]);                      \
    }
        TAB_ENTRY(K_MODEL, C_MODEL, T_MODEL)
        if ((v = cols[C_EXEC].v[i]) >= 0) INT_ENTRY(K_EXEC, v, 0)
        if ((v = cols[C_SEQ].v[i]) >= 0) INT_ENTRY(K_SEQ, v, 1)
        if ((v = cols[C_BYTES].v[i]) >= 0) INT_ENTRY(K_BYTES, v, 2)
        if ((v = cols[C_RET].v[i]) >= 0) INT_ENTRY(K_RET, v, 3)
        TAB_ENTRY(K_OP, C_OP, T_STR)
        TAB_ENTRY(K_GROUP, C_GROUP, T_STR)
        TAB_ENTRY(K_DTYPE, C_DTYPE, T_STR)
        int64_t flow = cols[C_FLOW].v[i];
        if (flow) INT_ENTRY(K_FLOW, flow, 4)
        if (fsid != NULL && fsid[i] >= 0) INT_ENTRY(K_FSID, fsid[i], 5)
        if (elen) {
            if (scap < 6 * elen + 2 * PAD) {
                PyMem_Free(scratch);
                scap = 6 * elen + 4 * PAD;
                if ((scratch = PyMem_Malloc(scap)) == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
            }
            sc = scratch;
            if (merge_extra(data + offs[i], data + offs[i + 1], es, &ne, &sc, ascii) < 0) goto unsupported;
        }
        v = cols[C_DEVP].v[i];
        if (v >= 0) {
            if (v >= tabs[T_DEVP].n) goto unsupported;
            int k = find_key(es, ne, KEYS[K_DEVP], KEYLEN[K_DEVP]);
            if (k < 0) {
                if (ne >= MAX_ENTRIES) goto unsupported;
                k = ne++;
                es[k].k = KEYS[K_DEVP];
                es[k].kl = KEYLEN[K_DEVP];
            }
            es[k].v = TAB_PTR(tabs[T_DEVP], v);
            es[k].vl = (int)TAB_LEN(tabs[T_DEVP], v);
        }
        for (int k = 0; k < ne; k++) {
            if (k) *q++ = ',';
            q = copy_small(q, es[k].k, es[k].kl);
            *q++ = ':';
            q = copy_small(q, es[k].v, es[k].vl);
        }
        *q++ = '}';
        if (dur > 0) {
            PUT_LIT(q, ",\"dur\":");
            if ((q = put_us(q, dur, ascii)) == NULL) goto done;
            int64_t role = cols[C_ROLE].v[i];
            if (role == 1 || role == 2) {
                PUT_LIT(q, ",\"bind_id\":\"0x");
                q = put_signed_hex(q, flow);
                if (role == 1)
                    PUT_LIT(q, "\",\"flow_out\":true");
                else
                    PUT_LIT(q, "\",\"flow_in\":true");
            } else if (role != 0) {
                goto unsupported;
            }
        } else {
            PUT_LIT(q, ",\"s\":\"t\"");
        }
        *q++ = '}';
    }
    if (bytes != NULL && end_slice(parts, &bytes, q) < 0) goto done;
    result = parts;
    parts = NULL;
    goto done;
unsupported:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(bytes);
    Py_XDECREF(parts);
    PyMem_Free(arena);
    for (int i = 0; i < NTABS; i++) {
        PyMem_Free(tabs[i].p);
        PyMem_Free(tabs[i].l);
    }
    for (int i = 0; i < NCOLS; i++) release_icol(&cols[i]);
    if (have_extra & 1) PyBuffer_Release(&eoff);
    if (have_extra & 2) PyBuffer_Release(&edata);
    if (have_extra & 4) PyBuffer_Release(&evalid);
    PyBuffer_Release(&sep);
    PyMem_Free(scratch);
    return result;
}

/* chrome_flows(kind, ids, pids, tids, ts, sep) -> bytes: the collectives' flow events of
 * ``chrome_json._collective_flows``, ``sep``-joined: kind 0 ``s``, 1 ``t``, 2 ``f`` (``bp: e``); ids
 * in hex; ts in nanoseconds since the origin, printed as Python's repr of ts / 1000.0 (the f-string
 * the Python path renders them with). */
static PyObject *chrome_flows(PyObject *self, PyObject *args) {
    PyObject *o[5];
    Py_buffer sep;
    if (!PyArg_ParseTuple(args, "OOOOOy*", &o[0], &o[1], &o[2], &o[3], &o[4], &sep)) return NULL;
    static const char *const names[5] = {"kind", "ids", "pids", "tids", "ts"};
    icol c[5];
    memset(c, 0, sizeof(c));
    PyObject *bytes = NULL, *result = NULL;
    Py_ssize_t n = -1;
    for (int i = 0; i < 5; i++) {
        if (o[i] == Py_None) {
            PyErr_Format(PyExc_ValueError, "chrome_flows: %s is required", names[i]);
            goto done;
        }
        if (n < 0) {
            Py_ssize_t len = PyObject_Length(o[i]);
            if (len < 0) goto done;
            n = len;
        }
        if (get_icol(o[i], &c[i], n, names[i]) < 0) goto done;
    }
    Py_ssize_t per = 160 + (Py_ssize_t)sep.len;
    if (n > PY_SSIZE_T_MAX / per) {
        PyErr_NoMemory();
        goto done;
    }
    if ((bytes = PyBytes_FromStringAndSize(NULL, per * n)) == NULL) goto done;
    char *q = PyBytes_AS_STRING(bytes);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) {
            memcpy(q, sep.buf, sep.len);
            q += sep.len;
        }
        PUT_LIT(q, "{\"name\":\"collective\",\"cat\":\"flow\",\"ph\":");
        switch (c[0].v[i]) {
        case 0: PUT_LIT(q, "\"s\""); break;
        case 1: PUT_LIT(q, "\"t\""); break;
        case 2: PUT_LIT(q, "\"f\",\"bp\":\"e\""); break;
        default:
            PyErr_SetString(PyExc_ValueError, "chrome_flows: kind must be 0, 1 or 2");
            goto done;
        }
        PUT_LIT(q, ",\"id\":\"0x");
        q = put_signed_hex(q, c[1].v[i]);
        PUT_LIT(q, "\",\"pid\":");
        q = put_i64(q, c[2].v[i]);
        PUT_LIT(q, ",\"tid\":");
        q = put_i64(q, c[3].v[i]);
        PUT_LIT(q, ",\"ts\":");
        if ((q = put_us(q, c[4].v[i], 1)) == NULL) goto done;
        *q++ = '}';
    }
    if (_PyBytes_Resize(&bytes, q - PyBytes_AS_STRING(bytes)) < 0) goto done;
    result = bytes;
    bytes = NULL;
done:
    Py_XDECREF(bytes);
    for (int i = 0; i < 5; i++) release_icol(&c[i]);
    PyBuffer_Release(&sep);
    return result;
}

/* group_stats(gid, start, end, count, total, first, last, longest): the summary's five reductions
 * over one chunk in one pass, into the caller's int64 arrays of `size` groups (count and total
 * zeroed, first at INT64_MAX, last and longest at INT64_MIN): for each event i of group g = gid[i],
 * count[g] += 1, total[g] += end - start, first[g] = min(start), last[g] = max(end),
 * longest[g] = max(end - start).  What numpy did in five passes (bincount and four ufunc.at: ~60 ms
 * per million events on this VM, decision 0218).  Differences and sums wrap as numpy's int64 do.
 * ValueError for a gid outside [0, size) or arrays of different lengths; the GIL is released. */
static PyObject *group_stats(PyObject *self, PyObject *args) {
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7])) return NULL;
    Py_buffer b[8];
    int got = 0;
    for (; got < 8; got++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (got >= 3 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(o[got], &b[got], flags) < 0) break;
        if (b[got].itemsize != 8 || b[got].format == NULL || (b[got].format[0] != 'q' && b[got].format[0] != 'l')) {
            got++;
            PyErr_SetString(PyExc_ValueError, "group_stats takes int64 arrays");
            break;
        }
    }
    PyObject *ret = NULL;
    if (got == 8 && !PyErr_Occurred()) {
        Py_ssize_t n = b[0].len / 8, size = b[3].len / 8;
        int ok = b[1].len / 8 == n && b[2].len / 8 == n;
        for (int j = 4; j < 8; j++) ok = ok && b[j].len / 8 == size;
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "group_stats: gid, start and end of one length; the five outputs of another");
        } else {
            const int64_t *gid = b[0].buf, *st = b[1].buf, *en = b[2].buf;
            int64_t *count = b[3].buf, *total = b[4].buf, *first = b[5].buf, *last = b[6].buf, *longest = b[7].buf;
            Py_ssize_t bad = -1;
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < n; i++) {
                uint64_t g = (uint64_t)gid[i];
                if (g >= (uint64_t)size) {
                    bad = i;
                    break;
                }
                int64_t s0 = st[i], e0 = en[i];
                int64_t d = (int64_t)((uint64_t)e0 - (uint64_t)s0);
                count[g] += 1;
                total[g] = (int64_t)((uint64_t)total[g] + (uint64_t)d);
                if (s0 < first[g]) first[g] = s0;
                if (e0 > last[g]) last[g] = e0;
                if (d > longest[g]) longest[g] = d;
            }
            Py_END_ALLOW_THREADS
            if (bad >= 0)
                PyErr_Format(PyExc_ValueError, "group_stats: gid[%zd] outside [0, %zd)", bad, size);
            else
                ret = Py_NewRef(Py_None);
        }
    }
    for (int j = 0; j < got; j++) PyBuffer_Release(&b[j]);
    return ret;
}

static PyMethodDef methods[] = {
    {"delta_binary_packed", delta_binary_packed, METH_VARARGS, "prefix + DELTA_BINARY_PACKED encoding of the valid values of an int64/int32 buffer."},
    {"rle_hybrid", rle_hybrid, METH_VARARGS, "RLE/bit-packed hybrid encoding of a uint8/int32 buffer at a bit width."},
    {"plain_byte_array", plain_byte_array, METH_VARARGS, "PLAIN BYTE_ARRAY encoding of the valid strings."},
    {"delta_nonneg", delta_nonneg, METH_VARARGS, "Levels + DELTA_BINARY_PACKED of an int column whose negatives are nulls."},
    {"group_stats", group_stats, METH_VARARGS, "The event summary's count, total, first, last and longest per group, in one pass."},
    {"present", present, METH_VARARGS, "Which of 0..k-1 occur among int64 ids (None: some id outside)."},
    {"list_page", list_page, METH_VARARGS, "Levels + DELTA_BINARY_PACKED of a list column of up to two non-zero int64 a row."},
    {"dict_page", dict_page, METH_VARARGS, "Dictionary data page body (levels, bit width, positions) from ids and a lut."},
    {"chrome_events", chrome_events, METH_VARARGS, "A chunk of view's events as Chrome trace-event JSON (None: not reproduced)."},
    {"chrome_flows", chrome_flows, METH_VARARGS, "The collectives' flow events as Chrome trace-event JSON."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pqenc", "Parquet value encoders and Chrome trace-event JSON events.", -1, methods};

PyMODINIT_FUNC PyInit__pqenc(void) { return PyModule_Create(&module); }

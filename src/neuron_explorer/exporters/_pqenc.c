/* Parquet value encoders for `view`'s own Parquet writer (exporters/parquet_file.py).
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

static PyMethodDef methods[] = {
    {"delta_binary_packed", delta_binary_packed, METH_VARARGS, "prefix + DELTA_BINARY_PACKED encoding of the valid values of an int64/int32 buffer."},
    {"rle_hybrid", rle_hybrid, METH_VARARGS, "RLE/bit-packed hybrid encoding of a uint8/int32 buffer at a bit width."},
    {"plain_byte_array", plain_byte_array, METH_VARARGS, "PLAIN BYTE_ARRAY encoding of the valid strings."},
    {"delta_nonneg", delta_nonneg, METH_VARARGS, "Levels + DELTA_BINARY_PACKED of an int column whose negatives are nulls."},
    {"present", present, METH_VARARGS, "Which of 0..k-1 occur among int64 ids (None: some id outside)."},
    {"list_page", list_page, METH_VARARGS, "Levels + DELTA_BINARY_PACKED of a list column of up to two non-zero int64 a row."},
    {"dict_page", dict_page, METH_VARARGS, "Dictionary data page body (levels, bit width, positions) from ids and a lut."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pqenc", "Parquet value encoders.", -1, methods};

PyMODINIT_FUNC PyInit__pqenc(void) { return PyModule_Create(&module); }

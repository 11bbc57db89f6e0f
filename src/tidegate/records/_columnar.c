/*
 * tidegate.records._columnar: the records of several record batches decoded straight
 * into column buffers (Arrow's layout), with no Python object per record. Optional:
 * `records.columns` falls back to decoding records as objects when it does not import.
 *
 * decode_columns(batches, min_offset, want_headers)
 *     `batches`: a list of (data, count, base_offset, base_timestamp, log_append_time,
 *     timestamp_type) — a batch's (uncompressed) records section as bytes, its header's
 *     fields, and its max timestamp (or None) when the batch uses LogAppendTime, as
 *     record.decode_record_tuples takes them. The caller (records/columns.py) has
 *     already validated the batch headers, decompressed, and dropped control and
 *     aborted batches. Records with offset < min_offset are checked but not output.
 *
 *     Returns (n, offsets, timestamps, timestamp_types, key, value, headers):
 *     offsets / timestamps little-endian int64 x n, timestamp_types int32 x n; key and
 *     value each (validity, null_count, offsets, data): validity an Arrow bitmap (bit
 *     set = not null) or None when nothing is null, offsets int32 x (n + 1), data the
 *     bytes of every non-null value back to back; headers None unless want_headers,
 *     else (list_offsets int32 x (n + 1), count, key_offsets, key_data, value) with
 *     `value` as key/value above. All buffers are bytes objects pyarrow wraps as they
 *     are (pa.py_buffer).
 *
 * The input is untrusted network data: every byte read is checked against the end of
 * its section first, with the same checks as record._decode_record_tuples_py (classes
 * CorruptRecordError / InvalidRecordError; messages shorter). The loop runs without
 * the GIL (inputs are immutable bytes, outputs malloc'd until the end).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_RECORD_BODY 6
#define MIN_RECORD_SIZE 7

typedef struct {
    PyObject *corrupt;
    PyObject *invalid;
} columnar_state;

static inline columnar_state *
get_state(PyObject *module)
{
    return (columnar_state *)PyModule_GetState(module);
}

/* A growable malloc'd byte buffer. */
typedef struct {
    char *p;
    size_t len;
    size_t cap;
} gbuf;

static int
gbuf_reserve(gbuf *b, size_t extra)
{
    size_t need = b->len + extra;
    if (need <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (p == NULL) {
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int
gbuf_put(gbuf *b, const void *src, size_t len)
{
    if (gbuf_reserve(b, len) < 0) {
        return -1;
    }
    if (len) {
        memcpy(b->p + b->len, src, len);
    }
    b->len += len;
    return 0;
}

static inline int
gbuf_put_i32(gbuf *b, int32_t v)
{
    return gbuf_put(b, &v, sizeof v);
}

/* Bit i of a validity bitmap; the bitmap grows a byte at a time, zeroed. */
static inline int
bitmap_set(gbuf *b, int64_t i, int valid)
{
    size_t byte = (size_t)(i >> 3);
    while (b->len <= byte) {
        char z = 0;
        if (gbuf_put(b, &z, 1) < 0) {
            return -1;
        }
    }
    if (valid) {
        b->p[byte] |= (char)(1u << (i & 7));
    }
    return 0;
}

/* One variable-width binary column. */
typedef struct {
    gbuf validity, offsets, data;
    int64_t nulls;
    int64_t n;
} bincol;

static int
bincol_init(bincol *c)
{
    memset(c, 0, sizeof *c);
    return gbuf_put_i32(&c->offsets, 0);
}

static void
bincol_free(bincol *c)
{
    free(c->validity.p);
    free(c->offsets.p);
    free(c->data.p);
}

/* Append a value (len >= 0) or a null (len == -1). The caller checked data + len is
   in bounds; total sizes are below INT32_MAX (checked up front). */
static int
bincol_add(bincol *c, const unsigned char *src, int64_t len)
{
    if (bitmap_set(&c->validity, c->n, len >= 0) < 0) {
        return -1;
    }
    if (len >= 0) {
        if (gbuf_put(&c->data, src, (size_t)len) < 0) {
            return -1;
        }
    }
    else {
        c->nulls++;
    }
    c->n++;
    return gbuf_put_i32(&c->offsets, (int32_t)c->data.len);
}

enum { OK = 0, E_NOMEM, E_CORRUPT, E_INVALID };

typedef struct {
    int kind;
    char msg[200];
} decode_error;

/* Record an error (raised once the GIL is held again); the arguments are long longs. */
static int
fail(decode_error *e, int kind, const char *fmt, ...)
{
    va_list ap;
    e->kind = kind;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static inline int64_t
unzigzag(uint64_t z)
{
    return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

/* A zigzag varint (max_bytes 5, int32 range) or varlong (max_bytes 10), as
   varint._decode with decode_varint_from / decode_varlong_from's range checks. */
static int
read_var(const unsigned char *d, int64_t n, int64_t *pos, int max_bytes, int64_t *out,
         decode_error *e)
{
    int64_t start = *pos, p = start;
    uint64_t z = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= n) {
            return fail(e, E_CORRUPT, "record data truncated at byte %lld",
                        (long long)start);
        }
        unsigned int b = d[p++];
        if (i == 9) { /* a varlong's 10th byte holds bits 63..69 */
            if (b >= 0x80) {
                break;
            }
            if (b > 1) {
                return fail(e, E_CORRUPT, "varlong at byte %lld does not fit in an int64",
                            (long long)start);
            }
            z |= (uint64_t)b << 63;
            *out = unzigzag(z);
            *pos = p;
            return 0;
        }
        z |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            int64_t v = unzigzag(z);
            if (max_bytes == 5 && (v < INT32_MIN || v > INT32_MAX)) {
                return fail(e, E_CORRUPT, "varint value %lld does not fit in an int32",
                            (long long)v);
            }
            *out = v;
            *pos = p;
            return 0;
        }
    }
    return fail(e, E_CORRUPT, "varint at byte %lld is longer than %lld bytes",
                (long long)start, (long long)max_bytes);
}

/* A length-prefixed byte string ending inside the record (-1: null) into `col`. */
static int
read_bytes(const unsigned char *d, int64_t n, int64_t *pos, int64_t rec_end, bincol *col,
           const char *what, decode_error *e)
{
    int64_t len;
    if (read_var(d, n, pos, 5, &len, e) < 0) {
        return -1;
    }
    if (len < -1) {
        return fail(e, E_INVALID, "invalid key or value length %lld", (long long)len);
    }
    if (len > rec_end - *pos) {
        (void)what;
        return fail(e, E_INVALID, "length %lld overruns its record at byte %lld",
                    (long long)len, (long long)*pos);
    }
    if (bincol_add(col, d + *pos, len) < 0) {
        e->kind = E_NOMEM;
        return -1;
    }
    if (len > 0) {
        *pos += len;
    }
    return 0;
}

typedef struct {
    gbuf offsets, timestamps, ts_types;
    bincol key, value;
    /* headers */
    gbuf list_offsets, hkey_offsets, hkey_data;
    bincol hvalue;
    int64_t n_headers;
    int want_headers;
} columns;

typedef struct {
    const unsigned char *d;
    int64_t n, count, base_offset, base_ts, lat;
    int has_lat;
    int32_t ts_type;
} batch_in;

static int
decode_batch(const batch_in *b, int64_t min_offset, columns *c, decode_error *e)
{
    const unsigned char *d = b->d;
    int64_t n = b->n, pos = 0;
    for (int64_t i = 0; i < b->count; i++) {
        int64_t length, ts_delta, offset_delta;
        if (read_var(d, n, &pos, 5, &length, e) < 0) {
            return -1;
        }
        int64_t rec_start = pos, rec_end = pos + length;
        if (length < MIN_RECORD_BODY) {
            return fail(e, E_INVALID, "invalid record length %lld at byte %lld",
                        (long long)length, (long long)rec_start);
        }
        if (rec_end > n) {
            return fail(e, E_CORRUPT, "record at byte %lld of length %lld runs past the end"
                        " of the record data", (long long)rec_start, (long long)length);
        }
        pos += 1; /* attributes */
        if (read_var(d, n, &pos, 10, &ts_delta, e) < 0 ||
            read_var(d, n, &pos, 5, &offset_delta, e) < 0) {
            return -1;
        }
        int64_t offset, ts;
        if (__builtin_add_overflow(b->base_offset, offset_delta, &offset)) {
            return fail(e, E_INVALID, "offset overflows int64 (delta %lld)",
                        (long long)offset_delta);
        }
        if (b->has_lat) {
            ts = b->lat;
        }
        else if (__builtin_add_overflow(b->base_ts, ts_delta, &ts)) {
            return fail(e, E_INVALID, "timestamp overflows int64 (delta %lld)",
                        (long long)ts_delta);
        }
        int keep = offset >= min_offset;
        /* Dropped records are parsed into scratch columns: the checks are the same. */
        bincol *kcol = &c->key, *vcol = &c->value;
        bincol scratch_k, scratch_v;
        if (!keep) {
            if (bincol_init(&scratch_k) < 0 || bincol_init(&scratch_v) < 0) {
                e->kind = E_NOMEM;
                return -1;
            }
            kcol = &scratch_k;
            vcol = &scratch_v;
        }
        int rc = read_bytes(d, n, &pos, rec_end, kcol, "key", e);
        if (rc == 0) {
            rc = read_bytes(d, n, &pos, rec_end, vcol, "value", e);
        }
        if (!keep) {
            bincol_free(&scratch_k);
            bincol_free(&scratch_v);
        }
        if (rc < 0) {
            return -1;
        }
        int64_t hcount;
        if (pos >= n) {
            return fail(e, E_CORRUPT, "record data truncated at byte %lld",
                        (long long)pos);
        }
        if (read_var(d, n, &pos, 5, &hcount, e) < 0) {
            return -1;
        }
        if (hcount < 0 || hcount * 2 > rec_end - pos) {
            return fail(e, E_INVALID, "invalid record header count %lld",
                        (long long)hcount);
        }
        for (int64_t h = 0; h < hcount; h++) {
            int64_t klen;
            if (read_var(d, n, &pos, 5, &klen, e) < 0) {
                return -1;
            }
            if (klen < 0 || klen > rec_end - pos) {
                return fail(e, E_INVALID, "invalid record header key length %lld",
                            (long long)klen);
            }
            if (keep && c->want_headers) {
                if (gbuf_put(&c->hkey_data, d + pos, (size_t)klen) < 0 ||
                    gbuf_put_i32(&c->hkey_offsets, (int32_t)c->hkey_data.len) < 0) {
                    e->kind = E_NOMEM;
                    return -1;
                }
            }
            pos += klen;
            int64_t vlen;
            if (read_var(d, n, &pos, 5, &vlen, e) < 0) {
                return -1;
            }
            if (vlen < -1 || vlen > rec_end - pos) {
                return fail(e, E_INVALID, "invalid record header value length %lld",
                            (long long)vlen);
            }
            if (keep && c->want_headers) {
                if (bincol_add(&c->hvalue, d + pos, vlen) < 0) {
                    e->kind = E_NOMEM;
                    return -1;
                }
                c->n_headers++;
            }
            if (vlen > 0) {
                pos += vlen;
            }
        }
        if (pos != rec_end) {
            return fail(e, E_INVALID, "invalid record size: expected %lld bytes in record "
                        "payload, read %lld", (long long)length, (long long)(pos - rec_start));
        }
        if (!keep) {
            continue;
        }
        if (gbuf_put(&c->offsets, &offset, 8) < 0 || gbuf_put(&c->timestamps, &ts, 8) < 0 ||
            gbuf_put_i32(&c->ts_types, b->ts_type) < 0 ||
            (c->want_headers &&
             gbuf_put_i32(&c->list_offsets, (int32_t)c->n_headers) < 0)) {
            e->kind = E_NOMEM;
            return -1;
        }
    }
    if (pos != n) {
        return fail(e, E_INVALID, "%lld bytes of record data left after the declared %lld "
                    "records", (long long)(n - pos), (long long)b->count);
    }
    return 0;
}

static void
columns_free(columns *c)
{
    free(c->offsets.p);
    free(c->timestamps.p);
    free(c->ts_types.p);
    bincol_free(&c->key);
    bincol_free(&c->value);
    free(c->list_offsets.p);
    free(c->hkey_offsets.p);
    free(c->hkey_data.p);
    bincol_free(&c->hvalue);
}

static PyObject *
as_bytes(const gbuf *b)
{
    return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->len);
}

/* (validity | None, null_count, offsets, data) */
static PyObject *
bincol_tuple(const bincol *c)
{
    PyObject *validity;
    if (c->nulls) {
        validity = as_bytes(&c->validity);
    }
    else {
        validity = Py_NewRef(Py_None);
    }
    if (validity == NULL) {
        return NULL;
    }
    return Py_BuildValue("(NLNN)", validity, (long long)c->nulls, as_bytes(&c->offsets),
                         as_bytes(&c->data));
}

static PyObject *
decode_columns(PyObject *module, PyObject *args)
{
    columnar_state *st = get_state(module);
    PyObject *list, *result = NULL;
    long long min_offset;
    int want_headers;
    if (!PyArg_ParseTuple(args, "O!Lp:decode_columns", &PyList_Type, &list, &min_offset,
                          &want_headers)) {
        return NULL;
    }
    Py_ssize_t nb = PyList_GET_SIZE(list);
    batch_in *in = PyMem_Calloc(nb ? (size_t)nb : 1, sizeof *in);
    if (in == NULL) {
        return PyErr_NoMemory();
    }
    /* Keep the list's items (the bytes) alive while the GIL is released. */
    PyObject *items = PyList_GetSlice(list, 0, nb);
    if (items == NULL) {
        PyMem_Free(in);
        return NULL;
    }
    int64_t total_count = 0, total_len = 0;
    for (Py_ssize_t i = 0; i < nb; i++) {
        PyObject *t = PyList_GET_ITEM(items, i), *data, *lat;
        long long count, base_offset, base_ts;
        int ts_type;
        if (!PyTuple_Check(t) ||
            !PyArg_ParseTuple(t, "SLLLOi:decode_columns batch", &data, &count, &base_offset,
                              &base_ts, &lat, &ts_type)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "decode_columns: batches must be tuples");
            }
            goto done;
        }
        batch_in *b = &in[i];
        b->d = (const unsigned char *)PyBytes_AS_STRING(data);
        b->n = PyBytes_GET_SIZE(data);
        if (count > b->n / MIN_RECORD_SIZE) {
            PyErr_Format(st->invalid, "batch declares %lld records but has only %lld bytes "
                         "of record data", count, (long long)b->n);
            goto done;
        }
        b->count = count < 0 ? 0 : count;
        b->base_offset = base_offset;
        b->base_ts = base_ts;
        b->has_lat = lat != Py_None;
        if (b->has_lat) {
            b->lat = PyLong_AsLongLong(lat);
            if (b->lat == -1 && PyErr_Occurred()) {
                goto done;
            }
        }
        b->ts_type = ts_type;
        total_count += b->count;
        total_len += b->n;
    }
    if (total_len >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "decode_columns: more than 2 GiB of record data");
        goto done;
    }

    columns c;
    memset(&c, 0, sizeof c);
    c.want_headers = want_headers;
    decode_error err = {OK, ""};
    if (bincol_init(&c.key) < 0 || bincol_init(&c.value) < 0 ||
        bincol_init(&c.hvalue) < 0 || gbuf_put_i32(&c.list_offsets, 0) < 0 ||
        gbuf_put_i32(&c.hkey_offsets, 0) < 0 ||
        gbuf_reserve(&c.offsets, (size_t)total_count * 8) < 0 ||
        gbuf_reserve(&c.timestamps, (size_t)total_count * 8) < 0 ||
        gbuf_reserve(&c.ts_types, (size_t)total_count * 4) < 0 ||
        gbuf_reserve(&c.key.offsets, (size_t)total_count * 4) < 0 ||
        gbuf_reserve(&c.value.offsets, (size_t)total_count * 4) < 0 ||
        gbuf_reserve(&c.value.data, (size_t)total_len) < 0) {
        err.kind = E_NOMEM;
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < nb; i++) {
            if (decode_batch(&in[i], min_offset, &c, &err) < 0) {
                break;
            }
        }
        Py_END_ALLOW_THREADS
    }
    if (err.kind == E_NOMEM) {
        PyErr_NoMemory();
    }
    else if (err.kind != OK) {
        PyErr_SetString(err.kind == E_CORRUPT ? st->corrupt : st->invalid, err.msg);
    }
    else {
        PyObject *headers;
        if (want_headers) {
            headers = Py_BuildValue("(NLNNN)", as_bytes(&c.list_offsets),
                                    (long long)c.n_headers, as_bytes(&c.hkey_offsets),
                                    as_bytes(&c.hkey_data), bincol_tuple(&c.hvalue));
        }
        else {
            headers = Py_NewRef(Py_None);
        }
        if (headers != NULL) {
            result = Py_BuildValue("(LNNNNNN)", (long long)c.key.n, as_bytes(&c.offsets),
                                   as_bytes(&c.timestamps), as_bytes(&c.ts_types),
                                   bincol_tuple(&c.key), bincol_tuple(&c.value), headers);
        }
    }
    columns_free(&c);
done:
    Py_DECREF(items);
    PyMem_Free(in);
    return result;
}

static PyMethodDef columnar_methods[] = {
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(batches, min_offset, want_headers): see the module source."},
    {NULL, NULL, 0, NULL},
};

static int
columnar_exec(PyObject *module)
{
    columnar_state *st = get_state(module);
    PyObject *errors = PyImport_ImportModule("tidegate.common.errors");
    if (errors == NULL) {
        return -1;
    }
    st->corrupt = PyObject_GetAttrString(errors, "CorruptRecordError");
    st->invalid = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    return st->corrupt == NULL || st->invalid == NULL ? -1 : 0;
}

static int
columnar_traverse(PyObject *module, visitproc visit, void *arg)
{
    columnar_state *st = get_state(module);
    Py_VISIT(st->corrupt);
    Py_VISIT(st->invalid);
    return 0;
}

static int
columnar_clear(PyObject *module)
{
    columnar_state *st = get_state(module);
    Py_CLEAR(st->corrupt);
    Py_CLEAR(st->invalid);
    return 0;
}

static PyModuleDef_Slot columnar_slots[] = {
    {Py_mod_exec, columnar_exec},
    {0, NULL},
};

static struct PyModuleDef columnar_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tidegate.records._columnar",
    .m_doc = "Record batches decoded into Arrow-layout column buffers (see _columnar.c).",
    .m_size = sizeof(columnar_state),
    .m_methods = columnar_methods,
    .m_slots = columnar_slots,
    .m_traverse = columnar_traverse,
    .m_clear = columnar_clear,
};

PyMODINIT_FUNC
PyInit__columnar(void)
{
    return PyModuleDef_Init(&columnar_module);
}

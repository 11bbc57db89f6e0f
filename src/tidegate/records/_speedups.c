/*
 * tidegate.records._speedups: C versions of the two per-record loops of the records
 * layer. Optional: record.py and builder.py fall back to their pure-Python code (the
 * reference implementation) when this module does not import, or when the environment
 * sets TIDEGATE_PURE_PYTHON.
 *
 * decode_records(data, count, base_offset, base_timestamp, log_append_time)
 *     Same checks, in the same order, with the same exception classes and messages as
 *     record._decode_record_tuples_py. The input is untrusted network data: every byte
 *     read is checked against the end of `data` first.
 *
 * encode_record(buf, offset_delta, timestamp_delta, key, value, headers=())
 *     Appends one record v2 to the bytearray `buf`, byte-identical to
 *     builder._encode_record_py. Every argument is checked (and the headers encoded)
 *     before `buf` is touched, so an error leaves it unchanged.
 *
 * validate_records(data, count, base_timestamp)
 *     The checks of decode_records (same order, classes and messages) on any contiguous
 *     buffer, read in place, building no record: what produce validation needs (the
 *     timestamp range, the first out-of-order offset delta, the number of null keys).
 *
 * RecordBuffer
 *     The base class of builder.BatchBuilder when this module is used: the records
 *     section plus `append` (range checks, encode_record, base / max timestamp
 *     bookkeeping), `estimated_size` and len(), as builder._PyRecordBuffer, so that
 *     appending a record costs one C call and no Python frame.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

/* Smallest record body after its length varint: attributes, timestampDelta,
   offsetDelta, keyLength, valueLength, headerCount (one byte each). */
#define MIN_RECORD_BODY 6
#define MIN_RECORD_SIZE 7

/* The fields decode_records_as stores in each instance of its class, by slot name. */
enum { F_TOPIC, F_PARTITION, F_TIMESTAMP_TYPE, F_OFFSET, F_TIMESTAMP, F_KEY, F_VALUE,
       F_HEADERS, N_FIELDS };
static const char *const field_names[N_FIELDS] = {
    "topic", "partition", "timestamp_type", "offset", "timestamp", "key", "value", "headers",
};

typedef struct {
    PyObject *corrupt; /* tidegate.common.errors.CorruptRecordError */
    PyObject *invalid; /* tidegate.common.errors.InvalidRecordError */
    /* The last class decode_records_as checked, and its slots' offsets: the check (eight
       attribute lookups) would otherwise cost more than a small batch's records. */
    PyObject *target_type;
    Py_ssize_t target_off[N_FIELDS];
    /* parse_header's class (batch.BatchHeader) and its slots' offsets, likewise. */
    PyObject *header_type;
    Py_ssize_t header_off[13]; /* N_HEADER_FIELDS */
    PyObject *crc32c; /* crc32c.crc32c, as batch.compute_crc uses (check_batch) */
} speedups_state;

static inline speedups_state *
get_state(PyObject *module)
{
    return (speedups_state *)PyModule_GetState(module);
}

/* ------------------------------------------------------------------------------------ */
/* Decoding                                                                              */
/* ------------------------------------------------------------------------------------ */

static inline int64_t
unzigzag(uint64_t z)
{
    return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

/* varlong_range_error: the 10th byte `b` (2..127) of a varlong puts bits above bit 63
   into the zigzag value `z` (its low 63 bits come from the first nine bytes). Raise
   the reference's error, which shows the (out of range) decoded value. */
static void
varlong_range_error(speedups_state *st, uint64_t z, unsigned int b)
{
    PyObject *hi = NULL, *shift = NULL, *hi_shifted = NULL, *lo = NULL, *half = NULL;
    PyObject *value = NULL;

    /* value = (Z >> 1) ^ -(Z & 1) with Z = z + (b << 63), so Z >> 1 = (z >> 1) + (b << 62) */
    hi = PyLong_FromUnsignedLong(b);
    shift = PyLong_FromLong(62);
    if (hi == NULL || shift == NULL) {
        goto done;
    }
    hi_shifted = PyNumber_Lshift(hi, shift);
    lo = PyLong_FromUnsignedLongLong(z >> 1);
    if (hi_shifted == NULL || lo == NULL) {
        goto done;
    }
    half = PyNumber_Add(hi_shifted, lo);
    if (half == NULL) {
        goto done;
    }
    if (z & 1) {
        value = PyNumber_Invert(half); /* ~x == x ^ -1 */
    }
    else {
        value = half;
        Py_INCREF(value);
    }
    if (value != NULL) {
        PyErr_Format(st->corrupt, "varlong value %S does not fit in an int64", value);
    }
done:
    Py_XDECREF(hi);
    Py_XDECREF(shift);
    Py_XDECREF(hi_shifted);
    Py_XDECREF(lo);
    Py_XDECREF(half);
    Py_XDECREF(value);
}

/* The general varint (max_bytes 5, int32) / varlong (max_bytes 10, int64) decoder, as
   varint._decode plus the range checks of decode_varint_from / decode_varlong_from.
   Reads only below `n`. On success stores the value, advances *pos and returns 0;
   otherwise raises CorruptRecordError and returns -1. */
static int
read_var_slow(speedups_state *st, const unsigned char *d, int64_t n, int64_t *pos,
              int max_bytes, int64_t *out)
{
    const char *what = max_bytes == 5 ? "varint" : "varlong";
    int64_t start = *pos;
    int64_t p = start;
    uint64_t z = 0;
    int i;

    for (i = 0;; i++) {
        unsigned int b;
        if (p >= n) {
            PyErr_Format(st->corrupt, "%s at byte %lld is truncated by the end of the data",
                         what, (long long)start);
            return -1;
        }
        b = d[p++];
        if (i == 9) {
            /* Only a varlong gets here: its 10th byte holds bits 63..69. */
            if (b >= 0x80) {
                break; /* "longer than" below */
            }
            if (b > 1) {
                varlong_range_error(st, z, b);
                return -1;
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
                PyErr_Format(st->corrupt, "varint value %lld does not fit in an int32",
                             (long long)v);
                return -1;
            }
            *out = v;
            *pos = p;
            return 0;
        }
        if (i == max_bytes - 1) {
            break;
        }
    }
    PyErr_Format(st->corrupt, "%s at byte %lld is longer than %d bytes", what,
                 (long long)start, max_bytes);
    return -1;
}

/* varint.decode_varint: one-byte fast path, else the general decoder. */
static inline int
read_varint(speedups_state *st, const unsigned char *d, int64_t n, int64_t *pos,
            int64_t *out)
{
    int64_t p = *pos;
    if (p < n && d[p] < 0x80) {
        *out = unzigzag(d[p]);
        *pos = p + 1;
        return 0;
    }
    return read_var_slow(st, d, n, pos, 5, out);
}

/* One field of a record, as the reference's inlined reads: a missing first byte, or a
   missing second byte after a continuation bit, is "record data truncated" (the
   reference's IndexError); longer encodings go through the general decoder. Returns 0
   on success; -1 with *truncated set (the caller raises, with *pos unchanged as the
   position), or -1 with an exception set. */
static inline int
read_field(speedups_state *st, const unsigned char *d, int64_t n, int64_t *pos,
           int max_bytes, int64_t *out, int *truncated)
{
    int64_t p = *pos;
    unsigned int b, b2;
    if (p >= n) {
        *truncated = 1;
        return -1;
    }
    b = d[p];
    if (b < 0x80) {
        *out = unzigzag(b);
        *pos = p + 1;
        return 0;
    }
    if (p + 1 >= n) {
        *truncated = 1;
        return -1;
    }
    b2 = d[p + 1];
    if (b2 < 0x80) {
        *out = unzigzag((uint64_t)((b & 0x7F) | (b2 << 7)));
        *pos = p + 2;
        return 0;
    }
    return read_var_slow(st, d, n, pos, max_bytes, out);
}

/* record._decode_headers: `*pos` is at the (non-zero) headerCount byte. Returns a new
   tuple of (str, bytes | None) pairs, or NULL with an exception set. */
static PyObject *
decode_headers(speedups_state *st, const unsigned char *d, int64_t n, int64_t *pos,
               int64_t rec_end)
{
    int64_t p = *pos;
    int64_t count, i;
    PyObject *headers;

    if (read_varint(st, d, n, &p, &count) < 0) {
        return NULL;
    }
    /* Each header takes at least 2 bytes (empty key, null value). */
    if (count < 0 || count * 2 > rec_end - p) {
        PyErr_Format(st->invalid, "invalid record header count %lld", (long long)count);
        return NULL;
    }
    headers = PyTuple_New((Py_ssize_t)count); /* count 0 gives the shared empty tuple */
    if (headers == NULL) {
        return NULL;
    }
    for (i = 0; i < count; i++) {
        int64_t key_len, value_len;
        PyObject *key, *value, *pair;

        if (read_varint(st, d, n, &p, &key_len) < 0) {
            goto error;
        }
        if (key_len < 0 || key_len > rec_end - p) {
            PyErr_Format(st->invalid, "invalid record header key length %lld",
                         (long long)key_len);
            goto error;
        }
        /* 0 <= key_len <= rec_end - p and rec_end <= n: in bounds. */
        key = PyUnicode_DecodeUTF8((const char *)d + p, (Py_ssize_t)key_len,
                                   "surrogateescape");
        if (key == NULL) {
            goto error;
        }
        p += key_len;
        if (read_varint(st, d, n, &p, &value_len) < 0) {
            Py_DECREF(key);
            goto error;
        }
        if (value_len >= 0) {
            if (value_len > rec_end - p) {
                PyErr_Format(st->invalid, "record header value length %lld overruns",
                             (long long)value_len);
                Py_DECREF(key);
                goto error;
            }
            value = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)value_len);
            if (value == NULL) {
                Py_DECREF(key);
                goto error;
            }
            p += value_len;
        }
        else if (value_len == -1) {
            value = Py_None;
            Py_INCREF(value);
        }
        else {
            PyErr_Format(st->invalid, "invalid record header value length %lld",
                         (long long)value_len);
            Py_DECREF(key);
            goto error;
        }
        pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, (Py_ssize_t)i, pair);
    }
    *pos = p;
    return headers;
error:
    Py_DECREF(headers);
    return NULL;
}

/* An int64 base (exact int that fits) and its object, for base + delta. */
typedef struct {
    PyObject *obj;
    long long value;
    int fast;
} base_value;

static int
init_base(base_value *b, PyObject *obj)
{
    b->obj = obj;
    b->value = 0;
    b->fast = 0;
    if (PyLong_CheckExact(obj)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (!overflow) {
            b->value = v;
            b->fast = 1;
        }
    }
    return 0;
}

/* base + delta with Python int semantics: int64 arithmetic when it cannot overflow,
   otherwise (or for a base that is not an exact int64) Python's own addition. */
static PyObject *
add_base(const base_value *b, int64_t delta)
{
    PyObject *d, *r;
    if (b->fast) {
        long long v = b->value;
        if (delta >= 0 ? v <= INT64_MAX - delta : v >= INT64_MIN - delta) {
            return PyLong_FromLongLong(v + delta);
        }
    }
    d = PyLong_FromLongLong(delta);
    if (d == NULL) {
        return NULL;
    }
    r = PyNumber_Add(b->obj, d);
    Py_DECREF(d);
    return r;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, count, base_offset, base_timestamp, log_append_time, /)\n"
"--\n"
"\n"
"Decode the uncompressed records section `data` (bytes) of a batch declaring `count`\n"
"records into (offset, timestamp, key, value, headers) tuples with absolute offsets\n"
"and timestamps; `log_append_time` (if not None) is every record's timestamp.\n"
"Raises CorruptRecordError / InvalidRecordError exactly as record.py's\n"
"decode_record_tuples does.");

PyDoc_STRVAR(decode_records_as_doc,
"decode_records_as(data, count, base_offset, base_timestamp, log_append_time, cls,\n"
"                  topic, partition, timestamp_type, /)\n"
"--\n"
"\n"
"As decode_records, each record as an instance of `cls` (a class whose __slots__\n"
"include topic, partition, timestamp_type, offset, timestamp, key, value and headers),\n"
"made without calling it: allocated, then those eight slots set (the first three to\n"
"the arguments of the same names, shared by every record). Its __init__ must do no\n"
"more than store its arguments. The instances are not tracked by the cycle\n"
"collector: cls's __setattr__ must call gc_track(self).");

PyDoc_STRVAR(gc_track_doc,
"gc_track(obj, /)\n"
"--\n"
"\n"
"Let the cycle collector track `obj` again (a record from decode_records_as that is\n"
"given a new attribute value, which may refer back to it). No-op if it is tracked or\n"
"not a container type.");

static PyObject *
gc_track(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj)) {
        PyObject_GC_Track(obj); /* fatal if already tracked: checked above */
    }
    Py_RETURN_NONE;
}

/* Where the records go: NULL for tuples, else the class, its slots' offsets and the
   three values every record shares. */
typedef struct {
    PyTypeObject *type;
    const Py_ssize_t *off;
    PyObject *topic, *partition, *timestamp_type;
} record_target;

static inline void
set_slot(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    *(PyObject **)((char *)obj + off) = value; /* steals; the slot was NULL (tp_alloc) */
}

static PyObject *
decode_core(speedups_state *st, PyObject *const *args, const char *fname,
            const record_target *tgt)
{
    PyObject *data_obj, *count_obj, *log_append_time, *records = NULL;
    PyObject *prev_ts = NULL; /* the last timestamp made, shared by records with its delta */
    int64_t prev_ts_delta = 0;
    base_value base_offset, base_ts;
    const unsigned char *d;
    int64_t n, pos = 0, count, i;
    int overflow = 0;
    long long count_ll;

    data_obj = args[0];
    count_obj = args[1];
    log_append_time = args[4];
    if (!PyBytes_Check(data_obj)) {
        PyErr_Format(PyExc_TypeError, "%s() argument 1 must be bytes, not %.100s", fname,
                     Py_TYPE(data_obj)->tp_name);
        return NULL;
    }
    if (!PyLong_Check(count_obj)) {
        PyErr_Format(PyExc_TypeError, "%s() argument 2 must be int, not %.100s", fname,
                     Py_TYPE(count_obj)->tp_name);
        return NULL;
    }
    if (init_base(&base_offset, args[2]) < 0 || init_base(&base_ts, args[3]) < 0) {
        return NULL;
    }
    d = (const unsigned char *)PyBytes_AS_STRING(data_obj);
    n = (int64_t)PyBytes_GET_SIZE(data_obj);

    count_ll = PyLong_AsLongLongAndOverflow(count_obj, &overflow);
    if (count_ll == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow > 0 || (!overflow && count_ll > n / MIN_RECORD_SIZE)) {
        PyErr_Format(st->invalid,
                     "batch declares %S records but has only %lld bytes of record data",
                     count_obj, (long long)n);
        return NULL;
    }
    count = overflow < 0 || count_ll < 0 ? 0 : (int64_t)count_ll; /* range(negative) */

    /* count <= n / 7: the list is bounded by the input size. It stays untracked by the
       garbage collector until every slot is filled. */
    records = PyList_New((Py_ssize_t)count);
    if (records == NULL) {
        return NULL;
    }
    PyObject_GC_UnTrack(records);
    for (i = 0; i < count; i++) {
        int64_t length, rec_start, rec_end, ts_delta, offset_delta, key_len, value_len;
        PyObject *key, *value, *headers, *offset, *timestamp, *rec;
        int truncated = 0;

        if (read_field(st, d, n, &pos, 5, &length, &truncated) < 0) {
            goto field_error;
        }
        rec_start = pos;
        rec_end = pos + length;
        if (length < MIN_RECORD_BODY) {
            PyErr_Format(st->invalid, "invalid record length %lld at byte %lld",
                         (long long)length, (long long)rec_start);
            goto error;
        }
        if (rec_end > n) {
            PyErr_Format(st->corrupt,
                         "record at byte %lld of length %lld runs past the end of the "
                         "record data (%lld bytes)",
                         (long long)rec_start, (long long)length, (long long)n);
            goto error;
        }
        pos += 1; /* attributes: unused by record v2 */

        if (read_field(st, d, n, &pos, 10, &ts_delta, &truncated) < 0) {
            goto field_error;
        }
        if (read_field(st, d, n, &pos, 5, &offset_delta, &truncated) < 0) {
            goto field_error;
        }

        if (read_field(st, d, n, &pos, 5, &key_len, &truncated) < 0) {
            goto field_error;
        }
        if (key_len >= 0) {
            if (key_len > rec_end - pos) {
                PyErr_Format(st->invalid, "key length %lld overruns its record",
                             (long long)key_len);
                goto error;
            }
            /* 0 <= key_len <= rec_end - pos and rec_end <= n: in bounds. */
            key = PyBytes_FromStringAndSize((const char *)d + pos, (Py_ssize_t)key_len);
            if (key == NULL) {
                goto error;
            }
            pos += key_len;
        }
        else if (key_len == -1) {
            key = Py_None;
            Py_INCREF(key);
        }
        else {
            PyErr_Format(st->invalid, "invalid key length %lld", (long long)key_len);
            goto error;
        }

        if (read_field(st, d, n, &pos, 5, &value_len, &truncated) < 0) {
            Py_DECREF(key);
            goto field_error;
        }
        if (value_len >= 0) {
            if (value_len > rec_end - pos) {
                PyErr_Format(st->invalid, "value length %lld overruns its record",
                             (long long)value_len);
                Py_DECREF(key);
                goto error;
            }
            value = PyBytes_FromStringAndSize((const char *)d + pos, (Py_ssize_t)value_len);
            if (value == NULL) {
                Py_DECREF(key);
                goto error;
            }
            pos += value_len;
        }
        else if (value_len == -1) {
            value = Py_None;
            Py_INCREF(value);
        }
        else {
            PyErr_Format(st->invalid, "invalid value length %lld", (long long)value_len);
            Py_DECREF(key);
            goto error;
        }

        if (pos >= n) {
            Py_DECREF(key);
            Py_DECREF(value);
            truncated = 1;
            goto field_error;
        }
        if (d[pos] == 0) { /* headerCount 0: the common case */
            headers = PyTuple_New(0); /* the shared empty tuple */
            pos += 1;
        }
        else {
            headers = decode_headers(st, d, n, &pos, rec_end);
        }
        if (headers == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }

        if (pos != rec_end) {
            PyErr_Format(st->invalid,
                         "invalid record size: expected %lld bytes in record payload, "
                         "read %lld",
                         (long long)length, (long long)(pos - rec_start));
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto error;
        }

        offset = add_base(&base_offset, offset_delta);
        if (log_append_time != Py_None) {
            timestamp = Py_NewRef(log_append_time);
        }
        else if (prev_ts != NULL && ts_delta == prev_ts_delta) {
            /* Producers stamp whole batches within the same millisecond: one int for
               all of them (ints are immutable, so sharing is invisible). */
            timestamp = Py_NewRef(prev_ts);
        }
        else {
            timestamp = add_base(&base_ts, ts_delta);
            if (timestamp != NULL) {
                Py_XSETREF(prev_ts, Py_NewRef(timestamp));
                prev_ts_delta = ts_delta;
            }
        }
        if (offset == NULL || timestamp == NULL) {
            rec = NULL;
        }
        else if (tgt == NULL) {
            rec = PyTuple_New(5);
        }
        else {
            rec = tgt->type->tp_alloc(tgt->type, 0);
        }
        if (rec == NULL) {
            Py_XDECREF(offset);
            Py_XDECREF(timestamp);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto error;
        }
        if (tgt == NULL) {
            PyTuple_SET_ITEM(rec, 0, offset);
            PyTuple_SET_ITEM(rec, 1, timestamp);
            PyTuple_SET_ITEM(rec, 2, key);
            PyTuple_SET_ITEM(rec, 3, value);
            PyTuple_SET_ITEM(rec, 4, headers);
        }
        else {
            const Py_ssize_t *off = tgt->off;
            set_slot(rec, off[F_TOPIC], Py_NewRef(tgt->topic));
            set_slot(rec, off[F_PARTITION], Py_NewRef(tgt->partition));
            set_slot(rec, off[F_TIMESTAMP_TYPE], Py_NewRef(tgt->timestamp_type));
            set_slot(rec, off[F_OFFSET], offset);
            set_slot(rec, off[F_TIMESTAMP], timestamp);
            set_slot(rec, off[F_KEY], key);
            set_slot(rec, off[F_VALUE], value);
            set_slot(rec, off[F_HEADERS], headers);
            /* Its slots hold only bytes, ints, str, None and tuples of those: it cannot
               be part of a cycle, so the cycle collector need not traverse it (that
               was half of the cost of a 100-byte record). The class re-tracks an
               instance when an attribute is assigned (gc_track in its __setattr__). */
            if (PyObject_GC_IsTracked(rec)) {
                PyObject_GC_UnTrack(rec);
            }
        }
        PyList_SET_ITEM(records, (Py_ssize_t)i, rec);
        continue;

    field_error:
        if (truncated) {
            PyErr_Format(st->corrupt, "record data truncated at byte %lld", (long long)pos);
        }
        goto error;
    }
    if (pos != n) {
        PyErr_Format(st->invalid, "%lld bytes of record data left after the declared %S records",
                     (long long)(n - pos), count_obj);
        goto error;
    }
    Py_XDECREF(prev_ts);
    PyObject_GC_Track(records);
    return records;
error:
    Py_XDECREF(prev_ts);
    Py_XDECREF(records); /* list_dealloc skips the NULL slots not yet filled */
    return NULL;
}

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "decode_records() takes exactly 5 arguments (%zd given)", nargs);
        return NULL;
    }
    return decode_core(get_state(module), args, "decode_records", NULL);
}

/* The offsets of `cls`'s slots `names` into `off`, for a C function that fills new
   instances of it (`func`, its class argument `argno`, for errors). Each must be a
   writable object slot (a __slots__ entry) inside the instance, defined on `cls` or a
   base: anything else is a TypeError, never a write out of bounds. */
static int
slot_offsets(PyObject *cls, const char *const *names, int n, Py_ssize_t *off,
             const char *func, int argno)
{
    PyTypeObject *tp;
    int i;

    if (!PyType_Check(cls)) {
        PyErr_Format(PyExc_TypeError, "%s() argument %d must be a class, not %.100s",
                     func, argno, Py_TYPE(cls)->tp_name);
        return -1;
    }
    tp = (PyTypeObject *)cls;
    if (tp->tp_alloc == NULL || tp->tp_itemsize != 0 ||
        (tp->tp_flags & Py_TPFLAGS_IS_ABSTRACT)) {
        PyErr_Format(PyExc_TypeError, "%s() cannot allocate %.100s", func, tp->tp_name);
        return -1;
    }
    for (i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString(cls, names[i]);
        PyMemberDef *m;
        int ok;
        if (descr == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
                return -1;
            }
            PyErr_Clear(); /* reported as any other missing slot */
            descr = Py_NewRef(Py_None);
        }
        ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
             PyType_IsSubtype(tp, ((PyDescrObject *)descr)->d_type);
        m = ok ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        ok = ok && m->type == T_OBJECT_EX && !(m->flags & READONLY) &&
             m->offset >= (Py_ssize_t)sizeof(PyObject) &&
             m->offset <= tp->tp_basicsize - (Py_ssize_t)sizeof(PyObject *);
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s(): %.100s.%s is not a slot",
                         func, tp->tp_name, names[i]);
            return -1;
        }
        off[i] = m->offset;
    }
    return 0;
}

/* The offsets of `cls`'s eight record slots into st->target_off (cached for the last
   class). */
static int
target_offsets(speedups_state *st, PyObject *cls)
{
    Py_ssize_t off[N_FIELDS];

    if (cls == st->target_type) {
        return 0;
    }
    if (slot_offsets(cls, field_names, N_FIELDS, off, "decode_records_as", 6) < 0) {
        return -1;
    }
    Py_XSETREF(st->target_type, Py_NewRef(cls));
    memcpy(st->target_off, off, sizeof(off));
    return 0;
}

static PyObject *
decode_records_as(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    speedups_state *st = get_state(module);
    record_target tgt;

    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError,
                     "decode_records_as() takes exactly 9 arguments (%zd given)", nargs);
        return NULL;
    }
    if (target_offsets(st, args[5]) < 0) {
        return NULL;
    }
    tgt.type = (PyTypeObject *)st->target_type;
    tgt.off = st->target_off;
    tgt.topic = args[6];
    tgt.partition = args[7];
    tgt.timestamp_type = args[8];
    return decode_core(st, args, "decode_records_as", &tgt);
}

/* ------------------------------------------------------------------------------------ */
/* Encoding                                                                              */
/* ------------------------------------------------------------------------------------ */

static inline uint64_t
zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0);
}

static inline int
uvarint_size(uint64_t z)
{
    int size = 1;
    while (z >= 0x80) {
        z >>= 7;
        size++;
    }
    return size;
}

static inline char *
put_uvarint(char *p, uint64_t z)
{
    while (z >= 0x80) {
        *p++ = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (char)z;
    return p;
}

/* A growable byte buffer for encoded headers, on the stack while small. */
typedef struct {
    char *p;
    size_t len;
    size_t cap;
    char small[256];
} wbuf;

static void
wbuf_init(wbuf *w)
{
    w->p = w->small;
    w->len = 0;
    w->cap = sizeof(w->small);
}

static void
wbuf_free(wbuf *w)
{
    if (w->p != w->small) {
        PyMem_Free(w->p);
    }
}

static char *
wbuf_reserve(wbuf *w, size_t extra)
{
    size_t need, cap;
    char *np;
    if (extra > (size_t)PY_SSIZE_T_MAX - w->len) {
        PyErr_NoMemory();
        return NULL;
    }
    need = w->len + extra;
    if (need <= w->cap) {
        return w->p + w->len;
    }
    cap = w->cap * 2;
    if (cap < need) {
        cap = need;
    }
    if (w->p == w->small) {
        np = PyMem_Malloc(cap);
        if (np != NULL) {
            memcpy(np, w->small, w->len);
        }
    }
    else {
        np = PyMem_Realloc(w->p, cap);
    }
    if (np == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    w->p = np;
    w->cap = cap;
    return w->p + w->len;
}

static int
wbuf_put_uvarint(wbuf *w, uint64_t z)
{
    char *p = wbuf_reserve(w, 10);
    if (p == NULL) {
        return -1;
    }
    w->len = (size_t)(put_uvarint(p, z) - w->p);
    return 0;
}

static int
wbuf_put(wbuf *w, const char *src, size_t len)
{
    char *p = wbuf_reserve(w, len);
    if (p == NULL) {
        return -1;
    }
    if (len) {
        memcpy(p, src, len);
    }
    w->len += len;
    return 0;
}

/* A bytes-like argument: bytes directly, anything else through the buffer protocol
   (as b"".join and bytearray += accept them). A failure becomes TypeError, as there. */
typedef struct {
    const char *data;
    Py_ssize_t len;
    Py_buffer view;
    int has_view;
} bytes_arg;

static int
get_bytes(PyObject *obj, bytes_arg *out, const char *what)
{
    out->has_view = 0;
    if (PyBytes_CheckExact(obj)) {
        out->data = PyBytes_AS_STRING(obj);
        out->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, &out->view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a bytes-like object or None, not '%.100s'",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    out->has_view = 1;
    out->data = (const char *)out->view.buf;
    out->len = out->view.len;
    return 0;
}

static void
release_bytes(bytes_arg *b)
{
    if (b->has_view) {
        PyBuffer_Release(&b->view);
        b->has_view = 0;
    }
}

/* The reference computes len(x) of a key / value before joining it: an object without
   a length raises TypeError there, before the headers are encoded. */
static int
check_len(PyObject *obj)
{
    if (obj == Py_None || PyBytes_CheckExact(obj)) {
        return 0;
    }
    return PyObject_Size(obj) < 0 ? -1 : 0;
}

/* `for name, value in headers`: unpack one item into two new references. */
static int
unpack_pair(PyObject *item, PyObject **a, PyObject **b)
{
    PyObject *it, *extra;
    if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2) {
        *a = PyTuple_GET_ITEM(item, 0);
        *b = PyTuple_GET_ITEM(item, 1);
        Py_INCREF(*a);
        Py_INCREF(*b);
        return 0;
    }
    it = PyObject_GetIter(item);
    if (it == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.100s object",
                         Py_TYPE(item)->tp_name);
        }
        return -1;
    }
    *a = PyIter_Next(it);
    if (*a == NULL) {
        Py_DECREF(it);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "not enough values to unpack (expected 2, got 0)");
        }
        return -1;
    }
    *b = PyIter_Next(it);
    if (*b == NULL) {
        Py_DECREF(it);
        Py_DECREF(*a);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "not enough values to unpack (expected 2, got 1)");
        }
        return -1;
    }
    extra = PyIter_Next(it);
    Py_DECREF(it);
    if (extra != NULL || PyErr_Occurred()) {
        Py_XDECREF(extra);
        Py_DECREF(*a);
        Py_DECREF(*b);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 2)");
        }
        return -1;
    }
    return 0;
}

/* name.encode("utf-8", "surrogateescape"), with UnicodeEncodeError turned into the
   reference's ValueError (chained from it). Returns a new reference. */
static PyObject *
encode_header_name(PyObject *name)
{
    PyObject *raw;
    if (PyUnicode_CheckExact(name)) {
        raw = PyUnicode_AsEncodedString(name, "utf-8", "surrogateescape");
    }
    else {
        raw = PyObject_CallMethod(name, "encode", "ss", "utf-8", "surrogateescape");
    }
    if (raw == NULL && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyObject *type, *cause, *tb, *msg, *exc;
        PyErr_Fetch(&type, &cause, &tb);
        PyErr_NormalizeException(&type, &cause, &tb);
        if (tb != NULL && cause != NULL) {
            PyException_SetTraceback(cause, tb);
        }
        Py_XDECREF(type);
        Py_XDECREF(tb);
        msg = PyUnicode_FromFormat("record header key %R cannot be encoded as UTF-8", name);
        exc = msg != NULL ? PyObject_CallOneArg(PyExc_ValueError, msg) : NULL;
        Py_XDECREF(msg);
        if (exc == NULL) {
            Py_XDECREF(cause);
            return NULL;
        }
        if (cause != NULL) {
            Py_INCREF(cause);
            PyException_SetContext(exc, cause); /* steals */
            PyException_SetCause(exc, cause);   /* steals */
        }
        PyErr_SetObject(PyExc_ValueError, exc);
        Py_DECREF(exc);
    }
    return raw;
}

/* builder._encode_headers into `w`. */
static int
encode_headers(PyObject *headers, wbuf *w)
{
    Py_ssize_t count = PyObject_Size(headers);
    PyObject *it, *item;
    if (count < 0) {
        return -1;
    }
    if (wbuf_put_uvarint(w, (uint64_t)count << 1) < 0) {
        return -1;
    }
    it = PyObject_GetIter(headers);
    if (it == NULL) {
        return -1;
    }
    while ((item = PyIter_Next(it)) != NULL) {
        PyObject *name, *value, *raw;
        bytes_arg rb, vb;
        int rc = -1;

        if (unpack_pair(item, &name, &value) < 0) {
            Py_DECREF(item);
            Py_DECREF(it);
            return -1;
        }
        Py_DECREF(item);
        raw = encode_header_name(name);
        if (raw == NULL) {
            goto next;
        }
        if (get_bytes(raw, &rb, "encoded header key") < 0) {
            goto next;
        }
        if (wbuf_put_uvarint(w, (uint64_t)rb.len << 1) < 0 ||
            wbuf_put(w, rb.data, (size_t)rb.len) < 0) {
            release_bytes(&rb);
            goto next;
        }
        release_bytes(&rb);
        if (value == Py_None) {
            if (wbuf_put(w, "\x01", 1) < 0) {
                goto next;
            }
        }
        else {
            if (check_len(value) < 0 || get_bytes(value, &vb, "header value") < 0) {
                goto next;
            }
            if (wbuf_put_uvarint(w, (uint64_t)vb.len << 1) < 0 ||
                wbuf_put(w, vb.data, (size_t)vb.len) < 0) {
                release_bytes(&vb);
                goto next;
            }
            release_bytes(&vb);
        }
        rc = 0;
    next:
        Py_XDECREF(raw);
        Py_DECREF(name);
        Py_DECREF(value);
        if (rc < 0) {
            Py_DECREF(it);
            return -1;
        }
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* The shared encoder: append one record to the bytearray `buf`, as
   builder._encode_record_py. The reference's order of checks: len(key), len(value),
   the headers, then the key and value bytes; all before `buf` changes. `headers` NULL
   means none. Returns 0, or -1 with an exception set and `buf` unchanged. */
static int
encode_into(PyObject *buf, int64_t offset_delta, int64_t ts_delta, PyObject *key,
            PyObject *value, PyObject *headers)
{
    bytes_arg kb = {0}, vb = {0};
    wbuf hw;
    int has_headers;
    uint64_t z_ts, z_off, z_klen, z_vlen, body_len, total;
    Py_ssize_t old_size;
    char *p;

    if (check_len(key) < 0 || check_len(value) < 0) {
        return -1;
    }
    wbuf_init(&hw);
    if (headers == NULL) {
        has_headers = 0;
    }
    else if (PyTuple_CheckExact(headers)) {
        has_headers = PyTuple_GET_SIZE(headers) != 0;
    }
    else if (PyList_CheckExact(headers)) {
        has_headers = PyList_GET_SIZE(headers) != 0;
    }
    else {
        has_headers = PyObject_IsTrue(headers);
        if (has_headers < 0) {
            return -1;
        }
    }
    if (has_headers && encode_headers(headers, &hw) < 0) {
        goto error;
    }
    if (key != Py_None && get_bytes(key, &kb, "key") < 0) {
        goto error;
    }
    if (value != Py_None && get_bytes(value, &vb, "value") < 0) {
        goto error;
    }

    z_ts = zigzag(ts_delta);
    z_off = zigzag(offset_delta);
    z_klen = key == Py_None ? 1 : (uint64_t)kb.len << 1;
    z_vlen = value == Py_None ? 1 : (uint64_t)vb.len << 1;
    body_len = 1 + (uint64_t)uvarint_size(z_ts) + (uint64_t)uvarint_size(z_off) +
               (uint64_t)uvarint_size(z_klen) + (uint64_t)(key == Py_None ? 0 : kb.len) +
               (uint64_t)uvarint_size(z_vlen) + (uint64_t)(value == Py_None ? 0 : vb.len) +
               (has_headers ? (uint64_t)hw.len : 1);
    total = (uint64_t)uvarint_size(body_len << 1) + body_len;

    /* Nothing from here on runs Python code: `buf`, the key and the value stay as they
       are until the copy is done. */
    old_size = PyByteArray_GET_SIZE(buf);
    if (total > (uint64_t)(PY_SSIZE_T_MAX - old_size)) {
        PyErr_NoMemory();
        goto error;
    }
    if (PyByteArray_Resize(buf, old_size + (Py_ssize_t)total) < 0) {
        goto error;
    }
    p = PyByteArray_AS_STRING(buf) + old_size;
    p = put_uvarint(p, body_len << 1);
    *p++ = 0; /* attributes */
    p = put_uvarint(p, z_ts);
    p = put_uvarint(p, z_off);
    p = put_uvarint(p, z_klen);
    if (key != Py_None && kb.len) {
        memcpy(p, kb.data, (size_t)kb.len);
        p += kb.len;
    }
    p = put_uvarint(p, z_vlen);
    if (value != Py_None && vb.len) {
        memcpy(p, vb.data, (size_t)vb.len);
        p += vb.len;
    }
    if (has_headers) {
        memcpy(p, hw.p, hw.len);
    }
    else {
        *p = 0;
    }
    release_bytes(&kb);
    release_bytes(&vb);
    wbuf_free(&hw);
    return 0;
error:
    release_bytes(&kb);
    release_bytes(&vb);
    wbuf_free(&hw);
    return -1;
}

PyDoc_STRVAR(encode_record_doc,
"encode_record(buf, offset_delta, timestamp_delta, key, value, headers=(), /)\n"
"--\n"
"\n"
"Append one record v2 to the bytearray `buf` (length, attributes 0, timestamp and\n"
"offset deltas, key, value, headers), byte-identical to builder.py's pure-Python\n"
"encoder. On error `buf` is left unchanged.");

static PyObject *
encode_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *buf;
    long long offset_delta, ts_delta;
    int overflow = 0;
    (void)module;

    if (nargs != 5 && nargs != 6) {
        PyErr_Format(PyExc_TypeError,
                     "encode_record() takes 5 or 6 arguments (%zd given)", nargs);
        return NULL;
    }
    buf = args[0];
    if (!PyByteArray_Check(buf)) {
        PyErr_Format(PyExc_TypeError, "encode_record() argument 1 must be bytearray, not %.100s",
                     Py_TYPE(buf)->tp_name);
        return NULL;
    }
    /* The reference encodes the timestamp delta first, then the offset delta. */
    ts_delta = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (ts_delta == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "varlong out of int64 range: %S", args[2]);
        return NULL;
    }
    offset_delta = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (offset_delta == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow || offset_delta < 0 || offset_delta > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "offset delta %S out of range [0, 2147483647]",
                     args[1]);
        return NULL;
    }
    if (encode_into(buf, offset_delta, ts_delta, args[3], args[4],
                    nargs == 6 ? args[5] : NULL) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------ */
/* RecordBuffer: BatchBuilder's records section and per-record bookkeeping               */
/* ------------------------------------------------------------------------------------ */

/* The C base class of builder.BatchBuilder, mirroring builder._PyRecordBuffer (the
   reference): `append` with its range checks, the base / max timestamp bookkeeping,
   `estimated_size` and len(). */
typedef struct {
    PyObject_HEAD
    PyObject *buf; /* bytearray: the records section */
    long long count;
    long long base_ts;
    long long max_ts;
} RecordBufferObject;

#define BATCH_HEADER_SIZE 61

static int
RecordBuffer_reset(RecordBufferObject *self)
{
    PyObject *buf = PyByteArray_FromStringAndSize(NULL, 0);
    if (buf == NULL) {
        return -1;
    }
    Py_XSETREF(self->buf, buf);
    self->count = 0;
    self->base_ts = 0;
    self->max_ts = 0;
    return 0;
}

static PyObject *
RecordBuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* Arguments are the subclass's (BatchBuilder's keyword options): ignored here. */
    RecordBufferObject *self = (RecordBufferObject *)type->tp_alloc(type, 0);
    (void)args;
    (void)kwargs;
    if (self == NULL) {
        return NULL;
    }
    if (RecordBuffer_reset(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
RecordBuffer_init(RecordBufferObject *self, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "RecordBuffer() takes no arguments");
        return -1;
    }
    return RecordBuffer_reset(self);
}

static int
RecordBuffer_traverse(RecordBufferObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->buf);
    return 0;
}

static int
RecordBuffer_clear(RecordBufferObject *self)
{
    Py_CLEAR(self->buf);
    return 0;
}

static void
RecordBuffer_dealloc(RecordBufferObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    RecordBuffer_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static Py_ssize_t
RecordBuffer_len(RecordBufferObject *self)
{
    return (Py_ssize_t)self->count;
}

/* The timestamp argument as an int64, with the reference's errors: ValueError outside
   the int64 range; for a non-integer, the reference compares it with the bounds first
   (ValueError if outside, or the comparison's own error) and fails later in the
   arithmetic with TypeError. */
static int
timestamp_arg(PyObject *obj, long long *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyObject *type, *value, *tb, *lo = NULL, *hi = NULL;
        int in_range = -1;
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
            return -1;
        }
        PyErr_Fetch(&type, &value, &tb);
        lo = PyLong_FromLongLong(INT64_MIN);
        hi = PyLong_FromLongLong(INT64_MAX);
        if (lo != NULL && hi != NULL) {
            in_range = PyObject_RichCompareBool(lo, obj, Py_LE);
            if (in_range == 1) {
                in_range = PyObject_RichCompareBool(obj, hi, Py_LE);
            }
        }
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        if (in_range == 1) {
            PyErr_Restore(type, value, tb); /* the TypeError */
            return -1;
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        if (in_range == 0) {
            PyErr_Format(PyExc_ValueError, "timestamp %S out of int64 range", obj);
        }
        return -1;
    }
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "timestamp %S out of int64 range", obj);
        return -1;
    }
    *out = v;
    return 0;
}

static const char *const append_kwlist[] = {"timestamp", "key", "value", "headers"};

PyDoc_STRVAR(RecordBuffer_append_doc,
"append(timestamp, key, value, headers=())\n"
"--\n"
"\n"
"Add one record; return its offset delta (0 for the first).");

static PyObject *
RecordBuffer_append(RecordBufferObject *self, PyObject *const *args, size_t nargsf,
                    PyObject *kwnames)
{
    PyObject *argv[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), i, j;
    long long timestamp, base_ts, ts_delta, delta;

    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError,
                     "append() takes from 3 to 4 positional arguments but %zd were given",
                     nargs);
        return NULL;
    }
    for (i = 0; i < nargs; i++) {
        argv[i] = args[i];
    }
    if (kwnames != NULL) {
        for (j = 0; j < PyTuple_GET_SIZE(kwnames); j++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, j);
            for (i = 0; i < 4; i++) {
                if (PyUnicode_CompareWithASCIIString(name, append_kwlist[i]) == 0) {
                    break;
                }
            }
            if (i == 4) {
                PyErr_Format(PyExc_TypeError,
                             "append() got an unexpected keyword argument '%S'", name);
                return NULL;
            }
            if (argv[i] != NULL) {
                PyErr_Format(PyExc_TypeError, "append() got multiple values for argument '%s'",
                             append_kwlist[i]);
                return NULL;
            }
            argv[i] = args[nargs + j];
        }
    }
    for (i = 0; i < 3; i++) {
        if (argv[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "append() missing required argument '%s'",
                         append_kwlist[i]);
            return NULL;
        }
    }
    if (self->buf == NULL || !PyByteArray_Check(self->buf)) {
        PyErr_SetString(PyExc_RuntimeError, "RecordBuffer is not initialized");
        return NULL;
    }

    delta = self->count;
    if (timestamp_arg(argv[0], &timestamp) < 0) {
        return NULL;
    }
    if (delta == 0) {
        base_ts = timestamp;
    }
    else {
        base_ts = self->base_ts;
        if (delta >= INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a batch holds at most 2**31 - 1 records");
            return NULL;
        }
    }
    if (base_ts >= 0 ? timestamp < INT64_MIN + base_ts : timestamp > INT64_MAX + base_ts) {
        /* The delta does not fit in an int64: the reference's encode_varlong error. */
        PyObject *a = PyLong_FromLongLong(timestamp), *b = PyLong_FromLongLong(base_ts);
        PyObject *diff = a != NULL && b != NULL ? PyNumber_Subtract(a, b) : NULL;
        if (diff != NULL) {
            PyErr_Format(PyExc_ValueError, "varlong out of int64 range: %S", diff);
        }
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(diff);
        return NULL;
    }
    ts_delta = timestamp - base_ts;
    if (encode_into(self->buf, delta, ts_delta, argv[1], argv[2], argv[3]) < 0) {
        return NULL;
    }
    if (delta == 0) {
        self->base_ts = self->max_ts = timestamp;
    }
    else if (timestamp > self->max_ts) {
        self->max_ts = timestamp;
    }
    self->count = delta + 1;
    return PyLong_FromLongLong(delta);
}

PyDoc_STRVAR(RecordBuffer_estimated_size_doc,
"estimated_size()\n"
"--\n"
"\n"
"Size of the batch if built now without compression (an upper bound, bar a\n"
"few bytes of codec framing on incompressible data).");

static PyObject *
RecordBuffer_estimated_size(RecordBufferObject *self, PyObject *unused)
{
    (void)unused;
    if (self->buf == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RecordBuffer is not initialized");
        return NULL;
    }
    return PyLong_FromSsize_t(BATCH_HEADER_SIZE + PyByteArray_GET_SIZE(self->buf));
}

static PyMethodDef RecordBuffer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))RecordBuffer_append,
     METH_FASTCALL | METH_KEYWORDS, RecordBuffer_append_doc},
    {"estimated_size", (PyCFunction)RecordBuffer_estimated_size, METH_NOARGS,
     RecordBuffer_estimated_size_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef RecordBuffer_members[] = {
    {"_buf", T_OBJECT, offsetof(RecordBufferObject, buf), READONLY,
     "the records section (a bytearray)"},
    {"_count", T_LONGLONG, offsetof(RecordBufferObject, count), READONLY,
     "number of records appended"},
    {"_base_ts", T_LONGLONG, offsetof(RecordBufferObject, base_ts), READONLY,
     "the first record's timestamp (0 while empty)"},
    {"_max_ts", T_LONGLONG, offsetof(RecordBufferObject, max_ts), READONLY,
     "the largest record timestamp (0 while empty)"},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(RecordBuffer_doc,
"RecordBuffer()\n"
"--\n"
"\n"
"A batch's records section and per-record bookkeeping: the C version of\n"
"builder._PyRecordBuffer, and the base class of BatchBuilder.");

static PyType_Slot RecordBuffer_slots[] = {
    {Py_tp_doc, (void *)RecordBuffer_doc},
    {Py_tp_new, RecordBuffer_new},
    {Py_tp_init, RecordBuffer_init},
    {Py_tp_dealloc, RecordBuffer_dealloc},
    {Py_tp_traverse, RecordBuffer_traverse},
    {Py_tp_clear, RecordBuffer_clear},
    {Py_tp_methods, RecordBuffer_methods},
    {Py_tp_members, RecordBuffer_members},
    {Py_sq_length, RecordBuffer_len},
    {0, NULL},
};

static PyType_Spec RecordBuffer_spec = {
    "tidegate.records._speedups.RecordBuffer",
    sizeof(RecordBufferObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    RecordBuffer_slots,
};

/* ------------------------------------------------------------------------------------ */
/* Validation without decoding                                                           */
/* ------------------------------------------------------------------------------------ */

/* Skip the headers of one record as decode_headers reads them, with the same checks and
   errors, building nothing. (Header keys are decoded with surrogateescape there, which
   accepts any bytes, so skipping them checks the same.) Returns 0 or -1 with an
   exception set. */
static int
skip_headers(speedups_state *st, const unsigned char *d, int64_t n, int64_t *pos,
             int64_t rec_end)
{
    int64_t p = *pos;
    int64_t count, i;

    if (read_varint(st, d, n, &p, &count) < 0) {
        return -1;
    }
    if (count < 0 || count * 2 > rec_end - p) {
        PyErr_Format(st->invalid, "invalid record header count %lld", (long long)count);
        return -1;
    }
    for (i = 0; i < count; i++) {
        int64_t key_len, value_len;

        if (read_varint(st, d, n, &p, &key_len) < 0) {
            return -1;
        }
        if (key_len < 0 || key_len > rec_end - p) {
            PyErr_Format(st->invalid, "invalid record header key length %lld",
                         (long long)key_len);
            return -1;
        }
        p += key_len;
        if (read_varint(st, d, n, &p, &value_len) < 0) {
            return -1;
        }
        if (value_len >= 0) {
            if (value_len > rec_end - p) {
                PyErr_Format(st->invalid, "record header value length %lld overruns",
                             (long long)value_len);
                return -1;
            }
            p += value_len;
        }
        else if (value_len != -1) {
            PyErr_Format(st->invalid, "invalid record header value length %lld",
                         (long long)value_len);
            return -1;
        }
    }
    *pos = p;
    return 0;
}

/* One key or value length field and its bytes: as decode_records, without the object. */
static inline int
skip_bytes_field(speedups_state *st, const unsigned char *d, int64_t n, int64_t *pos,
                 int64_t rec_end, const char *what, int *truncated, int *is_null)
{
    int64_t len;
    if (read_field(st, d, n, pos, 5, &len, truncated) < 0) {
        return -1;
    }
    if (len >= 0) {
        if (len > rec_end - *pos) {
            PyErr_Format(st->invalid, "%s length %lld overruns its record", what,
                         (long long)len);
            return -1;
        }
        *pos += len;
        *is_null = 0;
        return 0;
    }
    if (len == -1) {
        *is_null = 1;
        return 0;
    }
    PyErr_Format(st->invalid, "invalid %s length %lld", what, (long long)len);
    return -1;
}

PyDoc_STRVAR(validate_records_doc,
"validate_records(data, count, base_timestamp, /)\n"
"--\n"
"\n"
"Check the uncompressed records section `data` (any contiguous buffer, read in place)\n"
"of a batch declaring `count` records as decode_records parses it, raising the same\n"
"CorruptRecordError / InvalidRecordError, but build no record. Returns\n"
"(min_timestamp, max_timestamp, first_bad_offset, null_keys): the smallest and largest\n"
"base_timestamp + timestampDelta (-1, -1 without records; None, None if one does not\n"
"fit in an int64), the index of the first record whose offsetDelta is not its index\n"
"(-1 if none) and how many records have a null key.");

static PyObject *
validate_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    speedups_state *st = get_state(module);
    PyObject *count_obj, *result = NULL;
    Py_buffer view;
    const unsigned char *d;
    int64_t n, pos = 0, count, i, first_bad = -1, null_keys = 0;
    long long base_ts, count_ll;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
    int overflow = 0, ts_overflow = 0;

    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError,
                     "validate_records() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    count_obj = args[1];
    if (!PyLong_Check(count_obj)) {
        PyErr_Format(PyExc_TypeError, "validate_records() argument 2 must be int, not %.100s",
                     Py_TYPE(count_obj)->tp_name);
        return NULL;
    }
    base_ts = PyLong_AsLongLong(args[2]); /* a batch header's int64 field */
    if (base_ts == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    d = (const unsigned char *)view.buf;
    n = (int64_t)view.len;

    count_ll = PyLong_AsLongLongAndOverflow(count_obj, &overflow);
    if (count_ll == -1 && PyErr_Occurred()) {
        goto done;
    }
    if (overflow > 0 || (!overflow && count_ll > n / MIN_RECORD_SIZE)) {
        PyErr_Format(st->invalid,
                     "batch declares %S records but has only %lld bytes of record data",
                     count_obj, (long long)n);
        goto done;
    }
    count = overflow < 0 || count_ll < 0 ? 0 : (int64_t)count_ll;

    for (i = 0; i < count; i++) {
        int64_t length, rec_start, rec_end, ts_delta, offset_delta, ts;
        int truncated = 0, key_null = 0, value_null = 0;

        if (read_field(st, d, n, &pos, 5, &length, &truncated) < 0) {
            goto field_error;
        }
        rec_start = pos;
        rec_end = pos + length;
        if (length < MIN_RECORD_BODY) {
            PyErr_Format(st->invalid, "invalid record length %lld at byte %lld",
                         (long long)length, (long long)rec_start);
            goto done;
        }
        if (rec_end > n) {
            PyErr_Format(st->corrupt,
                         "record at byte %lld of length %lld runs past the end of the "
                         "record data (%lld bytes)",
                         (long long)rec_start, (long long)length, (long long)n);
            goto done;
        }
        pos += 1; /* attributes: unused by record v2 */
        if (read_field(st, d, n, &pos, 10, &ts_delta, &truncated) < 0) {
            goto field_error;
        }
        if (read_field(st, d, n, &pos, 5, &offset_delta, &truncated) < 0) {
            goto field_error;
        }
        if (skip_bytes_field(st, d, n, &pos, rec_end, "key", &truncated, &key_null) < 0 ||
            skip_bytes_field(st, d, n, &pos, rec_end, "value", &truncated, &value_null) < 0) {
            goto field_error;
        }
        if (pos >= n) {
            truncated = 1;
            goto field_error;
        }
        if (d[pos] == 0) { /* headerCount 0: the common case */
            pos += 1;
        }
        else if (skip_headers(st, d, n, &pos, rec_end) < 0) {
            goto done;
        }
        if (pos != rec_end) {
            PyErr_Format(st->invalid,
                         "invalid record size: expected %lld bytes in record payload, "
                         "read %lld",
                         (long long)length, (long long)(pos - rec_start));
            goto done;
        }
        if (first_bad < 0 && offset_delta != i) {
            first_bad = i;
        }
        null_keys += key_null;
        if (__builtin_add_overflow((int64_t)base_ts, ts_delta, &ts)) {
            ts_overflow = 1; /* Python's ints would not overflow: the caller decodes */
        }
        else {
            min_ts = ts < min_ts ? ts : min_ts;
            max_ts = ts > max_ts ? ts : max_ts;
        }
        continue;

    field_error:
        if (truncated) {
            PyErr_Format(st->corrupt, "record data truncated at byte %lld", (long long)pos);
        }
        goto done;
    }
    if (pos != n) {
        PyErr_Format(st->invalid, "%lld bytes of record data left after the declared %S records",
                     (long long)(n - pos), count_obj);
        goto done;
    }
    if (ts_overflow) {
        result = Py_BuildValue("(OOLL)", Py_None, Py_None, (long long)first_bad,
                               (long long)null_keys);
    }
    else if (count == 0) {
        result = Py_BuildValue("(iiLL)", -1, -1, (long long)first_bad, (long long)null_keys);
    }
    else {
        result = Py_BuildValue("(LLLL)", (long long)min_ts, (long long)max_ts,
                               (long long)first_bad, (long long)null_keys);
    }
done:
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------ */
/* Batch headers                                                                         */
/* ------------------------------------------------------------------------------------ */

/* The 61-byte RecordBatch v2 header's fields, in order (batch.py's _HEADER struct). */
#define BATCH_HEADER_SIZE 61
#define N_HEADER_FIELDS 13
static const char *const header_field_names[N_HEADER_FIELDS] = {
    "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
    "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
    "producer_epoch", "base_sequence", "records_count",
};

/* The offsets of `cls`'s thirteen header slots into st->header_off (cached for the last
   class), checked as target_offsets checks decode_records_as's class. */
static int
header_offsets(speedups_state *st, PyObject *cls)
{
    Py_ssize_t off[N_HEADER_FIELDS];

    if (cls == st->header_type) {
        return 0;
    }
    if (slot_offsets(cls, header_field_names, N_HEADER_FIELDS, off, "parse_header", 3) < 0) {
        return -1;
    }
    Py_XSETREF(st->header_type, Py_NewRef(cls));
    memcpy(st->header_off, off, sizeof(off));
    return 0;
}

static inline uint64_t
load_be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    int i;
    for (i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

static PyObject *make_header(speedups_state *st, const unsigned char *p);

PyDoc_STRVAR(parse_header_doc,
"parse_header(buf, pos, cls, /)\n"
"--\n"
"\n"
"The 61-byte batch header at `pos` (>= 0) of the contiguous buffer `buf` as an instance\n"
"of `cls` (batch.BatchHeader: a class whose __slots__ include its thirteen fields),\n"
"made without calling it: allocated, then the slots set. Raises CorruptRecordError as\n"
"batch.parse_header does when fewer than 61 bytes follow `pos`.");

static PyObject *
parse_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    speedups_state *st = get_state(module);
    PyObject *obj;
    Py_buffer view;
    Py_ssize_t pos;

    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError,
                     "parse_header() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    pos = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "parse_header() position must be >= 0");
        return NULL;
    }
    if (header_offsets(st, args[2]) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (view.len - pos < BATCH_HEADER_SIZE) {
        PyErr_Format(st->corrupt, "record batch header truncated: %zd bytes, need %d",
                     view.len - pos, BATCH_HEADER_SIZE);
        PyBuffer_Release(&view);
        return NULL;
    }
    obj = make_header(st, (const unsigned char *)view.buf + pos);
    PyBuffer_Release(&view);
    return obj;
}

/* The header at `p` (61 bytes) as an instance of st->header_type (set by
   header_offsets). */
static PyObject *
make_header(speedups_state *st, const unsigned char *p)
{
    PyObject *v[N_HEADER_FIELDS], *obj = NULL;
    PyTypeObject *tp;
    int i, failed = 0;

    v[0] = PyLong_FromLongLong((long long)(int64_t)load_be(p, 8));
    v[1] = PyLong_FromLong((long)(int32_t)(uint32_t)load_be(p + 8, 4));
    v[2] = PyLong_FromLong((long)(int32_t)(uint32_t)load_be(p + 12, 4));
    v[3] = PyLong_FromLong((long)(int8_t)p[16]);
    v[4] = PyLong_FromUnsignedLong((unsigned long)load_be(p + 17, 4));
    v[5] = PyLong_FromLong((long)(int16_t)(uint16_t)load_be(p + 21, 2));
    v[6] = PyLong_FromLong((long)(int32_t)(uint32_t)load_be(p + 23, 4));
    v[7] = PyLong_FromLongLong((long long)(int64_t)load_be(p + 27, 8));
    v[8] = PyLong_FromLongLong((long long)(int64_t)load_be(p + 35, 8));
    v[9] = PyLong_FromLongLong((long long)(int64_t)load_be(p + 43, 8));
    v[10] = PyLong_FromLong((long)(int16_t)(uint16_t)load_be(p + 51, 2));
    v[11] = PyLong_FromLong((long)(int32_t)(uint32_t)load_be(p + 53, 4));
    v[12] = PyLong_FromLong((long)(int32_t)(uint32_t)load_be(p + 57, 4));
    for (i = 0; i < N_HEADER_FIELDS; i++) {
        failed |= v[i] == NULL;
    }
    tp = (PyTypeObject *)st->header_type;
    if (!failed) {
        obj = tp->tp_alloc(tp, 0);
    }
    if (obj == NULL) {
        for (i = 0; i < N_HEADER_FIELDS; i++) {
            Py_XDECREF(v[i]);
        }
        return NULL;
    }
    for (i = 0; i < N_HEADER_FIELDS; i++) {
        set_slot(obj, st->header_off[i], v[i]);
    }
    return obj;
}

PyDoc_STRVAR(check_batch_doc,
"check_batch(buf, pos, cls, scan, /)\n"
"--\n"
"\n"
"batch.validate_batch(buf, pos) (strict counts, CRC checked) in one call: the same\n"
"checks in the same order, raising the same errors; returns (header, records) with\n"
"the header an instance of `cls` as parse_header makes it. When `scan` is true and the\n"
"batch is uncompressed with CreateTime, `records` is validate_records' tuple for its\n"
"records section, or None if that scan raised (the error is dropped: the caller's\n"
"reference path raises it again at its own step); otherwise None.");

static PyObject *
check_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    speedups_state *st = get_state(module);
    PyObject *header = NULL, *records = NULL, *result = NULL;
    Py_buffer view;
    Py_ssize_t pos, avail;
    const unsigned char *p;
    int64_t batch_length, size;
    int32_t last_offset_delta, records_count;
    int magic, attributes, scan;
    uint32_t stored_crc;

    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError,
                     "check_batch() takes exactly 4 arguments (%zd given)", nargs);
        return NULL;
    }
    pos = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "check_batch() position must be >= 0");
        return NULL;
    }
    scan = PyObject_IsTrue(args[3]);
    if (scan < 0 || header_offsets(st, args[2]) < 0) {
        return NULL;
    }
    if (st->crc32c == NULL) {
        PyObject *mod = PyImport_ImportModule("crc32c");
        if (mod == NULL) {
            return NULL;
        }
        st->crc32c = PyObject_GetAttrString(mod, "crc32c");
        Py_DECREF(mod);
        if (st->crc32c == NULL) {
            return NULL;
        }
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    avail = view.len - pos;
    if (avail < BATCH_HEADER_SIZE) {
        PyErr_Format(st->corrupt, "record batch header truncated: %zd bytes, need %d",
                     avail, BATCH_HEADER_SIZE);
        goto done;
    }
    p = (const unsigned char *)view.buf + pos;
    batch_length = (int32_t)(uint32_t)load_be(p + 8, 4);
    magic = (int8_t)p[16];
    stored_crc = (uint32_t)load_be(p + 17, 4);
    attributes = (int16_t)(uint16_t)load_be(p + 21, 2);
    last_offset_delta = (int32_t)(uint32_t)load_be(p + 23, 4);
    records_count = (int32_t)(uint32_t)load_be(p + 57, 4);
    size = batch_length + 12;
    if (batch_length < BATCH_HEADER_SIZE - 12) {
        PyErr_Format(st->corrupt, "record batch length %lld is too small",
                     (long long)batch_length);
        goto done;
    }
    if (size > avail) {
        PyErr_Format(st->corrupt,
                     "record batch length %lld exceeds the %lld bytes available",
                     (long long)batch_length, (long long)(avail - 12));
        goto done;
    }
    if (magic != 2) {
        PyErr_Format(st->corrupt, "unsupported record batch magic %d", magic);
        goto done;
    }
    {
        PyObject *mv, *crc;
        unsigned long actual;
        mv = PyMemoryView_FromMemory((char *)p + 21, (Py_ssize_t)(size - 21), PyBUF_READ);
        if (mv == NULL) {
            goto done;
        }
        crc = PyObject_CallOneArg(st->crc32c, mv);
        Py_DECREF(mv); /* a read-only view of `view`, released below: not kept by crc32c */
        if (crc == NULL) {
            goto done;
        }
        actual = PyLong_AsUnsignedLong(crc);
        Py_DECREF(crc);
        if (actual == (unsigned long)-1 && PyErr_Occurred()) {
            goto done;
        }
        if (actual != stored_crc) {
            char msg[96];
            /* Python's {:#010x}: 0x and 8 digits (C's # drops the 0x of a zero) */
            snprintf(msg, sizeof(msg),
                     "record batch CRC mismatch: stored 0x%08lx, computed 0x%08lx",
                     (unsigned long)stored_crc, actual);
            PyErr_SetString(st->corrupt, msg);
            goto done;
        }
    }
    if (records_count < 0 || last_offset_delta < 0) {
        PyErr_SetString(st->invalid, "negative record count or offset delta");
        goto done;
    }
    if (records_count == 0 && !(attributes & 0x20)) {
        PyErr_SetString(st->invalid, "record batch contains no records");
        goto done;
    }
    if (records_count && last_offset_delta != records_count - 1) {
        PyErr_Format(st->invalid, "lastOffsetDelta %d does not match record count %d",
                     (int)last_offset_delta, (int)records_count);
        goto done;
    }
    header = make_header(st, p);
    if (header == NULL) {
        goto done;
    }
    if (scan && (attributes & 0x07) == 0 && !(attributes & 0x08)) {
        PyObject *sargs[3];
        sargs[0] = PyMemoryView_FromMemory((char *)p + BATCH_HEADER_SIZE,
                                           (Py_ssize_t)(size - BATCH_HEADER_SIZE), PyBUF_READ);
        sargs[1] = PyLong_FromLong(records_count);
        sargs[2] = PyLong_FromLongLong((long long)(int64_t)load_be(p + 27, 8));
        if (sargs[0] != NULL && sargs[1] != NULL && sargs[2] != NULL) {
            records = validate_records(module, sargs, 3);
        }
        Py_XDECREF(sargs[0]);
        Py_XDECREF(sargs[1]);
        Py_XDECREF(sargs[2]);
        if (records == NULL) {
            PyErr_Clear(); /* re-raised by record_checks' reference path, in its order */
        }
    }
    result = PyTuple_Pack(2, header, records == NULL ? Py_None : records);
done:
    Py_XDECREF(header);
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    return result;
}

static inline void
store_be(unsigned char *p, uint64_t v, int n)
{
    int i;
    for (i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

PyDoc_STRVAR(stamp_header_doc,
"stamp_header(buf, pos, base_offset, leader_epoch, cls, /)\n"
"--\n"
"\n"
"batch.stamp_header_py in one call: a copy (bytearray) of the 61-byte batch header at\n"
"`pos` (>= 0) of `buf` with `base_offset` (an int64) and, unless `leader_epoch` is None,\n"
"the partition leader epoch (an int32) written in (neither is under the CRC), and that\n"
"copy parsed as an instance of `cls` as parse_header makes it: (head, header). Raises\n"
"CorruptRecordError as parse_header does when fewer than 61 bytes follow `pos`,\n"
"OverflowError for an offset or epoch out of range.");

static PyObject *
stamp_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    speedups_state *st = get_state(module);
    PyObject *head = NULL, *header = NULL, *result = NULL;
    Py_buffer view;
    Py_ssize_t pos;
    long long offset;
    long epoch = 0;
    int has_epoch, overflow = 0;
    unsigned char *h;

    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "stamp_header() takes exactly 5 arguments (%zd given)", nargs);
        return NULL;
    }
    pos = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "stamp_header() position must be >= 0");
        return NULL;
    }
    if (!PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "stamp_header() base_offset must be an int");
        return NULL;
    }
    offset = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "base_offset out of int64 range");
        return NULL;
    }
    has_epoch = args[3] != Py_None;
    if (has_epoch) {
        if (!PyLong_Check(args[3])) {
            PyErr_SetString(PyExc_TypeError, "stamp_header() leader_epoch must be an int");
            return NULL;
        }
        epoch = PyLong_AsLongAndOverflow(args[3], &overflow);
        if (epoch == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow || epoch < INT32_MIN || epoch > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "leader_epoch out of int32 range");
            return NULL;
        }
    }
    if (header_offsets(st, args[4]) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (view.len - pos < BATCH_HEADER_SIZE) {
        PyErr_Format(st->corrupt, "record batch header truncated: %zd bytes, need %d",
                     view.len - pos, BATCH_HEADER_SIZE);
        goto done;
    }
    head = PyByteArray_FromStringAndSize((const char *)view.buf + pos, BATCH_HEADER_SIZE);
    if (head == NULL) {
        goto done;
    }
    h = (unsigned char *)PyByteArray_AS_STRING(head);
    store_be(h, (uint64_t)(int64_t)offset, 8);
    if (has_epoch) {
        store_be(h + 12, (uint64_t)(uint32_t)(int32_t)epoch, 4);
    }
    header = make_header(st, h);
    if (header == NULL) {
        goto done;
    }
    result = PyTuple_Pack(2, head, header);
done:
    Py_XDECREF(head);
    Py_XDECREF(header);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------ */
/* Module                                                                                */
/* ------------------------------------------------------------------------------------ */

static PyMethodDef speedups_methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     decode_records_doc},
    {"decode_records_as", (PyCFunction)(void (*)(void))decode_records_as, METH_FASTCALL,
     decode_records_as_doc},
    {"gc_track", (PyCFunction)gc_track, METH_O, gc_track_doc},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL,
     encode_record_doc},
    {"validate_records", (PyCFunction)(void (*)(void))validate_records, METH_FASTCALL,
     validate_records_doc},
    {"parse_header", (PyCFunction)(void (*)(void))parse_header, METH_FASTCALL,
     parse_header_doc},
    {"check_batch", (PyCFunction)(void (*)(void))check_batch, METH_FASTCALL,
     check_batch_doc},
    {"stamp_header", (PyCFunction)(void (*)(void))stamp_header, METH_FASTCALL,
     stamp_header_doc},
    {NULL, NULL, 0, NULL},
};

static int
speedups_exec(PyObject *module)
{
    speedups_state *st = get_state(module);
    PyObject *type;
    PyObject *errors = PyImport_ImportModule("tidegate.common.errors");
    if (errors == NULL) {
        return -1;
    }
    st->corrupt = PyObject_GetAttrString(errors, "CorruptRecordError");
    st->invalid = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (st->corrupt == NULL || st->invalid == NULL) {
        return -1;
    }
    type = PyType_FromModuleAndSpec(module, &RecordBuffer_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "RecordBuffer", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    Py_DECREF(type);
    return 0;
}

static int
speedups_traverse(PyObject *module, visitproc visit, void *arg)
{
    speedups_state *st = get_state(module);
    Py_VISIT(st->corrupt);
    Py_VISIT(st->invalid);
    Py_VISIT(st->target_type);
    Py_VISIT(st->header_type);
    Py_VISIT(st->crc32c);
    return 0;
}

static int
speedups_clear(PyObject *module)
{
    speedups_state *st = get_state(module);
    Py_CLEAR(st->corrupt);
    Py_CLEAR(st->invalid);
    Py_CLEAR(st->target_type);
    Py_CLEAR(st->header_type);
    Py_CLEAR(st->crc32c);
    return 0;
}

static void
speedups_free(void *module)
{
    speedups_clear((PyObject *)module);
}

static PyModuleDef_Slot speedups_slots[] = {
    {Py_mod_exec, speedups_exec},
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"C versions of the records layer's per-record loops (optional; see record.py and\n"
"builder.py, whose pure-Python code is the reference).");

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "tidegate.records._speedups",
    module_doc,
    sizeof(speedups_state),
    speedups_methods,
    speedups_slots,
    speedups_traverse,
    speedups_clear,
    speedups_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}

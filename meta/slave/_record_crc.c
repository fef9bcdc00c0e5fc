/* The slave's walk and CRC check of a fetched batch, the check in one call without the GIL.
 *
 * meta.slave.record_check calls frame(data) and first_bad_before(data, end) for each batch
 * the fetch thread gets (its get for the next batch is sent between the two), and
 * first_bad(data, ends) where a list of the ends is wanted anyway.
 *
 * frame(data) walks the length fields from the first record, as record_check.walk_ends
 * does: it returns (count, end, last_start, negative): how many complete records there are,
 * where the last of them ends and where it starts (0, 0, 0 for none), and the position of
 * the first complete header whose length field is negative (-1 if none; the walk stops
 * there, as it does at a trailing partial record). The GIL is held: it reads 4 bytes per
 * record and builds no object per record.
 *
 * first_bad_before(data, end) walks the records again up to ``end`` (the end frame found)
 * and checks each one's CRC, with the GIL released for a batch of at least RELEASE_BYTES;
 * it returns the position of the first record whose payload does not match its checksum
 * field, or -1. ``end`` must be a record boundary that walk reaches (ValueError otherwise).
 *
 * first_bad(data, ends): the records of ``data`` end at the
 * positions ``ends`` (from record_check.record_ends: ascending, each record at least a
 * 20-byte header long, the last within ``data``). Each record is a 20-byte header (length,
 * checksum, id, flag; big-endian) and its payload; its checksum field holds the payload's
 * CRC-32 with the top bit cleared. first_bad returns the index of the first record whose
 * payload does not match its checksum field, or -1 when all match.
 *
 * The ends are read into a C array while the GIL is held; the CRCs are then computed with
 * ISA-L's crc32_gzip_refl (Intel's ISA-L, Debian's libisal-dev: the same CRC-32 as zlib.crc32
 * and Java's CRC32, with the CPU's carry-less multiply) with the GIL released, over the Py_buffer held for the whole call, so the slave's other threads
 * (socket reader, reactor, get writer) run meanwhile. A batch smaller than RELEASE_BYTES is
 * checked with the GIL held, as zlib.crc32 does for small buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <isa-l/crc.h>

#define HEADER_SIZE 20
#define CHECKSUM_OFFSET 4
#define CHECKSUM_MASK 0x7fffffffUL
#define RELEASE_BYTES (64 * 1024)

static uint32_t
stored_checksum(const unsigned char *header)
{
    const unsigned char *field = header + CHECKSUM_OFFSET;
    return ((uint32_t)field[0] << 24) | ((uint32_t)field[1] << 16) |
           ((uint32_t)field[2] << 8) | (uint32_t)field[3];
}

static uint32_t
stored_length(const unsigned char *header)
{
    return ((uint32_t)header[0] << 24) | ((uint32_t)header[1] << 16) |
           ((uint32_t)header[2] << 8) | (uint32_t)header[3];
}

static int
record_matches(const unsigned char *data, Py_ssize_t start, Py_ssize_t end)
{
    const unsigned char *payload = data + start + HEADER_SIZE;
    uint64_t length = (uint64_t)(end - start - HEADER_SIZE);
    return (crc32_gzip_refl(0, payload, length) & CHECKSUM_MASK) == stored_checksum(data + start);
}

/* The walk of frame() (see the top of the file). */
static void
walk(const unsigned char *data, Py_ssize_t total, Py_ssize_t *count, Py_ssize_t *end,
     Py_ssize_t *last_start, Py_ssize_t *negative)
{
    Py_ssize_t position = 0;
    *count = 0;
    *end = 0;
    *last_start = 0;
    *negative = -1;
    while (position <= total - HEADER_SIZE) {
        int32_t length = (int32_t)stored_length(data + position);
        if (length < 0) {
            *negative = position;
            return;
        }
        Py_ssize_t next = position + HEADER_SIZE + (Py_ssize_t)length;
        if (next > total) {
            return;
        }
        *count += 1;
        *last_start = position;
        *end = next;
        position = next;
    }
}

/* The first bad record's position before ``end``, -1 if none, -2 if ``end`` is not a record
 * boundary of the walk. */
static Py_ssize_t
first_mismatch_before(const unsigned char *data, Py_ssize_t end)
{
    Py_ssize_t position = 0;
    while (position < end) {
        if (position > end - HEADER_SIZE) {
            return -2;
        }
        int32_t length = (int32_t)stored_length(data + position);
        Py_ssize_t next = position + HEADER_SIZE + (Py_ssize_t)length;
        if (length < 0 || next > end) {
            return -2;
        }
        if (!record_matches(data, position, next)) {
            return position;
        }
        position = next;
    }
    return -1;
}

static Py_ssize_t
first_mismatch(const unsigned char *data, const Py_ssize_t *ends, Py_ssize_t count)
{
    Py_ssize_t start = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (!record_matches(data, start, ends[index])) {
            return index;
        }
        start = ends[index];
    }
    return -1;
}

/* The ends as a C array (PyMem_Malloc'ed), or NULL with an exception set. */
static Py_ssize_t *
read_ends(PyObject *sequence, Py_ssize_t size, Py_ssize_t *count)
{
    PyObject *fast = PySequence_Fast(sequence, "ends must be a sequence of ints");
    if (fast == NULL) {
        return NULL;
    }
    *count = PySequence_Fast_GET_SIZE(fast);
    Py_ssize_t *ends = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(*count > 0 ? *count : 1));
    if (ends == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t start = 0;
    for (Py_ssize_t index = 0; index < *count; index++) {
        Py_ssize_t end = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, index));
        if (end == -1 && PyErr_Occurred()) {
            goto fail;
        }
        if (end - start < HEADER_SIZE || end > size) {
            PyErr_Format(PyExc_ValueError,
                         "record %zd ends at %zd: not a record after %zd within %zd bytes",
                         index, end, start, size);
            goto fail;
        }
        ends[index] = end;
        start = end;
    }
    Py_DECREF(fast);
    return ends;
fail:
    Py_DECREF(fast);
    PyMem_Free(ends);
    return NULL;
}

static PyObject *
first_bad(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "first_bad(data, ends) takes 2 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    Py_ssize_t count = 0;
    Py_ssize_t *ends = read_ends(args[1], view.len, &count);
    if (ends == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t bad;
    if (count > 0 && ends[count - 1] >= RELEASE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        bad = first_mismatch(view.buf, ends, count);
        Py_END_ALLOW_THREADS
    }
    else {
        bad = first_mismatch(view.buf, ends, count);
    }
    PyMem_Free(ends);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(bad);
}

static PyObject *
frame(PyObject *module, PyObject *data)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    Py_ssize_t count, end, last_start, negative;
    walk(view.buf, view.len, &count, &end, &last_start, &negative);
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnnn)", count, end, last_start, negative);
}

static PyObject *
first_bad_before(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "first_bad_before(data, end) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t end = PyLong_AsSsize_t(args[1]);
    if (end == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    if (end < 0 || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "end %zd: not a record boundary within %zd bytes", end,
                     view.len);
        return NULL;
    }
    Py_ssize_t bad;
    if (end >= RELEASE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        bad = first_mismatch_before(view.buf, end);
        Py_END_ALLOW_THREADS
    }
    else {
        bad = first_mismatch_before(view.buf, end);
    }
    PyBuffer_Release(&view);
    if (bad == -2) {
        PyErr_Format(PyExc_ValueError, "end %zd: not a record boundary of the batch", end);
        return NULL;
    }
    return PyLong_FromSsize_t(bad);
}

static PyMethodDef methods[] = {
    {"frame", (PyCFunction)frame, METH_O,
     "frame(data) -> (count, end, last_start, negative)\n\n"
     "Walk the records' length fields: how many complete records, where the last ends and\n"
     "starts, and the position of the first complete header with a negative length (-1)."},
    {"first_bad_before", (PyCFunction)(void (*)(void))first_bad_before, METH_FASTCALL,
     "first_bad_before(data, end) -> int\n\n"
     "The position of the first record before ``end`` (a record boundary) whose payload's\n"
     "CRC-32, top bit cleared, differs from its checksum field; -1 if none. The GIL is\n"
     "released while a batch of at least 64 KiB is checked."},
    {"first_bad", (PyCFunction)(void (*)(void))first_bad, METH_FASTCALL,
     "first_bad(data, ends) -> int\n\n"
     "The index of the first record (ending at ``ends``) whose payload's CRC-32, top bit\n"
     "cleared, differs from its checksum field; -1 if none. The GIL is released while\n"
     "a batch of at least 64 KiB is checked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    "meta.slave._record_crc",
    "The slave's walk and CRC check of a batch of records, the check without the GIL (ISA-L).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__record_crc(void)
{
    PyObject *module = PyModule_Create(&module_definition);
    if (module != NULL && PyModule_AddIntConstant(module, "RELEASE_BYTES", RELEASE_BYTES)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

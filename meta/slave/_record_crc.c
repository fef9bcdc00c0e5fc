/* The slave's CRC check of a fetched batch in one call that releases the GIL.
 *
 * meta.slave.record_check calls first_bad(data, ends): the records of ``data`` end at the
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

static Py_ssize_t
first_mismatch(const unsigned char *data, const Py_ssize_t *ends, Py_ssize_t count)
{
    Py_ssize_t start = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        const unsigned char *payload = data + start + HEADER_SIZE;
        uint64_t length = (uint64_t)(ends[index] - start - HEADER_SIZE);
        uint32_t crc = crc32_gzip_refl(0, payload, length) & CHECKSUM_MASK;
        if (crc != stored_checksum(data + start)) {
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

static PyMethodDef methods[] = {
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
    "The slave's CRC check of a batch of records, with the GIL released (ISA-L).",
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

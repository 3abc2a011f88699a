/* The optional compiled step of records.check_records: Kafka's walk over a produced batch's
 * records reduced to framing, for the records clients write (one- or two-byte canonical
 * length prefixes, records under 8 KiB).
 *
 * Why: in Python the walk costs ~100 ns a record, most of the broker's CPU for 100 B
 * records (~1 s/GB); here it is a few ns. records.py keeps the same walk in Python (its
 * fallback, used when this module is not built or KAFKATW_PURE_PYTHON is set) and the exact
 * record-by-record loop that accepts unusual prefixes and names what is wrong: this function
 * only answers where the walk ends, and the caller compares that with the batch's end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* records.MIN_RECORD_BODY: the smallest record body (attributes, timestamp and offset deltas,
 * key and value lengths, header count). Checked against records.py when the module loads. */
#define MIN_RECORD_BODY 6

PyDoc_STRVAR(step_records_doc,
"step_records(body, p, end, count) -> int\n\n"
"The position after ``count`` records of ``body`` from ``p``, each a one- or two-byte\n"
"canonical zigzag length prefix and a body of at least MIN_RECORD_BODY bytes, all below\n"
"``end``; -1 at the first record that is not (an unusual prefix, a negative or short\n"
"length, a record past ``end``): the caller's exact walk then decides.");

static PyObject *
step_records(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t p, end, count;

    if (!PyArg_ParseTuple(args, "y*nnn:step_records", &view, &p, &end, &count))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    if (end > view.len)
        end = view.len;
    if (p < 0 || count < 0) {
        p = -1;
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (p >= end) {
            p = -1;
            break;
        }
        unsigned int b = buf[p];
        Py_ssize_t length;
        if (b < 0x80) {
            if (b & 1) {  /* zigzag: an odd low byte is a negative length */
                p = -1;
                break;
            }
            length = b >> 1;
            if (length < MIN_RECORD_BODY) {
                p = -1;
                break;
            }
            p += 1;
        } else {
            if (p + 1 >= end) {
                p = -1;
                break;
            }
            unsigned int b2 = buf[p + 1];
            if ((b & 1) || b2 == 0 || b2 >= 0x80) {  /* negative, non-canonical or longer */
                p = -1;
                break;
            }
            length = (Py_ssize_t)((((b & 0x7F) | (b2 << 7))) >> 1);
            p += 2;
        }
        if (length > end - p) {
            p = -1;
            break;
        }
        p += length;
    }
done:
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(p);
}

static PyMethodDef recwalk_methods[] = {
    {"step_records", step_records, METH_VARARGS, step_records_doc},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef recwalk_module = {
    PyModuleDef_HEAD_INIT,
    "kafkatw.protocol._recwalk",
    "The compiled framing walk of records.check_records (optional; records.py falls back).",
    -1,
    recwalk_methods,
};

PyMODINIT_FUNC
PyInit__recwalk(void)
{
    PyObject *m = PyModule_Create(&recwalk_module);
    if (m != NULL && PyModule_AddIntConstant(m, "MIN_RECORD_BODY", MIN_RECORD_BODY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

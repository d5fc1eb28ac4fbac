/* ---- small /proc files read with the GIL held ------------------------------------------------
 *
 * ``read_file(path) -> bytes | None``: the whole file, or None when it cannot be opened or read
 * (any errno: what ``open(path, "rb").read()`` raising OSError means to util/procfs.py).
 *
 * Why the GIL stays held: a sampler thread reading /proc with Python's file objects releases the
 * GIL around each of its ~9 system calls per file (open, fstat, ioctl, lseek, read, close), and
 * takes it back each time: while the training thread runs, each take waits up to the switch
 * interval and then forces that thread to hand the GIL over.  One pass of the host sampler (four
 * files) cost the training thread ~36 such switches (docs/decisions/0217-*.md).  These files are
 * made by the kernel on read, do not block, and are small, so holding the GIL for them is cheaper
 * than handing it over.  The size read is bounded (READ_FILE_MAX) and grows with what was read,
 * never with a size the file states. */
#include <fcntl.h>

#define READ_FILE_CHUNK 16384
#define READ_FILE_MAX (64L << 20)

static PyObject *
fp_read_file(PyObject *mod, PyObject *arg)
{
    PyObject *encoded = NULL;
    if (!PyUnicode_FSConverter(arg, &encoded))
        return NULL;
    int fd;
    do
        fd = open(PyBytes_AS_STRING(encoded), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    Py_DECREF(encoded);
    if (fd < 0)
        Py_RETURN_NONE;
    Py_ssize_t cap = READ_FILE_CHUNK, len = 0;
    PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
    while (out != NULL) {
        if (len == cap) {
            if (cap >= READ_FILE_MAX) {  /* not a small file: as a failed read */
                Py_CLEAR(out);
                close(fd);
                Py_RETURN_NONE;
            }
            cap *= 2;
            if (_PyBytes_Resize(&out, cap) < 0)
                break;  /* (out is NULL) */
        }
        ssize_t n = read(fd, PyBytes_AS_STRING(out) + len, (size_t)(cap - len));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            Py_CLEAR(out);
            close(fd);
            Py_RETURN_NONE;
        }
        if (n == 0)
            break;
        len += n;
    }
    close(fd);
    if (out != NULL && _PyBytes_Resize(&out, len) < 0)
        return NULL;
    return out;
}

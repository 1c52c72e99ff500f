/* new_tuple(cls, *items): tuple.__new__(cls, items) for a subclass of tuple (a NamedTuple), fast.
 *
 * The core makes a NamedTuple for every assignment and completion, and the workload one for
 * every job. ``tuple.__new__(cls, items)`` goes through type-call and tp_new_wrapper, which
 * check and copy the arguments, build a second tuple, then copy it into the new object (about
 * 550 instructions a call, and the caller builds a tuple of the items first). This makes the
 * same object the way CPython's tuple_subtype_new does, from the call's arguments directly.
 * Built by setup.py with the mypyc modules, and used only when they are (mgst.core.tuples
 * chooses it or its Python twin).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The classes tuple.__new__ has accepted (strong references, kept for good): tuple.__new__ refuses
 * a subtype whose most derived C base makes its objects with a __new__ other than tuple's (it would
 * not be one of its kind: time.struct_time), so new_tuple asks it once per class, and remembers. */
#define KNOWN_SAFE 8
static PyTypeObject *safe_types[KNOWN_SAFE];
static int safe_next = 0;

static int
known_safe(PyTypeObject *type)
{
    for (int i = 0; i < KNOWN_SAFE; i++)
        if (safe_types[i] == type)
            return 1;
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return 0;
    PyObject *probe = PyObject_CallMethod((PyObject *)&PyTuple_Type, "__new__", "OO", (PyObject *)type, empty);
    Py_DECREF(empty);
    if (probe == NULL)
        return 0; /* tuple.__new__'s own error: "... is not safe, use ...__new__()" */
    Py_DECREF(probe);
    Py_INCREF(type);
    Py_XDECREF(safe_types[safe_next]);
    safe_types[safe_next] = type;
    safe_next = (safe_next + 1) % KNOWN_SAFE;
    return 1;
}

static PyObject *
new_tuple(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "new_tuple(cls, *items) takes at least 1 argument");
        return NULL;
    }
    PyObject *cls = args[0];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "new_tuple(cls, *items): cls must be a subtype of tuple, not %R", cls);
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type != &PyTuple_Type && !known_safe(type))
        return NULL;
    Py_ssize_t n = nargs - 1;
    PyObject *obj = type == &PyTuple_Type ? PyTuple_New(n) : type->tp_alloc(type, n);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = args[i + 1];
        Py_INCREF(item);
        PyTuple_SET_ITEM(obj, i, item);
    }
    if (type != &PyTuple_Type && !PyObject_GC_IsTracked(obj)) /* as tuple_subtype_new does */
        PyObject_GC_Track(obj);
    return obj;
}

static PyMethodDef tuples_methods[] = {
    {"new_tuple", (PyCFunction)(void (*)(void))new_tuple, METH_FASTCALL,
     "new_tuple(cls, *items) -> the same as tuple.__new__(cls, items), for a subtype of tuple."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef tuples_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mgst.core._tuples",
    .m_doc = "new_tuple(cls, *items) in C (mgst.fast_tuple chooses it or its Python twin).",
    .m_size = -1,
    .m_methods = tuples_methods,
};

PyMODINIT_FUNC
PyInit__tuples(void)
{
    return PyModule_Create(&tuples_module);
}

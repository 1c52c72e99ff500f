/* tuple.__new__(cls, items) for a subclass of tuple (a NamedTuple), without the wrapper's cost.
 *
 * The core makes a NamedTuple for every assignment and completion, and the workload one for
 * every job. ``tuple.__new__(cls, items)`` goes through type-call and tp_new_wrapper, which
 * check and copy the arguments, build a second tuple, then copy it into the new object (about
 * 550 instructions a call). This makes the same object the way CPython's tuple_subtype_new
 * does, from the items tuple directly. Built by setup.py with the mypyc modules, and used only
 * when they are (mgst.fast_tuple chooses it or tuple.__new__).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *
new_tuple(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "new_tuple(cls, items) takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *cls = args[0];
    PyObject *items = args[1];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "new_tuple(cls, items): cls must be a subtype of tuple, not %R", cls);
        return NULL;
    }
    if (!PyTuple_CheckExact(items)) {
        PyErr_Format(PyExc_TypeError, "new_tuple(cls, items): items must be a tuple, not %.200s",
                     Py_TYPE(items)->tp_name);
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type == &PyTuple_Type) {
        Py_INCREF(items);
        return items;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    PyObject *obj = type->tp_alloc(type, n);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(obj, i, item);
    }
    if (!PyObject_GC_IsTracked(obj)) /* as tuple_subtype_new: a custom tp_alloc may not track */
        PyObject_GC_Track(obj);
    return obj;
}

static PyMethodDef tuples_methods[] = {
    {"new_tuple", (PyCFunction)(void (*)(void))new_tuple, METH_FASTCALL,
     "new_tuple(cls, items) -> the same as tuple.__new__(cls, items), for a subtype of tuple."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef tuples_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mgst._tuples",
    .m_doc = "tuple.__new__(cls, items) in C (mgst.fast_tuple chooses it or tuple.__new__).",
    .m_size = -1,
    .m_methods = tuples_methods,
};

PyMODINIT_FUNC
PyInit__tuples(void)
{
    return PyModule_Create(&tuples_module);
}

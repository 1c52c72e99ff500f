/* The simulator's event queue in C: a binary min-heap of (time, kind, seq, ...) tuples.
 *
 * Same interface and same order as mgst.sim.event_heap.PyEventHeap (heapq over a list): entries
 * pop in tuple order, which, seq being unique, is the order of (time, kind, seq). The keys
 * are kept unboxed beside each entry, so a sift compares two doubles and two integers in a
 * contiguous array instead of comparing tuples found through pointers (heapq's cost at
 * thousands of pending events: about 14,000 instructions per job, with cache misses).
 * Built by setup.py with the mypyc modules, and used only when they are (mgst.build_info).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

typedef struct {
    double time;
    long long kind;
    long long seq;
    PyObject *entry; /* owned reference to the whole tuple, returned by pop() */
} Item;

typedef struct {
    PyObject_HEAD
    Item *items;
    Py_ssize_t size;
    Py_ssize_t capacity;
} EventHeap;

static inline int
item_less(const Item *a, const Item *b)
{
    if (a->time != b->time)
        return a->time < b->time;
    if (a->kind != b->kind)
        return a->kind < b->kind;
    return a->seq < b->seq;
}

/* The keys of an entry; -1 with an exception set if it is not a (time, kind, seq, ...) tuple. */
static int
item_of(PyObject *entry, Item *out)
{
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 3) {
        PyErr_Format(PyExc_TypeError, "an event is a (time, kind, seq, ...) tuple, not %.100R", entry);
        return -1;
    }
    double time = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 0));
    if (time == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(time)) {
        PyErr_SetString(PyExc_ValueError, "an event's time is NaN");
        return -1;
    }
    long long kind = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 1));
    if (kind == -1 && PyErr_Occurred())
        return -1;
    long long seq = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 2));
    if (seq == -1 && PyErr_Occurred())
        return -1;
    out->time = time;
    out->kind = kind;
    out->seq = seq;
    out->entry = entry;
    return 0;
}

static int
reserve(EventHeap *self, Py_ssize_t need)
{
    if (need <= self->capacity)
        return 0;
    Py_ssize_t capacity = self->capacity ? self->capacity : 64;
    while (capacity < need) {
        if (capacity > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(Item)) {
            PyErr_NoMemory();
            return -1;
        }
        capacity *= 2;
    }
    Item *items = PyMem_Realloc(self->items, (size_t)capacity * sizeof(Item));
    if (items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->items = items;
    self->capacity = capacity;
    return 0;
}

/* Insert an item whose entry reference the heap now owns; *size grows by one (room is there). */
static void
sift_up(Item *items, Py_ssize_t *size, Item item)
{
    Py_ssize_t pos = (*size)++;
    while (pos > 0) {
        Py_ssize_t parent = (pos - 1) >> 1;
        if (!item_less(&item, &items[parent]))
            break;
        items[pos] = items[parent];
        pos = parent;
    }
    items[pos] = item;
}

static PyObject *
EventHeap_push(EventHeap *self, PyObject *entry)
{
    Item item;
    if (item_of(entry, &item) < 0 || reserve(self, self->size + 1) < 0)
        return NULL;
    Py_INCREF(entry);
    sift_up(self->items, &self->size, item);
    Py_RETURN_NONE;
}

static PyObject *
EventHeap_pop(EventHeap *self, PyObject *Py_UNUSED(ignored))
{
    if (self->size == 0) {
        PyErr_SetString(PyExc_IndexError, "pop from an empty event heap");
        return NULL;
    }
    Item *items = self->items;
    PyObject *top = items[0].entry; /* its reference goes to the caller */
    Py_ssize_t n = --self->size;
    if (n > 0) {
        Item last = items[n];
        Py_ssize_t pos = 0;
        for (;;) {
            Py_ssize_t child = 2 * pos + 1;
            if (child >= n)
                break;
            if (child + 1 < n && item_less(&items[child + 1], &items[child]))
                child++;
            if (!item_less(&items[child], &last))
                break;
            items[pos] = items[child];
            pos = child;
        }
        items[pos] = last;
    }
    return top;
}

/* Release a detached array of n items (a decref may run code that uses the heap: detach first). */
static void
release(Item *items, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(items[i].entry);
    PyMem_Free(items);
}

static void
drop_all(EventHeap *self)
{
    Item *items = self->items;
    Py_ssize_t n = self->size;
    self->items = NULL;
    self->size = 0;
    self->capacity = 0;
    release(items, n);
}

static PyObject *
EventHeap_entries(EventHeap *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *list = PyList_New(self->size);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->size; i++) {
        PyObject *entry = self->items[i].entry;
        Py_INCREF(entry);
        PyList_SET_ITEM(list, i, entry);
    }
    return list;
}

static PyObject *
EventHeap_reset(EventHeap *self, PyObject *iterable)
{
    /* Check every new entry before dropping the old ones: a bad entry changes nothing. */
    PyObject *seq = PySequence_Fast(iterable, "reset() takes an iterable of events");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Item *fresh = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(Item));
    if (fresh == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (item_of(PySequence_Fast_GET_ITEM(seq, i), &fresh[i]) < 0) {
            PyMem_Free(fresh);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Item item = fresh[i]; /* fresh[0..size) is the new heap so far; fresh[i] is read first */
        Py_INCREF(item.entry);
        sift_up(fresh, &size, item);
    }
    Py_DECREF(seq);
    Item *old = self->items;
    Py_ssize_t old_size = self->size;
    self->items = fresh;
    self->size = size;
    self->capacity = n > 0 ? n : 1;
    release(old, old_size);
    Py_RETURN_NONE;
}

static Py_ssize_t
EventHeap_len(EventHeap *self)
{
    return self->size;
}

static int
EventHeap_traverse(EventHeap *self, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < self->size; i++)
        Py_VISIT(self->items[i].entry);
    return 0;
}

static int
EventHeap_clear(EventHeap *self)
{
    drop_all(self);
    return 0;
}

static void
EventHeap_dealloc(EventHeap *self)
{
    PyObject_GC_UnTrack(self);
    drop_all(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
EventHeap_peek(EventHeap *self, PyObject *Py_UNUSED(ignored))
{
    if (self->size == 0) {
        PyErr_SetString(PyExc_IndexError, "peek into an empty event heap");
        return NULL;
    }
    return Py_NewRef(self->items[0].entry);
}

static PyMethodDef EventHeap_methods[] = {
    {"push", (PyCFunction)EventHeap_push, METH_O, "push(entry): add a (time, kind, seq, ...) tuple."},
    {"pop", (PyCFunction)EventHeap_pop, METH_NOARGS, "pop() -> the least entry, in tuple order."},
    {"peek", (PyCFunction)EventHeap_peek, METH_NOARGS, "peek() -> the least entry, left in the heap."},
    {"entries", (PyCFunction)EventHeap_entries, METH_NOARGS, "entries() -> a list of the entries, in heap order."},
    {"reset", (PyCFunction)EventHeap_reset, METH_O, "reset(entries): hold exactly these entries."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods EventHeap_as_sequence = {
    .sq_length = (lenfunc)EventHeap_len,
};

static PyTypeObject EventHeapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mgst.sim._event_heap.EventHeap",
    .tp_doc = PyDoc_STR("A binary min-heap of (time, kind, seq, ...) event tuples, keyed in C."),
    .tp_basicsize = sizeof(EventHeap),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_free = PyObject_GC_Del,
    .tp_dealloc = (destructor)EventHeap_dealloc,
    .tp_traverse = (traverseproc)EventHeap_traverse,
    .tp_clear = (inquiry)EventHeap_clear,
    .tp_methods = EventHeap_methods,
    .tp_as_sequence = &EventHeap_as_sequence,
};

static struct PyModuleDef event_heap_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mgst.sim._event_heap",
    .m_doc = "The simulator's event queue in C (mgst.sim.event_heap chooses it or its heapq twin).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__event_heap(void)
{
    if (PyType_Ready(&EventHeapType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&event_heap_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&EventHeapType);
    if (PyModule_AddObject(module, "EventHeap", (PyObject *)&EventHeapType) < 0) {
        Py_DECREF(&EventHeapType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

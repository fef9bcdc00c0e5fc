/*
 * meta.store._flush_worker: the group-commit flusher's system calls on a C thread that never
 * takes the GIL (the optional build's extension; meta.store.group_commit uses it when built).
 *
 * Worker(eventfd, check_offset, check_length, uncheckable) starts one POSIX thread. The
 * reactor thread hands it a batch with submit(plans): a sequence with one plan per flush task,
 * each plan a tuple of syncs in order: a str is a directory to fsync (open O_DIRECTORY, fsync,
 * close: Files.fsync_directory), an int a descriptor to fdatasync and then check as
 * meta.store.files.confirm_journal does (fallocate(FALLOC_FL_KEEP_SIZE) over
 * [check_offset, check_offset + check_length); an errno in `uncheckable` counts as success):
 * Files.fsync. A plan stops at its first failure, as the task's run() raises there; the other
 * plans still run. When the whole batch is done the thread adds 1 to the eventfd (the
 * reactor's CompletionSignal), and take() on the reactor thread returns one result per plan:
 * None, or (errno, stage, sync) with stage STAGE_OPEN, STAGE_FSYNC, STAGE_DATASYNC or
 * STAGE_CHECK; take() returns None while the batch runs. stop() lets the batch in hand finish,
 * then joins the thread (GIL released while it waits).
 *
 * The thread is named "metaq-flusher" (its comm in /proc, perf and top).
 *
 * The hand-off is a state word and a futex, not a mutex and condition variable: a batch costs
 * the reactor thread one futex wake when the thread sleeps (none when it is still awake), the
 * thread one futex wait and one eventfd write; glibc's condition variable cost one more futex
 * call per batch (the mutex it takes back after the wait is marked contended).
 *
 * At most one batch at a time (the Flusher's rule): submit raises RuntimeError when a batch
 * was submitted and its results not taken. The thread blocks every signal, so its system calls
 * see no EINTR from Python's handlers (they are retried on EINTR anyway).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STAGE_OPEN 0
#define STAGE_FSYNC 1
#define STAGE_DATASYNC 2
#define STAGE_CHECK 3
#define UNCHECKABLE_MAX 32

/* The batch's state: the reactor thread moves it IDLE -> PENDING (submit) and FINISHED -> IDLE
 * (take), the C thread PENDING -> RUNNING -> FINISHED. */
#define IDLE 0
#define PENDING 1
#define RUNNING 2
#define FINISHED 3

typedef struct {
    char *path; /* a directory to fsync, or NULL */
    int fd;     /* else the descriptor to fdatasync and check */
} Sync;

typedef struct {
    int error; /* 0: done */
    int stage;
    Py_ssize_t failed; /* index of the failed sync in the plan */
} Outcome;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    int started;
    int eventfd;
    int64_t check_offset;
    int64_t check_length;
    int uncheckable[UNCHECKABLE_MAX];
    int uncheckable_count;
    /* Shared (sequentially consistent atomics; no lock): */
    _Atomic int state;
    _Atomic int stopping;
    _Atomic uint32_t signals; /* bumped by submit and stop: the futex word the thread sleeps on */
    _Atomic int sleeping;     /* the thread is in (or entering) its futex wait */
    /* The batch: owned by the reactor until submit, by the thread until finished. */
    Sync *syncs;
    Py_ssize_t *plan_ends; /* plan i is syncs[plan_ends[i-1] .. plan_ends[i]) */
    Outcome *outcomes;
    Py_ssize_t plan_count;
    Py_ssize_t sync_count;
    PyObject *plans; /* the submitted plans, kept for take()'s results */
} Worker;

static int
retrying(int result)
{
    return result == -1 && errno == EINTR;
}

static int
is_uncheckable(Worker *self, int code)
{
    for (int i = 0; i < self->uncheckable_count; i++) {
        if (self->uncheckable[i] == code) {
            return 1;
        }
    }
    return 0;
}

/* One sync; 0, or the errno with *stage set. Worker thread, no GIL. */
static int
run_sync(Worker *self, const Sync *sync, int *stage)
{
    int result;
    if (sync->path != NULL) {
        int fd;
        do {
            fd = open(sync->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        } while (retrying(fd));
        if (fd < 0) {
            *stage = STAGE_OPEN;
            return errno;
        }
        do {
            result = fsync(fd);
        } while (retrying(result));
        int code = result == 0 ? 0 : errno;
        close(fd);
        *stage = STAGE_FSYNC;
        return code;
    }
    do {
        result = fdatasync(sync->fd);
    } while (retrying(result));
    if (result != 0) {
        *stage = STAGE_DATASYNC;
        return errno;
    }
    do {
        result = fallocate(sync->fd, 1 /* FALLOC_FL_KEEP_SIZE */, (off_t)self->check_offset,
                           (off_t)self->check_length);
    } while (retrying(result));
    if (result != 0 && !is_uncheckable(self, errno)) {
        *stage = STAGE_CHECK;
        return errno;
    }
    return 0;
}

static void
run_batch(Worker *self)
{
    Py_ssize_t start = 0;
    for (Py_ssize_t plan = 0; plan < self->plan_count; plan++) {
        Outcome *outcome = &self->outcomes[plan];
        outcome->error = 0;
        outcome->stage = 0;
        outcome->failed = 0;
        for (Py_ssize_t i = start; i < self->plan_ends[plan]; i++) {
            int stage = 0;
            int code = run_sync(self, &self->syncs[i], &stage);
            if (code != 0) {
                outcome->error = code;
                outcome->stage = stage;
                outcome->failed = i - start;
                break;
            }
        }
        start = self->plan_ends[plan];
    }
}

/* Wake the thread if it sleeps (or is about to): after `signals` was bumped. A submit that
 * finds it awake (still writing the eventfd of the last batch) makes no system call; one
 * that finds `sleeping` 0 bumped `signals` before the thread set it, so the thread's futex
 * wait, which compares `signals` with what it saw before checking the state, returns at
 * once. */
static void
wake_thread(Worker *self, int always)
{
    if (always || atomic_load(&self->sleeping)) {
        syscall(SYS_futex, &self->signals, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

static void *
worker_main(void *argument)
{
    Worker *self = (Worker *)argument;
    static const uint64_t one = 1;
    pthread_setname_np(pthread_self(), "metaq-flusher"); /* as /proc and perf show it */
    for (;;) {
        uint32_t seen = atomic_load(&self->signals);
        if (atomic_load(&self->state) == PENDING) {
            atomic_store(&self->state, RUNNING);
            run_batch(self);
            atomic_store(&self->state, FINISHED);
            ssize_t written;
            do {
                written = write(self->eventfd, &one, sizeof(one));
            } while (written == -1 && errno == EINTR);
            /* EAGAIN: the counter is full, so the reactor is woken already. */
            continue;
        }
        if (atomic_load(&self->stopping)) {
            break; /* nothing left in hand */
        }
        atomic_store(&self->sleeping, 1);
        syscall(SYS_futex, &self->signals, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
        atomic_store(&self->sleeping, 0); /* woken, EAGAIN (signals moved) or EINTR */
    }
    return NULL;
}

static void
free_batch(Worker *self)
{
    if (self->syncs != NULL) {
        for (Py_ssize_t i = 0; i < self->sync_count; i++) {
            free(self->syncs[i].path);
        }
    }
    free(self->syncs);
    free(self->plan_ends);
    free(self->outcomes);
    self->syncs = NULL;
    self->plan_ends = NULL;
    self->outcomes = NULL;
    self->plan_count = 0;
    self->sync_count = 0;
    Py_CLEAR(self->plans);
}

static int
Worker_init(Worker *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"eventfd", "check_offset", "check_length", "uncheckable", NULL};
    int eventfd;
    long long check_offset, check_length;
    PyObject *uncheckable;
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "the worker is initialized already");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iLLO", keywords, &eventfd, &check_offset,
                                     &check_length, &uncheckable)) {
        return -1;
    }
    PyObject *codes = PySequence_Fast(uncheckable, "uncheckable must be a sequence of errnos");
    if (codes == NULL) {
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(codes);
    if (count > UNCHECKABLE_MAX) {
        Py_DECREF(codes);
        PyErr_SetString(PyExc_ValueError, "too many uncheckable errnos");
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int code = PyLong_AsLong(PySequence_Fast_GET_ITEM(codes, i));
        if (code == -1 && PyErr_Occurred()) {
            Py_DECREF(codes);
            return -1;
        }
        self->uncheckable[i] = code;
    }
    Py_DECREF(codes);
    self->uncheckable_count = (int)count;
    self->eventfd = eventfd;
    self->check_offset = check_offset;
    self->check_length = check_length;
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    int code = pthread_create(&self->thread, NULL, worker_main, self);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (code != 0) {
        errno = code;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

/* Copy the plans into C arrays; -1 with an exception set on bad input. Reactor thread. */
static int
load_batch(Worker *self, PyObject *plans)
{
    PyObject *outer = PySequence_Fast(plans, "plans must be a sequence of tuples");
    if (outer == NULL) {
        return -1;
    }
    Py_ssize_t plan_count = PySequence_Fast_GET_SIZE(outer);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < plan_count; i++) {
        PyObject *plan = PySequence_Fast_GET_ITEM(outer, i);
        if (!PyTuple_Check(plan)) {
            Py_DECREF(outer);
            PyErr_SetString(PyExc_TypeError, "each plan must be a tuple");
            return -1;
        }
        total += PyTuple_GET_SIZE(plan);
    }
    self->syncs = calloc(total > 0 ? total : 1, sizeof(Sync));
    self->plan_ends = calloc(plan_count > 0 ? plan_count : 1, sizeof(Py_ssize_t));
    self->outcomes = calloc(plan_count > 0 ? plan_count : 1, sizeof(Outcome));
    if (self->syncs == NULL || self->plan_ends == NULL || self->outcomes == NULL) {
        Py_DECREF(outer);
        free_batch(self);
        PyErr_NoMemory();
        return -1;
    }
    self->sync_count = total; /* zeroed: free_batch frees the paths copied so far */
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < plan_count; i++) {
        PyObject *plan = PySequence_Fast_GET_ITEM(outer, i);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(plan); j++, at++) {
            PyObject *item = PyTuple_GET_ITEM(plan, j);
            Sync *sync = &self->syncs[at];
            if (PyUnicode_Check(item)) {
                PyObject *encoded = PyUnicode_EncodeFSDefault(item);
                if (encoded == NULL) {
                    goto failed;
                }
                sync->path = strdup(PyBytes_AS_STRING(encoded));
                Py_DECREF(encoded);
                if (sync->path == NULL) {
                    PyErr_NoMemory();
                    goto failed;
                }
            } else if (PyLong_Check(item)) {
                sync->fd = PyLong_AsLong(item);
                if (sync->fd == -1 && PyErr_Occurred()) {
                    goto failed;
                }
            } else {
                PyErr_SetString(PyExc_TypeError, "a sync is a directory (str) or a descriptor");
                goto failed;
            }
        }
        self->plan_ends[i] = at;
    }
    self->plan_count = plan_count;
    Py_INCREF(outer);
    self->plans = outer;
    Py_DECREF(outer);
    return 0;
failed:
    Py_DECREF(outer);
    free_batch(self);
    return -1;
}

static PyObject *
Worker_submit(Worker *self, PyObject *plans)
{
    if (!self->started) {
        PyErr_SetString(PyExc_RuntimeError, "the worker is not initialized");
        return NULL;
    }
    if (atomic_load(&self->state) != IDLE || atomic_load(&self->stopping)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a batch is in hand, or the worker stopped: one batch at a time");
        return NULL;
    }
    if (load_batch(self, plans) < 0) {
        return NULL;
    }
    atomic_store(&self->state, PENDING);
    atomic_fetch_add(&self->signals, 1);
    wake_thread(self, 0);
    Py_RETURN_NONE;
}

static PyObject *
Worker_take(Worker *self, PyObject *Py_UNUSED(ignored))
{
    if (atomic_load(&self->state) != FINISHED) {
        Py_RETURN_NONE;
    }
    atomic_store(&self->state, IDLE); /* the batch is the reactor's again */
    PyObject *results = PyList_New(self->plan_count);
    if (results == NULL) {
        free_batch(self);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->plan_count; i++) {
        Outcome *outcome = &self->outcomes[i];
        PyObject *result;
        if (outcome->error == 0) {
            result = Py_NewRef(Py_None);
        } else {
            PyObject *plan = PySequence_Fast_GET_ITEM(self->plans, i);
            result = Py_BuildValue("(iiO)", outcome->error, outcome->stage,
                                   PyTuple_GET_ITEM(plan, outcome->failed));
            if (result == NULL) {
                Py_DECREF(results);
                free_batch(self);
                return NULL;
            }
        }
        PyList_SET_ITEM(results, i, result);
    }
    free_batch(self);
    return results;
}

static void
stop_thread(Worker *self)
{
    if (!self->started) {
        return;
    }
    atomic_store(&self->stopping, 1);
    atomic_fetch_add(&self->signals, 1);
    wake_thread(self, 1);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
}

static PyObject *
Worker_stop(Worker *self, PyObject *Py_UNUSED(ignored))
{
    stop_thread(self);
    Py_RETURN_NONE;
}

static void
Worker_dealloc(Worker *self)
{
    stop_thread(self);
    free_batch(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}


static PyMethodDef Worker_methods[] = {
    {"submit", (PyCFunction)Worker_submit, METH_O,
     "submit(plans): hand a batch to the thread (reactor thread; one batch at a time)."},
    {"take", (PyCFunction)Worker_take, METH_NOARGS,
     "take() -> None while the batch runs, else one result per plan: None or (errno, stage, "
     "sync)."},
    {"stop", (PyCFunction)Worker_stop, METH_NOARGS,
     "stop(): finish the batch in hand, then join the thread."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meta.store._flush_worker.Worker",
    .tp_basicsize = sizeof(Worker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The flusher's system calls on a C thread that never takes the GIL.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Worker_init,
    .tp_dealloc = (destructor)Worker_dealloc,
    .tp_methods = Worker_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "meta.store._flush_worker",
    "The group-commit flusher's system calls on a C thread that never takes the GIL.",
    -1,
    NULL,
};

PyMODINIT_FUNC
PyInit__flush_worker(void)
{
    if (PyType_Ready(&WorkerType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Worker", (PyObject *)&WorkerType) < 0
        || PyModule_AddIntConstant(m, "STAGE_OPEN", STAGE_OPEN) < 0
        || PyModule_AddIntConstant(m, "STAGE_FSYNC", STAGE_FSYNC) < 0
        || PyModule_AddIntConstant(m, "STAGE_DATASYNC", STAGE_DATASYNC) < 0
        || PyModule_AddIntConstant(m, "STAGE_CHECK", STAGE_CHECK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

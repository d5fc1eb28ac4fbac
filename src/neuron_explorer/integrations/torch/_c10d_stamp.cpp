// A collective's completion stamped in C++, on the backend's thread, without the GIL.
//
// ``stamp_work(work)`` adds a C++ callback to the future of a c10d ``Work`` and returns a
// ``WorkStamp`` whose ``t`` (CLOCK_MONOTONIC ns, 0 until the future completes) and ``tid`` (the OS
// thread that completed it) a Python thread reads later -- what ``runtime/_fastpath.c``'s ``Stamp``
// keeps, but a Python callable handed to ``Future.add_done_callback`` is called by pybind with the
// GIL taken on gloo's thread (torch/csrc/jit/python/pybind_utils.h), once per DDP bucket, while the
// training thread runs Python.  This callback touches no Python object: the backend's thread never
// asks for the GIL, and a callback left in a future at the interpreter's finalization is harmless
// (decisions 0198, 0221).
//
// With ``install_kernels`` it also holds the collectives' ``BackendSelect`` kernels: a boxed C++
// kernel per c10d operator that takes the call's time, thread, bytes, dtype and process group,
// redispatches below itself, stamps the returned ``Work`` and appends a record to a queue, which
// Python adopts (``drain``) where it records collectives today: at a ``Work.wait``, before a sink
// drains the rings, at exit.  No Python object is touched per call: the ~56k instructions of
// boxing a Python kernel costs per collective go (decision 0223).
//
// It is built against the installed torch (its headers and its pybind11 ABI) by
// ``python -m neuron_explorer.integrations.build_native build`` into a cache keyed by torch's
// version and this file's content; ``integrations/torch/native.py`` loads it when it matches and the
// collectives fall back to the C ``Stamp`` otherwise.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/intrusive_ptr.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <string>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace py = pybind11;

namespace {

struct StampData {
  std::atomic<long long> t{0};  // written once, after tid and status (release), by the completing thread
  long tid{0};
  int status{0};  // the runtime's status code: 0, 1 (failed) or 5 (timed out)
};

int error_status(const std::string &msg) {
  std::string m(msg);
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  return m.find("timed out") != std::string::npos || m.find("timeout") != std::string::npos ? 5 : 1;
}

long long monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

long this_tid() {
  thread_local long tid = 0;
  if (tid == 0) {
    tid = static_cast<long>(syscall(SYS_gettid));
  }
  return tid;
}

// A Work's completion (``d``: nullptr when not stamped) and a weak reference to the Work, which
// keeps its address (the key Python files it under) from being reused while the record lives.
struct WorkStamp {
  std::shared_ptr<StampData> d;
  c10::weak_intrusive_ptr<c10d::Work> w{c10::weak_intrusive_ptr<c10d::Work>::reclaim(nullptr)};
  long long t() const { return d ? d->t.load(std::memory_order_acquire) : 0; }
  long tid() const { return t() != 0 ? d->tid : 0; }
  // The Work's future once completed (its waiters are woken before its callbacks run: a stamp
  // comes after the wait it ended), else nullptr.
  c10::intrusive_ptr<c10::ivalue::Future> completed() const {
    auto work = w.lock();
    if (work) {
      try {
        auto f = work->getFuture();
        if (f && f->completed()) {
          return f;
        }
      } catch (...) {  // (a Work without a future: gloo's send and recv)
      }
    }
    return {};
  }
  bool done() const { return t() != 0 || completed(); }
  int status() const {
    if (t() != 0) {
      return d->status;
    }
    auto f = completed();
    return f && f->hasError() ? error_status(f->tryRetrieveErrorMessage()) : 0;
  }
};

std::shared_ptr<StampData> stamp_future(const c10::intrusive_ptr<c10::ivalue::Future> &fut) {
  auto d = std::make_shared<StampData>();
  // The callback holds the data, not the WorkStamp: either side may go first.  A future already
  // completed runs it here, on the calling thread.
  fut->addCallback(
      [d](c10::ivalue::Future &f) {
        if (d->t.load(std::memory_order_relaxed) == 0) {
          d->tid = this_tid();
          d->status = f.hasError() ? error_status(f.tryRetrieveErrorMessage()) : 0;
          d->t.store(monotonic_ns(), std::memory_order_release);
        }
      },
      /*uses_future=*/true);
  return d;
}

WorkStamp stamp_work(py::handle work) {
  auto *w = py::cast<c10d::Work *>(work);  // (a cast error for anything but a c10d Work)
  auto fut = w->getFuture();
  if (!fut) {
    throw py::value_error("stamp_work: this Work has no future");
  }
  return WorkStamp{stamp_future(fut)};
}

// The Work's address: the key of its collective when the kernels below record it (a Python
// wrapper's id changes when the wrapper is let go and made anew; the Work's address does not).
uintptr_t work_address(py::handle work) { return reinterpret_cast<uintptr_t>(py::cast<c10d::Work *>(work)); }

// ---- the kernels ----

struct Record {
  int op;  // index into the operators ``install_kernels`` was given
  long long t0, t1;  // t1: the end when the operator returned with the collective done (no Work)
  long tid;
  long long nbytes;
  int dtype;  // c10::ScalarType, -1: none
  bool failed;  // the call raised: only its sequence number counts
  long long gseq;  // the group's sequence number before this call, at the group's first call; else -1
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  uintptr_t key;
  WorkStamp stamp;
  bool stamped;
};

constexpr size_t QUEUE_MAX = 1 << 16;  // records held between two adoptions at most (then dropped)

struct Queue {
  std::mutex mu;
  std::vector<Record> items;
  // the groups seen (weak: their addresses are not reused while listed)
  std::vector<c10::weak_intrusive_ptr<c10d::ProcessGroup>> seen;
  std::atomic<long> size{0};
  long long dropped{0};
  // off once nothing will adopt the records (the capture's final write, a forked child): the
  // kernels then only redispatch, and no record pins a Work
  std::atomic<bool> recording{true};
};

Queue *queue() {
  static Queue *q = new Queue();  // (never destroyed: a backend may call a kernel during teardown)
  return q;
}

// fork(): the queue's lock is held across it, so that a child never starts with it taken by a
// thread it does not have; the child drops its parent's records (its parent adopts them)
void before_fork() { queue()->mu.lock(); }
void after_fork_in_parent() { queue()->mu.unlock(); }
void after_fork_in_child() {
  Queue *q = queue();
  q->items.clear();
  q->size.store(0, std::memory_order_relaxed);
  q->dropped = 0;
  q->recording.store(false, std::memory_order_relaxed);  // (a forked child records nothing more)
  q->mu.unlock();
}

void push(Record &&r) {
  Queue *q = queue();
  std::lock_guard<std::mutex> g(q->mu);
  if (q->items.size() >= QUEUE_MAX) {
    q->dropped++;
    return;
  }
  q->items.push_back(std::move(r));
  q->size.store(static_cast<long>(q->items.size()), std::memory_order_relaxed);
}

// The group's sequence number before its first call through the kernels (what Python numbers its
// collectives from, so that every rank numbers a collective alike however late the hooks went
// in), or -1 for a group seen before.
long long first_seq(const c10::intrusive_ptr<c10d::ProcessGroup> &pg) {
  Queue *q = queue();
  {
    std::lock_guard<std::mutex> g(q->mu);
    for (const auto &w : q->seen) {
      if (w._unsafe_get_target() == pg.get()) {
        return -1;
      }
    }
    q->seen.emplace_back(pg);
  }
  try {
    return static_cast<long long>(pg->getSequenceNumberForGroup());
  } catch (...) {
    return 0;  // (a backend without sequence numbers: counted from here)
  }
}

void tensor_bytes(const c10::IValue &v, long long &n, int &dtype) {
  if (v.isTensor()) {
    const at::Tensor &t = v.toTensor();
    if (t.defined()) {
      n += static_cast<long long>(t.numel()) * static_cast<long long>(t.element_size());
      if (dtype < 0) {
        dtype = static_cast<int>(t.scalar_type());
      }
    }
  } else if (v.isTensorList()) {
    for (const at::Tensor &t : v.toTensorList()) {
      tensor_bytes(c10::IValue(t), n, dtype);
    }
  } else if (v.isList()) {
    for (const c10::IValue &x : v.toListRef()) {
      tensor_bytes(x, n, dtype);
    }
  }
}

struct Kernel final : public c10::OperatorKernel {
  int op, pg_pos, async_pos, work_at;  // work_at: 0 alone, -1 last of a tuple, 1: no Work
  bool barrier;
  c10::DispatchKeySet below{c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect};

  Kernel(int op_, int pg, int async_, int work, bool barrier_)
      : op(op_), pg_pos(pg), async_pos(async_), work_at(work), barrier(barrier_) {}

  void operator()(const c10::OperatorHandle &h, c10::DispatchKeySet ks, torch::jit::Stack *stack) {
    if (!queue()->recording.load(std::memory_order_relaxed)) {
      h.redispatchBoxed(ks & below, stack);
      return;
    }
    Record r{op, monotonic_ns(), 0, this_tid(), 0, -1, false, -1, {}, 0, {}, false};
    const size_t n = h.schema().arguments().size();
    bool async = true;
    try {  // (recording never breaks the collective: on any failure, the call goes unrecorded)
      read_args(stack, n, r, async);
    } catch (...) {
      r.pg.reset();
    }
    try {
      h.redispatchBoxed(ks & below, stack);
    } catch (...) {
      r.failed = true;
      if (r.pg) {
        try {
          push(std::move(r));
        } catch (...) {
        }
      }
      throw;
    }
    if (!r.pg) {
      return;  // (not a group this can name: the Python kernel's warning case; nothing recorded)
    }
    try {
      finish(stack, r, async);
    } catch (...) {
      // (the Work or its future misbehaved: the record goes as it is, its end left to Work.wait)
    }
    try {
      push(std::move(r));
    } catch (...) {
    }
  }

  void read_args(torch::jit::Stack *stack, size_t n, Record &r, bool &async) const {
    if (stack->size() >= n) {
      const c10::IValue *args = stack->data() + (stack->size() - n);
      if (!barrier) {
        tensor_bytes(args[0], r.nbytes, r.dtype);
      }
      if (pg_pos >= 0 && static_cast<size_t>(pg_pos) < n && args[pg_pos].isCustomClass()) {
        r.pg = args[pg_pos].toCustomClass<c10d::ProcessGroup>();
        r.gseq = first_seq(r.pg);
      }
      if (async_pos >= 0 && static_cast<size_t>(async_pos) < n && args[async_pos].isBool()) {
        async = args[async_pos].toBool();
      }
    }
  }

  // The record of a call that returned: its end at once (no Work), else its Work, stamped.
  void finish(torch::jit::Stack *stack, Record &r, bool async) const {
    if (work_at == 1 || stack->empty()) {
      r.t1 = monotonic_ns();
    } else {
      const c10::IValue &out = stack->back();
      if (out.isCustomClass()) {
        auto work = out.toCustomClass<c10d::Work>();
        r.key = reinterpret_cast<uintptr_t>(work.get());
        r.stamp.w = c10::weak_intrusive_ptr<c10d::Work>(work);
        // A blocking call (async_op False) is waited on at once, where its end is recorded: no
        // callback.  Everything else is stamped on the backend's thread (DDP's buckets, async
        // ops, send and recv).
        // (gloo's send and recv Works have no future: getFuture throws; their Work.wait records
        // the end)
        if (async) {
          try {
            auto fut = work->getFuture();
            if (fut) {
              r.stamp.d = stamp_future(fut);
              r.stamped = true;
            }
          } catch (...) {
          }
        }
      } else {
        r.t1 = monotonic_ns();
      }
    }
  }
};

// The registrations: destroying the object (Python's reference to it going) undoes them.
struct Kernels {
  std::unique_ptr<torch::Library> lib;
};

std::unique_ptr<Kernels> install_kernels(const std::vector<std::tuple<std::string, int, int, int, bool>> &ops) {
  auto k = std::make_unique<Kernels>();
  k->lib = std::make_unique<torch::Library>(torch::Library::IMPL, "c10d", c10::DispatchKey::BackendSelect,
                                            __FILE__, __LINE__);
  int i = 0;
  for (const auto &[name, pg_pos, async_pos, work_at, barrier] : ops) {
    k->lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                   std::make_unique<Kernel>(i, pg_pos, async_pos, work_at, barrier)));
    i++;
  }
  return k;
}

long queued() { return queue()->size.load(std::memory_order_relaxed); }

void stop_recording() { queue()->recording.store(false, std::memory_order_relaxed); }

// The address of the queue's size, which _fastpath's backward gate reads (as a ``long``, relaxed)
// to call Python after a backward only when records wait.  The queue is never destroyed.
static_assert(sizeof(std::atomic<long>) == sizeof(long) && std::atomic<long>::is_always_lock_free,
              "the queue's size must read as a plain long");
uintptr_t queued_address() { return reinterpret_cast<uintptr_t>(&queue()->size); }

// The records since the last call, in call order: (op, t0, t1, tid, nbytes, dtype or None,
// ProcessGroup, the group's first sequence number or -1, key, WorkStamp, stamped, failed), and the
// count dropped meanwhile.
py::tuple drain() {
  Queue *q = queue();
  std::vector<Record> items;
  long long dropped;
  {
    std::lock_guard<std::mutex> g(q->mu);
    items.swap(q->items);
    q->size.store(0, std::memory_order_relaxed);
    dropped = q->dropped;
    q->dropped = 0;
  }
  py::list out(items.size());
  size_t i = 0;
  for (Record &r : items) {
    py::object dtype = py::none();
    if (r.dtype >= 0) {
      dtype = py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject *>(torch::getTHPDtype(static_cast<c10::ScalarType>(r.dtype))));
    }
    out[i++] = py::make_tuple(r.op, r.t0, r.t1, r.tid, r.nbytes, dtype, py::cast(r.pg), r.gseq, r.key,
                              py::cast(std::move(r.stamp)), r.stamped, r.failed);
  }
  return py::make_tuple(out, dropped);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Completion stamps of c10d Work futures and the collectives' BackendSelect kernels in C++";
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  py::class_<WorkStamp>(m, "WorkStamp")
      .def_property_readonly("t", &WorkStamp::t, "CLOCK_MONOTONIC ns of the completion (0: not yet)")
      .def_property_readonly("tid", &WorkStamp::tid, "the OS thread id that completed the future")
      .def_property_readonly("status", &WorkStamp::status, "0, 1 (the future failed) or 5 (timed out)")
      .def_property_readonly("done", &WorkStamp::done,
                             "stamped, or the Work's future completed (its callbacks may not have run yet)");
  m.def("stamp_work", &stamp_work, py::arg("work"),
        "stamp_work(work) -> WorkStamp: stamp the completion of a c10d Work's future");
  m.def("work_address", &work_address, py::arg("work"), "work_address(work) -> int: the c10d Work's address");
  py::class_<Kernels>(m, "Kernels");
  m.def("install_kernels", &install_kernels, py::arg("ops"),
        "install_kernels([(name, pg_pos, async_pos, work_at, is_barrier)]) -> Kernels: the recording "
        "BackendSelect kernels, registered while the returned object lives");
  m.def("queued", &queued, "queued() -> int: records not drained yet");
  m.def("stop_recording", &stop_recording, "stop_recording(): the kernels only redispatch from now on");
  m.def("queued_address", &queued_address, "queued_address() -> int: the address of that count (a C long)");
  m.def("drain", &drain, "drain() -> (records, dropped): the kernels' records in call order");
}

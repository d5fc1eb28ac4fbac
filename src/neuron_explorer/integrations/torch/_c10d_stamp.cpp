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
// It is built against the installed torch (its headers and its pybind11 ABI) by
// ``python -m neuron_explorer.integrations.build_native build`` into a cache keyed by torch's
// version and this file's content; ``integrations/torch/native.py`` loads it when it matches and the
// collectives fall back to the C ``Stamp`` otherwise.

#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <memory>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace py = pybind11;

namespace {

struct StampData {
  std::atomic<long long> t{0};  // written once, after tid (release), by the completing thread
  long tid{0};
};

struct WorkStamp {
  std::shared_ptr<StampData> d;
  long long t() const { return d->t.load(std::memory_order_acquire); }
  long tid() const { return d->t.load(std::memory_order_acquire) != 0 ? d->tid : 0; }
};

long long monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

WorkStamp stamp_work(py::handle work) {
  auto *w = py::cast<c10d::Work *>(work);  // (a cast error for anything but a c10d Work)
  auto fut = w->getFuture();
  if (!fut) {
    throw py::value_error("stamp_work: this Work has no future");
  }
  auto d = std::make_shared<StampData>();
  // The callback holds the data, not the WorkStamp: either side may go first.  A future already
  // completed runs it here, on the calling thread.
  fut->addCallback(
      [d](c10::ivalue::Future &) {
        if (d->t.load(std::memory_order_relaxed) == 0) {
          d->tid = static_cast<long>(syscall(SYS_gettid));
          d->t.store(monotonic_ns(), std::memory_order_release);
        }
      },
      /*uses_future=*/false);
  return WorkStamp{d};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Completion stamps of c10d Work futures, set on the backend's thread without the GIL";
  py::class_<WorkStamp>(m, "WorkStamp")
      .def_property_readonly("t", &WorkStamp::t, "CLOCK_MONOTONIC ns of the completion (0: not yet)")
      .def_property_readonly("tid", &WorkStamp::tid, "the OS thread id that completed the future");
  m.def("stamp_work", &stamp_work, py::arg("work"),
        "stamp_work(work) -> WorkStamp: stamp the completion of a c10d Work's future");
}

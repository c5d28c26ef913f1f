// _ferry_torch: the FerryAgent class for Python (ferry/torch.py builds it
// from torch's backend options and hands it to torch's init_rpc).
//
// It derives from torch's own pybind11 class RpcAgent (torch's
// _distributed_rpc module), so join, shutdown, get_worker_info(s),
// get_metrics and get_debug_info are torch's bindings, dispatched to the
// agent; this module only adds the constructor and ferry's own views.
#include "ferry_agent.h"

#include <torch/csrc/utils/pybind.h>  // torch's holder types and casters

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;

PYBIND11_MODULE(_ferry_torch, m) {
  m.doc() = "ferry as a torch.distributed.rpc backend (import ferry.torch)";
  // RpcAgent's Python type must exist before a class derives from it.
  py::module::import("torch.distributed.rpc");

  using ferry_torch::FerryAgentOptions;
  py::class_<FerryAgentOptions>(m, "FerryAgentOptions")
      .def(py::init<>())
      .def_readwrite("transport", &FerryAgentOptions::transport)
      .def_readwrite("store", &FerryAgentOptions::store)
      .def_readwrite("host_store", &FerryAgentOptions::host_store)
      .def_readwrite("job", &FerryAgentOptions::job)
      .def_readwrite("secret", &FerryAgentOptions::secret)
      .def_readwrite("rpc_timeout_s", &FerryAgentOptions::rpc_timeout_s)
      .def_readwrite("num_worker_threads", &FerryAgentOptions::num_worker_threads)
      .def_readwrite("peer_timeout", &FerryAgentOptions::peer_timeout)
      .def_readwrite("start_timeout", &FerryAgentOptions::start_timeout)
      .def_readwrite("join_timeout", &FerryAgentOptions::join_timeout)
      .def_readwrite("zero_copy", &FerryAgentOptions::zero_copy)
      .def_readwrite("busy_poll", &FerryAgentOptions::busy_poll);

  using ferry_torch::FerryAgent;
  py::class_<FerryAgent, torch::distributed::rpc::RpcAgent, std::shared_ptr<FerryAgent>>(
      m, "FerryAgent")
      // Blocks until every rank joined: without the GIL, so that this
      // process's other threads (and torch's store) keep running.
      .def(py::init<std::string, int, int, FerryAgentOptions>(), py::arg("name"),
           py::arg("rank"), py::arg("world_size"), py::arg("options"),
           py::call_guard<py::gil_scoped_release>())
      // torch's api.py passes a rank where the user gave one
      // (rpc_sync(1, ...)); torch's base binding takes only a name, so the
      // three overloads are given here as TensorPipe's binding gives them
      // (a name here hides the base's overloads of that name).
      .def(
          "get_worker_info",
          [](const FerryAgent& a) -> const torch::distributed::rpc::WorkerInfo& {
            return a.getWorkerInfo();
          },
          py::return_value_policy::reference_internal,
          py::call_guard<py::gil_scoped_release>())
      .def(
          "get_worker_info",
          [](const FerryAgent& a,
             const std::string& name) -> const torch::distributed::rpc::WorkerInfo& {
            return a.getWorkerInfo(name);
          },
          py::return_value_policy::reference_internal,
          py::call_guard<py::gil_scoped_release>())
      .def(
          "get_worker_info",
          [](const FerryAgent& a, torch::distributed::rpc::worker_id_t id)
              -> const torch::distributed::rpc::WorkerInfo& {
            return a.getWorkerInfo(id);
          },
          py::return_value_policy::reference_internal,
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("options", &FerryAgent::options)
      .def("peer_transports", &FerryAgent::peerTransports,
           "The ferry transport reaching each worker ('self' for this one).");
}

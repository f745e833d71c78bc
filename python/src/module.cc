// deltacast._core: the C++ engine for the pure-Python package `deltacast`
// (python/deltacast), which is the interface users see.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "engines.h"
#include "group_engines.h"

namespace py = pybind11;
using namespace deltacast::python;

PYBIND11_MODULE(_core, m) {
  m.doc() = "deltacast's C++ engine; use the deltacast package, not this module";
  m.attr("__version__") = DELTACAST_VERSION;

  py::class_<PyProducer>(m, "Producer")
      .def(py::init([](const std::vector<std::string>& names, const std::vector<py::capsule>& capsules,
                       const std::vector<std::string>& dtypes, std::string listen, std::string token,
                       std::vector<std::string> rails, std::string value_codec, unsigned threads, std::string transport,
                       const py::object& group, std::string metrics, uintptr_t cuda_stream, std::string shadow,
                       std::string protection, std::string shape, std::string site, int wan_zstd) {
             ProducerArgs args{std::move(listen), std::move(token),        std::move(rails),   std::move(value_codec),
                               threads,           std::move(transport), std::nullopt, 60,
                               std::move(metrics), cuda_stream, std::move(shadow), std::move(protection),
                               std::move(shape),   std::move(site),       wan_zstd};
             if (!group.is_none()) {
               // {logical, shards, rank, world, coordinator, host, advertise, register_timeout}, from engine.py
               const py::dict g = group.cast<py::dict>();
               args.group = seat_options(
                   g["logical"].cast<std::string>(), g["shards"].cast<std::string>(), g["rank"].cast<uint32_t>(),
                   g["world"].cast<uint32_t>(), g["coordinator"].cast<std::vector<std::string>>(), g["host"].cast<bool>(),
                   g["advertise"].cast<std::vector<std::string>>());
               args.register_timeout = g["register_timeout"].cast<double>();
             }
             return std::make_unique<PyProducer>(names, capsules, dtypes, args);
           }),
           py::arg("names"), py::arg("capsules"), py::arg("dtypes"), py::arg("listen"), py::arg("token"), py::arg("rails"),
           py::arg("value_codec"), py::arg("threads"), py::arg("transport"), py::arg("group") = py::none(),
           py::arg("metrics") = "", py::arg("cuda_stream") = 0, py::arg("shadow") = "device",
           py::arg("protection") = "authenticated", py::arg("shape") = "auto", py::arg("site") = "",
           py::arg("wan_zstd") = 1)
      .def_property_readonly("address", &PyProducer::address)
      .def_property_readonly("metrics_address", &PyProducer::metrics_address)
      .def("progress", &PyProducer::progress)
      .def_property_readonly("group_coordinator", &PyProducer::group_coordinator)
      .def_property_readonly("transport", &PyProducer::transport)
      .def("publish", &PyProducer::publish, py::arg("full"), py::arg("version"))
      .def("wait", &PyProducer::wait, py::arg("version"), py::arg("timeout"))
      .def("wait_members", &PyProducer::wait_members, py::arg("count"), py::arg("timeout"))
      .def("check", &PyProducer::check, py::arg("version"), py::arg("timeout"))
      .def("report", &PyProducer::report, py::arg("version"))
      .def("stats", &PyProducer::stats)
      .def("manifest", &PyProducer::manifest)
      .def("close", &PyProducer::close);

  py::class_<PyConsumer>(m, "Consumer")
      .def(py::init([](const std::vector<std::string>& names, const std::vector<py::capsule>& capsules,
                       const std::vector<std::string>& dtypes, std::vector<std::string> connect, std::string token,
                       std::vector<std::string> rails, std::string name, unsigned threads, double join_timeout,
                       std::string transport, std::string node, std::string metrics, uintptr_t cuda_stream,
                       std::string protection, std::string site) {
             ConsumerArgs args{std::move(connect), std::move(token),        std::move(rails),     std::move(name),
                               threads,            join_timeout, std::move(transport), std::move(node),
                               std::move(metrics), cuda_stream, std::move(protection), std::move(site)};
             return std::make_unique<PyConsumer>(names, capsules, dtypes, args);
           }),
           py::arg("names"), py::arg("capsules"), py::arg("dtypes"), py::arg("connect"), py::arg("token"), py::arg("rails"),
           py::arg("name"), py::arg("threads"), py::arg("join_timeout"), py::arg("transport"), py::arg("node"),
           py::arg("metrics") = "", py::arg("cuda_stream") = 0, py::arg("protection") = "authenticated",
           py::arg("site") = "")
      .def_property_readonly("transport", &PyConsumer::transport)
      .def_property_readonly("metrics_address", &PyConsumer::metrics_address)
      .def("pull", &PyConsumer::pull, py::arg("timeout"))
      .def("start", &PyConsumer::start, py::arg("on_commit"))
      .def("wait_version", &PyConsumer::wait_version, py::arg("version"), py::arg("timeout"))
      .def_property_readonly("version", &PyConsumer::version)
      .def("state", &PyConsumer::state)
      .def("model_hash", &PyConsumer::model_hash)
      .def("close", &PyConsumer::close);

  m.def("resolve_layout", &resolve_layout, py::arg("logical"), py::arg("locals"));
  m.def("find_group", &find_group, py::arg("connect"), py::arg("token"), py::arg("timeout"),
        py::arg("protection") = "authenticated");

  py::class_<PyGroupConsumer>(m, "GroupConsumer")
      .def(py::init([](const std::vector<std::string>& names, const std::vector<py::capsule>& capsules,
                       const std::vector<std::string>& dtypes, const std::string& logical, const std::string& layout,
                       const std::string& ranks, std::vector<std::string> connect, std::string token,
                       std::vector<std::string> rails, std::string name, unsigned threads, double join_timeout,
                       std::string transport, std::string node, uint64_t commit_limit, std::string protection,
                       std::string site) {
             // No metrics: a group consumer runs one consumer per trainer rank (one port each).
             ConsumerArgs args{std::move(connect), std::move(token),        std::move(rails),     std::move(name),
                               threads,            join_timeout, std::move(transport), std::move(node),
                               std::string(),      0,            std::move(protection), std::move(site)};
             return std::make_unique<PyGroupConsumer>(names, capsules, dtypes, logical, layout, ranks, args,
                                                      commit_limit);
           }),
           py::arg("names"), py::arg("capsules"), py::arg("dtypes"), py::arg("logical"), py::arg("layout"),
           py::arg("ranks"), py::arg("connect"), py::arg("token"), py::arg("rails"), py::arg("name"), py::arg("threads"),
           py::arg("join_timeout"), py::arg("transport"), py::arg("node"),
           py::arg("commit_limit") = UINT64_MAX, py::arg("protection") = "authenticated", py::arg("site") = "")
      .def_property_readonly("transport", &PyGroupConsumer::transport)
      .def("wait_version", &PyGroupConsumer::wait_version, py::arg("version"), py::arg("timeout"))
      .def("set_commit_limit", &PyGroupConsumer::set_commit_limit, py::arg("through"))
      .def("staged", &PyGroupConsumer::staged, py::arg("version"))
      .def_property_readonly("version", &PyGroupConsumer::version)
      .def("state", &PyGroupConsumer::state)
      .def("close", &PyGroupConsumer::close);

  py::class_<PyGroupCoordinator>(m, "GroupCoordinator")
      .def(py::init<uint32_t, const std::string&, const std::string&, const std::string&>(), py::arg("world"),
           py::arg("listen"), py::arg("token"), py::arg("protection") = "authenticated")
      .def_property_readonly("address", &PyGroupCoordinator::address)
      .def("group", &PyGroupCoordinator::group)
      .def("registered", &PyGroupCoordinator::registered)
      .def("close", &PyGroupCoordinator::close);
}

// The one pybind11 translation unit: thin wrappers over the core library.
#include <pybind11/pybind11.h>

#include "gramkiln/core.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "gramkiln C++ runtime";
  m.def("core_version", &gramkiln::core_version, "Version string of the C++ core library.");
}

#include "gramkiln/core.hpp"

namespace gramkiln {

std::string core_version() { return "0.1.0"; }

}  // namespace gramkiln

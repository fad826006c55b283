#include "gramkiln/core.hpp"

namespace gramkiln {

std::string core_version() { return "0.1.0"; }

std::string core_build_profile() {
#ifdef GRAMKILN_PGO_PROFILE
  return GRAMKILN_PGO_PROFILE;
#else
  return "";
#endif
}

}  // namespace gramkiln

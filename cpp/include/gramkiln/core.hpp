// Public surface of the gramkiln C++ core: no Python headers here.
#pragma once
#include <string>

namespace gramkiln {

// Version of the core library; the bindings expose it so Python can check it matches.
std::string core_version();

}  // namespace gramkiln

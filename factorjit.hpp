// The umbrella header: everything a user of factorjit needs.
#pragma once

#include "dsl/error.hpp"
#include "dsl/expr.hpp"
#include "dsl/parse.hpp"
#include "runtime/panel.hpp"
#include "runtime/program.hpp"
#include "runtime/host_registration.hpp"
#include "runtime/devices.hpp"

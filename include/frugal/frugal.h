// Umbrella header: everything public in frugal.
#pragma once

#include "frugal/dtype.h"
#include "frugal/error.h"
#include "frugal/runtime.h"
#include "frugal/tensor.h"

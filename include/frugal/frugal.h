// Umbrella header: everything public in frugal (the core types, then one header per op family).
#pragma once

#include "frugal/dtype.h"
#include "frugal/error.h"
#include "frugal/half.h"
#include "frugal/runtime.h"
#include "frugal/tensor.h"

#include "frugal/attention.h"
#include "frugal/kv_cache.h"
#include "frugal/paged_attention.h"
#include "frugal/paged_cache.h"
#include "frugal/sparse_conv.h"

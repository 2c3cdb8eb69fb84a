// The umbrella header: everything a user of fsdp needs.
#pragma once

#include "fsdp/comm/collective_options.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/comm/work.hpp"
#include "fsdp/config.hpp"
#include "fsdp/core/dtype.hpp"
#include "fsdp/core/error.hpp"

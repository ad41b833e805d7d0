// How much memory this process may still take, for refusing a model before allocating it.
#pragma once

#include <cstdint>

namespace tformer {

// $TFORMER_MEMORY_LIMIT (bytes) when set (tests use it); else MemAvailable from /proc/meminfo;
// else the physical memory sysconf reports; else UINT64_MAX.
uint64_t available_memory_bytes();

}  // namespace tformer

// cpbench_micro under mpirun: every rank must run the same cases in the same order, or the
// communication cases meet in different collectives and hang. micro_main.cpp refuses random
// interleaving on more than one rank; each communication case starts with agree_on_case, which
// aborts every rank with a message when the ranks reached different cases.
#pragma once
#include <cstdint>

namespace cpbench::micro {

// Collective over the world (no-op on one rank): compares a hash of (case, argument) across
// ranks and aborts (exit 2) naming this rank and its case on a mismatch.
void agree_on_case(const char* case_name, int64_t arg);

}  // namespace cpbench::micro

// First line of every benchmark case that communicates.
#define CPBENCH_MICRO_SAME_CASE(state) ::cpbench::micro::agree_on_case(__func__, (state).range(0))

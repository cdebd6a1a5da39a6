# Environment of the sanitizer stage (sourced by scripts/test.sh): findings end the process with
# a non-zero exit (ctest fails), Open MPI's own leaks are suppressed (lsan.supp), and Open MPI's
# memory hooks, which patch malloc under ASan's feet, are off. Allocation stacks are unwound
# exactly (fast_unwind_on_malloc=0): Open MPI's components are built without frame pointers, and
# the fast unwinder stops inside them, leaving stacks that no suppression can match.
_supp_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=86:detect_stack_use_after_return=0:fast_unwind_on_malloc=0:allocator_may_return_null=0"
export LSAN_OPTIONS="suppressions=${_supp_dir}/lsan.supp:print_suppressions=0:exitcode=86"
export UBSAN_OPTIONS="suppressions=${_supp_dir}/ubsan.supp:print_stacktrace=1:halt_on_error=1:exitcode=86"
export OMPI_MCA_memory="^patcher"
unset _supp_dir

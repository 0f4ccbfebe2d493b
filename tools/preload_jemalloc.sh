# Sourced by every recipe's path.sh: preload jemalloc into the recipe's processes when it is
# installed (apt install libjemalloc2; conda install -c conda-forge jemalloc), as torch's own
# CPU launcher does with --enable_jemalloc (torch.backends.xeon.run_cpu).
#
# Why: a training step on the CPU allocates and frees tensors of tens to hundreds of MB (the
# attention scores, the CTC and attention losses' log-softmax over the vocabulary).  glibc's
# malloc serves each from a fresh mmap and gives it back at once, so every step faults its
# pages in again (200,000 page faults a second, ~40 % of the time in the kernel, measured on
# the Whisper digits run); jemalloc keeps freed memory for reuse.  Measured on the digits
# recipe: docs/performance.md ("The memory allocator on the CPU").
#
#   ASRKIT_ALLOCATOR=glibc     keep glibc's malloc (the default is jemalloc when found)
#   ASRKIT_JEMALLOC=PATH       the library to preload (default: the first libjemalloc.so.2
#                              found in the usual library folders and the venv's or conda's lib/)
#   MALLOC_CONF                kept as given; the default below otherwise
#
# Nothing changes when jemalloc is not installed or LD_PRELOAD names it already.
if [ "${ASRKIT_ALLOCATOR:-jemalloc}" = jemalloc ] && [[ "${LD_PRELOAD:-}" != *libjemalloc* ]]; then
  _asrkit_je=${ASRKIT_JEMALLOC:-}
  if [ -z "$_asrkit_je" ]; then
    for _asrkit_dir in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib \
                       /usr/local/lib ${CONDA_PREFIX:+"$CONDA_PREFIX/lib"} ${VIRTUAL_ENV:+"$VIRTUAL_ENV/lib"}; do
      if [ -e "$_asrkit_dir/libjemalloc.so.2" ]; then _asrkit_je=$_asrkit_dir/libjemalloc.so.2; break; fi
    done
  fi
  if [ -n "$_asrkit_je" ] && [ -e "$_asrkit_je" ]; then
    export LD_PRELOAD="$_asrkit_je${LD_PRELOAD:+:$LD_PRELOAD}"
    # no separate arena that returns large blocks at once (oversize_threshold:0); freed pages
    # kept 30 s before they go back to the kernel; purging off the training threads
    export MALLOC_CONF="${MALLOC_CONF:-oversize_threshold:0,dirty_decay_ms:30000,muzzy_decay_ms:30000,background_thread:true}"
  elif [ -n "${ASRKIT_JEMALLOC:-}" ]; then
    echo "[path.sh] ASRKIT_JEMALLOC=$ASRKIT_JEMALLOC: no such file; glibc's malloc is used" >&2
  fi
  unset _asrkit_je _asrkit_dir
fi

// Compiled into a module only for a manylinux build (KP_GLIBC_STUBS, see KpExtension.cmake and
// tools/manylinux.py): the module links libstdc++ statically, and the build machine's libstdc++.a
// (and code compiled against its headers) uses two glibc symbols newer than the stubs' glibc 2.28.
// Hidden definitions here bind those references inside the module, so it needs nothing newer than
// 2.28 from the system. `tools/manylinux.py check` lists any other such symbol a build leaves
// undefined; it belongs here.
#include <unistd.h>  // getentropy; not <stdlib.h>: glibc 2.36's declares arc4random noexcept

extern "C" {

// glibc 2.32: nonzero while the process has a single thread, which lets libstdc++ skip atomic
// reference counting. 0 ("may be multi-threaded") is always correct, merely never the fast path.
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

// glibc 2.36: std::random_device's "arc4random" source (random.o comes in with the COW string
// instantiations; kp never makes a random_device). getentropy is glibc 2.25.
__attribute__((visibility("hidden"))) unsigned int arc4random(void) {
  unsigned int v;
  if (getentropy(&v, sizeof v) != 0) __builtin_abort();
  return v;
}

}  // extern "C"

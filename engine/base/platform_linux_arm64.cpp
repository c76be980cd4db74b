// The platform layer's arm64 CPU features on Linux (see platform.h): the kernel's HWCAP words,
// whose bits are arm64's own (asm/hwcap.h), hence a file built only for Linux on arm64.
#include <asm/hwcap.h>
#include <sys/auxv.h>

#include "engine/base/platform.h"

namespace waste {

Arm64Features arm64_cpu_features() {
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  Arm64Features f;
  f.neon = hwcap & HWCAP_ASIMD;
  f.fp16 = hwcap & HWCAP_ASIMDHP;
  f.dotprod = hwcap & HWCAP_ASIMDDP;
  f.i8mm = hwcap2 & HWCAP2_I8MM;
  return f;
}

}  // namespace waste

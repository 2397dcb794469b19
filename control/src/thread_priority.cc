#include "control/src/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace mt::control {

void LowerThisThread() {
  thread_local bool lowered = false;
  if (lowered) return;
  lowered = true;
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (errno == 0 && now < kControlThreadNice)
    setpriority(PRIO_PROCESS, tid, kControlThreadNice);
}

}  // namespace mt::control

// The control plane runs below the service it controls.
//
// Its threads (the listeners', which run TLS and read every frame, and
// gRPC's, which parse and answer calls) share the cores with the
// service's workers. A client can keep them busy without breaking any
// limit: refused calls, answers it reads as fast as they come, new TLS
// connections. At the same priority as the workers, that CPU came out of
// the workload's rate (measured: 20 read-only clients refused in a loop
// cut it to 90%); a few notches lower, the kernel gives the workers the
// cores first and the control plane what is left, which on a service
// that is not saturated is plenty (GetInfo takes microseconds). The
// threads that run Python are not lowered: a thread attached to the
// interpreter must reach a stop-the-world pause promptly.

#ifndef MT_ASYNCIO_CONTROL_SRC_THREAD_PRIORITY_H_
#define MT_ASYNCIO_CONTROL_SRC_THREAD_PRIORITY_H_

namespace mt::control {

// The nice value of the control plane's threads (the service's own are
// usually 0). Linux applies it to the one thread.
inline constexpr int kControlThreadNice = 10;

// Lowers the calling thread to kControlThreadNice, once per thread (best
// effort: a thread already lower stays so).
void LowerThisThread();

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_THREAD_PRIORITY_H_
